"""Held-out evaluation: greedy accuracy and mean@k of the engines' current weights.

    run.eval_every_steps: 20     # after steps 20, 40, ... and after the last step
    run.eval_before_train: true  # and the initial weights (step 0)
    python -m launcher eval runs/NAME/checkpoints/step_000100 [data.val_path=...]   # one checkpoint

The problems are data.val_path (first run.eval_problems of them when set), read by the
training data loader (`_read_problems`, the one place that knows how). A synthetic task
without val_path evaluates on `task.generate(run.seed, HELD_OUT_BASE + i)`: indices the
training stream (problem i = generate(seed, i), i = data position) never reaches. For tasks
with few distinct problems (synthetic_copy has 100 strings) those repeat training prompts:
held out by index, not by content.

Each problem gets one greedy response (temperature 0) and run.eval_samples responses at
algorithm.temperature / top_p, with max_response_len tokens, scored by the run's scorer
(reward_fn.RewardScorer, what rollout.score_group calls). One metrics.jsonl row per
evaluation, `{"step": N, "eval/...": ...}`, after step N's training row, and to wandb at step N:

    eval/greedy_acc     share of problems whose greedy response is correct
    eval/greedy_reward  mean task reward of the greedy responses
    eval/mean_at_k_acc  share of the k sampled responses that are correct (mean@k)
    eval/mean_reward    mean task reward of the k sampled responses
    eval/pass_at_k      share of problems with at least one correct sampled response
    eval/response_len   mean greedy response length (tokens)
    eval/reward_errors  responses scored 0 because the scorer failed
    eval/n, eval/k      problems, samples per problem (no mean@k keys when k = 0)
    eval/policy_version the weights' version (every response reports the same one)
    eval/time_s         from sending the requests to the last result

With data.environment (multi-turn episodes, episodes.py) each response is an episode played with the
run's environment, scored by the environment's reward and accuracy, not the task's scorer;
eval/response_len counts the model's tokens, eval/reward_errors the env steps that raised or timed
out. Every turn of every evaluation episode is played when the evaluation is sent, on the weights
the engines hold then: a later turn sent at collection time could run behind the next update
(the async loop's). The driver waits for them, so the evaluation's seconds are the trainer's idle
seconds in the async loop.

What is evaluated at step N: the policy after step N (version `state.policy_version`),
once the engines hold it.
- Sync loop: at the start of step N+1, when the engines are awake and before they generate
  (no sleep/wake of its own); the last step's after the loop.
- Async loop: the requests are sent right after step N's weight sync. An engine runs its
  calls from the driver in order and applies an update between two generate calls, so on
  every engine they run after update N and before update N+1: exactly version N's weights,
  while the trainer trains step N+1. With inference.update_mode in_flight they are not in
  flight (GenerationRequest.in_flight): they run on the engine's ordered calls, pausing the
  training chunk at a token boundary, and no update enters until they end. The results are collected before step N+1's checkpoint
  and training row. Engine time spent on them delays training chunks (more staleness).
- Resume from checkpoint N: the metrics file drops step N's eval row with everything past
  N, and the resumed run evaluates N again before its first step (its engines hold exactly
  checkpoint N's weights), so it matches an uninterrupted run row for row.

Evaluation leaves training as it would be without it: it draws nothing from the training
prompt stream (data_position), calls no trainer, and its requests carry their own seeds
(engines seed each request; no shared RNG), fixed per chunk and not per step, so every step
is measured on the same random numbers and `eval` of a checkpoint repeats the numbers its
run logged at that step (hf engines; vLLM on GPUs up to kernel nondeterminism).
"""
import dataclasses
import sys
import time
from dataclasses import dataclass

from launcher.contract.messages import SamplingParams
from launcher.driver.loop.episodes import EpisodeRunner, EpisodeSet
from launcher.driver.loop.rollout import make_chunks, sampling_params, split_generation
from launcher.driver.records.plot import EVAL_MARK
from launcher.plan.loop import groups_per_chunk
from launcher.rl.reward_fn import as_scorer
from launcher.rl.tasks import TASKS, Problem

HELD_OUT_BASE = 10**9
"""First generator index of a synthetic task's held-out problems (the stream reaches it after
10^9 prompts: never)."""
SYNTHETIC_PROBLEMS = 128
"""Held-out problems of a synthetic task when run.eval_problems is null."""
SEED_BASE = 0x5EED_E7A1
"""Eval request seeds: (run seed, this, chunk); unrelated to the training chunks' seeds."""


class EvalConfigError(ValueError):
    """Nothing to evaluate on (no data.val_path for a file-based task)."""


def _read_problems(data_cfg, seed: int, tokenizer, count: int | None, log) -> tuple[list[Problem], str]:
    """(problems, where from) read exactly as the training loader reads its prompts: the same
    columns, bad-row handling, prompt formatting and length filter for data.val_path; the same
    generator and formatting for a synthetic task's held-out indices. The adapter to
    launcher.driver.loop.data: nothing else here knows how problems are read."""
    from launcher.driver.loop.data import PromptStream, load_problems

    if data_cfg.val_path is not None:
        table = load_problems(data_cfg, tokenizer, data_cfg.val_path, key="data.val_path")
        log.write(table.report.summary() + "\n")
        return list(table[:count]), f"data.val_path={data_cfg.val_path}"
    if TASKS.get(data_cfg.task).generate is None:
        raise EvalConfigError(f"data.task={data_cfg.task} has no generator and data.val_path is null: nothing to "
                              "evaluate on; set data.val_path to a jsonl or parquet file")
    count = count or SYNTHETIC_PROBLEMS
    generator = PromptStream(dataclasses.replace(data_cfg, train_path=None), seed, tokenizer)
    held_out = range(HELD_OUT_BASE, HELD_OUT_BASE + count)
    source = f"{data_cfg.task} held-out (generator indices {held_out.start}..{held_out.stop - 1})"
    return [generator.problem(i) for i in held_out], source


def _prompt_ids(tokenizer, problems: list[Problem]) -> list[list[int]]:
    """Token ids of each prompt, as the loops encode training prompts."""
    return [tokenizer.encode(p.prompt) for p in problems]


@dataclass
class EvalSet:
    problems: list[Problem]
    prompt_ids: list[list[int]]
    source: str
    """Where the problems come from, for the console ("data.val_path=...")."""


def eval_set(config, tokenizer, log=None) -> EvalSet:
    """The held-out problems of a run (see the module docstring); the file's load summary goes to
    `log` (stdout by default, like the training file's)."""
    problems, source = _read_problems(config.data, config.run.seed, tokenizer, config.run.eval_problems,
                                      log or sys.stdout)
    if not problems:
        raise EvalConfigError(f"{source}: no problem to evaluate on")
    return EvalSet(problems, _prompt_ids(tokenizer, problems), source)


@dataclass
class PendingEval:
    step: int
    version: int
    started: float
    greedy: list
    """(group indices, ObjectRef or _Played) per chunk of greedy requests, in chunk order."""
    sampled: list
    """The same for the k-sample requests."""


@dataclass
class _Played:
    """A chunk of evaluation episodes (data.environment) and the request of its turn in flight."""

    episodes: EpisodeSet
    sampling: SamplingParams
    seed: int
    chunk: int
    ref: object = None


@dataclass
class _Scored:
    """One problem's responses of one kind (greedy or sampled)."""

    rewards: list[float]
    correct: list[bool]
    mean_len: float
    errors: int
    version: int


class Evaluator:
    def __init__(self, config, problems: EvalSet, episodes: EpisodeRunner | None = None):
        self.set, self.samples, self.episodes = problems, config.run.eval_samples, episodes
        self.every, self.before_train, self.last_step = (config.run.eval_every_steps, config.run.eval_before_train,
                                                         config.run.steps)
        alg, inf = config.algorithm, config.inference
        self.sampling = sampling_params(alg)
        self.greedy_sampling = SamplingParams(max_tokens=alg.max_response_len, temperature=0.0, top_p=1.0)
        self.seed, self.cap = config.run.seed, inf.concurrency_per_engine

    def due(self, step: int) -> bool:
        """Step 0 with eval_before_train; every eval_every_steps-th step and the last one."""
        if step == 0:
            return self.before_train
        return self.every > 0 and (step % self.every == 0 or step == self.last_step)

    def _send(self, engines, samples: int, sampling: SamplingParams, first_chunk: int) -> list:
        """(group indices, ObjectRef) per chunk sent; with an environment (group indices, _Played),
        the episodes' first turn sent."""
        n = len(self.set.prompt_ids)
        per_chunk = groups_per_chunk(self.cap, samples, n, len(engines))
        chunks = make_chunks(self.set.prompt_ids, samples, per_chunk, sampling,
                             lambda c: (self.seed * 1_000_003 + SEED_BASE + first_chunk + c) % (2**63))
        if self.episodes is None:
            return [(members, engines.submit(request, first_chunk + c)) for c, (members, request) in enumerate(chunks)]
        sent = []
        for c, (members, request) in enumerate(chunks):
            played = _Played(self.episodes.start(self.set.problems, self.set.prompt_ids, members, samples),
                             request.sampling, request.seed, first_chunk + c)
            sent.append((members, self._next_turn(engines, played)))
        return sent

    @staticmethod
    def _next_turn(engines, played: _Played) -> _Played:
        request = played.episodes.request(played.sampling, played.seed, in_flight=False)
        played.ref = engines.submit(request, played.chunk)
        return played

    def _play_out(self, engines, chunks: list) -> None:
        """Every turn of the episodes `chunks` started, until each has ended (see the module docstring)."""
        live = [played for _, played in chunks]
        while live:
            for played in live:
                if played.episodes.take_turn(engines.result(played.ref)):
                    played.ref = None
                else:
                    self._next_turn(engines, played)
            live = [played for played in live if played.ref is not None]

    def submit(self, engines, step: int, version: int) -> PendingEval:
        """Send every request now (they queue behind whatever the engines already have); with an
        environment, play every episode to its end now."""
        started = time.monotonic()
        greedy = self._send(engines, 1, self.greedy_sampling, 0)
        sampled = self._send(engines, self.samples, self.sampling, len(greedy)) if self.samples else []
        if self.episodes is not None:
            self._play_out(engines, greedy + sampled)
        return PendingEval(step, version, started, greedy, sampled)

    def collect(self, engines, pending: PendingEval, scorer, tokenizer) -> dict:
        """Wait for every response, score them; the evaluation row (step + eval/ keys)."""
        scorer = as_scorer(scorer) if self.episodes is None else None  # episodes: the environment scores
        greedy = self._score(engines, pending.greedy, 1, scorer, tokenizer)
        sampled = self._score(engines, pending.sampled, self.samples, scorer, tokenizer)
        versions = {s.version for s in greedy + sampled}
        if versions != {pending.version}:
            raise RuntimeError(f"evaluation of step {pending.step} expected policy version {pending.version} on "
                               f"every engine, got {sorted(versions)}: a weight update was not applied in order")
        n = len(greedy)
        row = {"step": pending.step, "eval/greedy_acc": sum(s.correct[0] for s in greedy) / n,
               "eval/greedy_reward": sum(s.rewards[0] for s in greedy) / n,
               "eval/response_len": sum(s.mean_len for s in greedy) / n}
        if sampled:
            row.update({"eval/mean_at_k_acc": sum(sum(s.correct) for s in sampled) / (n * self.samples),
                        "eval/mean_reward": sum(sum(s.rewards) for s in sampled) / (n * self.samples),
                        "eval/pass_at_k": sum(any(s.correct) for s in sampled) / n})
        row.update({"eval/reward_errors": sum(s.errors for s in greedy + sampled), EVAL_MARK: n, "eval/k": self.samples,
                    "eval/policy_version": pending.version, "eval/time_s": time.monotonic() - pending.started})
        return row

    def _score(self, engines, chunks: list, samples: int, scorer, tokenizer) -> list[_Scored]:
        """Each problem's scored responses, in problem order (chunks are read in the order sent)."""
        out: list[_Scored] = []
        for members, ref in chunks:
            if isinstance(ref, _Played):
                out += _score_episodes(members, ref.episodes, samples)
                continue
            gen = engines.result(ref)
            for g, rows in split_generation(members, gen, samples):
                scores = [scorer.score(tokenizer.decode(gen.tokens[r]), self.set.problems[g]) for r in rows]
                out.append(_Scored(rewards=[s.reward for s in scores], correct=[s.correct for s in scores],
                                   mean_len=sum(len(gen.tokens[r]) for r in rows) / samples,
                                   errors=sum(s.error is not None for s in scores), version=gen.policy_version))
        return out

    def run(self, engines, step: int, version: int, scorer, tokenizer) -> dict:
        return self.collect(engines, self.submit(engines, step, version), scorer, tokenizer)


def _score_episodes(members: list[int], episodes: EpisodeSet, samples: int) -> list[_Scored]:
    """A chunk's ended episodes as each problem's scored responses: the environment's rewards and
    accuracy, the model's tokens, env steps that raised or timed out as errors."""
    gen, rewards, correct, masks, stats = episodes.generation()
    return [_Scored(rewards=[rewards[r] for r in rows], correct=[correct[r] for r in rows],
                    mean_len=sum(sum(masks[r]) for r in rows) / samples,
                    errors=sum(stats[r]["step_errors"] + stats[r]["step_timeouts"] for r in rows),
                    version=gen.policy_version)
            for _, rows in split_generation(members, gen, samples)]


def make_evaluator(config, tokenizer, force: bool = False, log=None,
                   episodes: EpisodeRunner | None = None) -> Evaluator | None:
    """The run's evaluator, or None when run.eval_every_steps is 0 and eval_before_train is off
    (`force`: the eval command, whatever the run asked); `episodes`: the run's EpisodeRunner with
    data.environment."""
    if not (force or config.run.eval_every_steps > 0 or config.run.eval_before_train):
        return None
    return Evaluator(config, eval_set(config, tokenizer, log), episodes)
