"""`data.environment:` multi-turn episodes with tools (launcher/rl/episodes.py): an environment in
SkyRL-Gym's BaseTextEnv interface steps on each model turn; its observations are appended as
tokens the model does not train on."""
from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class EnvConfig:
    cls: Optional[str] = None
    """The environment "package.module:Class" (SkyRL-Gym's BaseTextEnv interface: built as
    Class(env_config, extras), then init(prompt_messages) and step(model_text) -> observations,
    reward, done, metadata per turn), e.g. launcher.envs.code_math:CodeMathEnv. Imported once in
    the driver when the run starts (the current directory and PYTHONPATH are on its path). An
    episode's reward is the sum of its steps' rewards (data.reward_fn is not used); its accuracy
    the last step's metadata "acc" when given, else reward >= 1. null = one response per prompt."""
    config: dict[str, Any] = field(default_factory=dict)
    """Handed to the class as env_config (tool limits and the like: the class's own keys)."""
    max_turns: int = 4
    """Model turns per episode at most, >= 1 (also handed to the class as extras["max_turns"])."""
    max_turn_tokens: Optional[int] = None
    """Tokens one model turn may generate, >= 1; null = algorithm.max_response_len. The whole
    episode after the prompt (model and observation tokens) stays within algorithm.max_response_len."""
    step_timeout_s: float = 30.0
    """One env.step (its tools included) at most, > 0: past it the episode ends with reward 0
    and is counted in the step's tool_timeouts; the run goes on."""
    workers: int = 16
    """Threads running env steps at once (an episode's tools run off the engines, which keep
    generating other chunks meanwhile), >= 1."""
