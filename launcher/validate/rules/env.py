"""Multi-turn episodes with tools (data.environment, launcher/driver/loop/episodes.py): the environment
class loads as the run's start loads it, and the run's other parts can carry episodes."""
import os

from launcher.rl.reward_fn import find_module_file
from launcher.validate.registry import error, rule, warning
from launcher.validate.rules.reward import probe, probe_code

KEY = "data.environment.cls"
ENV_PROBE = probe_code("launcher.rl.env_class", "load_env_class", "EnvError")


def _on(cfg) -> bool:
    return bool(cfg.data.environment.cls)


@rule("ENV001")
def env_class_loads(cfg, plan):
    """data.environment.cls is "package.module:Class", its module is on the path, imports, and the class has
    SkyRL-Gym's BaseTextEnv methods and constructor (checked in a child process, as DATA010 checks
    data.reward_fn)."""
    if not _on(cfg):
        return
    spec = cfg.data.environment.cls
    module, _, name = spec.partition(":")
    file = find_module_file(module) if module and name else None
    if file is None:
        what = "is not of the form 'package.module:Class'" if not (module and name) else f"module {module!r} not found"
        yield error(KEY, f"{KEY}={spec!r} {what}", "The driver imports the class when the run starts and builds one "
                    "environment per episode from it.",
                    "Name a class on the path (the current folder and PYTHONPATH), e.g. "
                    "data.environment.cls=launcher.envs.code_math:CodeMathEnv.")
        return
    found = probe(ENV_PROBE, KEY, spec, file, file.stat().st_mtime, os.getcwd(), os.environ.get("PYTHONPATH"))
    if found is not None:
        severity, message = found
        make = error if severity == "error" else warning
        yield make(KEY, message, "The run imports the class on the driver before Ray starts and builds one per "
                   "episode as Class(env_config, extras); it steps it with each model turn's text.",
                   f"Fix {file} so that `python -c 'from {module} import {name}'` works from this folder and the class "
                   "has init(prompt_messages) and step(text) (SkyRL-Gym's BaseTextEnv).")


@rule("ENV002")
def env_with_partial_rollouts(cfg, plan):
    """Partial rollouts carry unfinished single responses across steps: with data.environment they
    would cut episodes."""
    if not _on(cfg) or not cfg.algorithm.partial_rollout.max_tokens_per_step:
        return
    yield error("algorithm.partial_rollout.max_tokens_per_step",
                f"algorithm.partial_rollout.max_tokens_per_step={cfg.algorithm.partial_rollout.max_tokens_per_step}"
                f" with {KEY}", "Partial rollouts carry unfinished single responses across steps; an episode's "
                "turns and observations are not carried.",
                "Set algorithm.partial_rollout.max_tokens_per_step=0 with data.environment, or drop data.environment.cls.")


@rule("ENV003")
def env_turn_budget(cfg, plan):
    """A turn and the turns of an episode fit the episode's budget, algorithm.max_response_len."""
    if not _on(cfg):
        return
    env, budget = cfg.data.environment, cfg.algorithm.max_response_len
    if env.max_turn_tokens is not None and env.max_turn_tokens > budget:
        yield error("data.environment.max_turn_tokens", f"data.environment.max_turn_tokens={env.max_turn_tokens} > "
                    f"algorithm.max_response_len={budget}",
                    "The whole episode after the prompt (every model turn and observation) stays within "
                    "algorithm.max_response_len: no turn can be longer.",
                    f"Set data.environment.max_turn_tokens <= {budget}, or raise algorithm.max_response_len (the trainer's "
                    "memory plan follows it).")
    if env.max_turns > budget:
        yield error("data.environment.max_turns",
                    f"data.environment.max_turns={env.max_turns} > algorithm.max_response_len={budget}",
                    "Every turn generates at least one token, so the budget ends the episode before its last turns.",
                    "Lower data.environment.max_turns, or raise algorithm.max_response_len above it.")


@rule("ENV004")
def env_ignores_reward_fn(cfg, plan):
    """With data.environment the episode's reward is the environment's: a data.reward_fn is not called."""
    if _on(cfg) and cfg.data.reward_fn:
        yield warning("data.reward_fn", f"data.reward_fn={cfg.data.reward_fn!r} with {KEY}",
                      "An episode's reward is the sum of its environment steps' rewards; the reward function is "
                      "never called.", "Drop data.reward_fn, or score inside the environment's step.")
