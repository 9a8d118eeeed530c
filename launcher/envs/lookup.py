"""A tiny two-turn tool task the tiny model learns on a laptop (recipes/tiny_multiturn.yaml):
the prompt names a key ("c57="), the model's first turn calls a lookup tool, the tool answers
with the key's value, and the second turn must copy that value. The value is not in the prompt,
so only an episode that reads the observation scores.

- Turn 1 is the call. GLM's tool-call format (`<tool_call>lookup<arg_key>key</arg_key>
  <arg_value>57</arg_value></tool_call>`) looks up the key it names; any other text, the plain
  fallback a character model can produce, looks up the prompt's key.
- Turn 2 is the answer, scored per character against the value (as synthetic_copy scores:
  a random-init model needs partial credit to have anything to learn from).
"""
import re

from launcher.rl.rewards import score_exact_chars

CALL = re.compile(r"<tool_call>\s*lookup.*?<arg_value>\s*([0-9]+)\s*</arg_value>", re.S)
SHIFT = 3
"""value = each digit of the key plus SHIFT, mod 10: a table the model cannot guess from the key."""


def value_of(key: str) -> str:
    return "".join(str((int(d) + SHIFT) % 10) if d.isdigit() else d for d in key)


class LookupEnv:
    """SkyRL-Gym BaseTextEnv interface (launcher/driver/loop/episodes.py): two turns, the
    lookup's value as a tool observation in between, reward on the second."""

    def __init__(self, env_config: dict | None = None, extras: dict | None = None):
        self.key = str((extras or {}).get("reward_spec", {}).get("ground_truth", ""))
        self.turns, self.calls = 0, 0

    def init(self, prompt: list[dict]) -> tuple[list[dict], dict]:
        return prompt, {}

    def step(self, action: str) -> dict:
        self.turns += 1
        if self.turns == 1:
            found = CALL.search(action)
            self.calls += 1
            value = value_of(found.group(1) if found else self.key)
            return {"observations": [{"role": "tool", "content": value}], "reward": 0.0, "done": False,
                    "metadata": {}}
        reward, exact = score_exact_chars(action.strip(), value_of(self.key))
        return {"observations": [], "reward": reward, "done": True, "metadata": {"acc": exact}}

    def get_metrics(self) -> dict:
        return {"tool_calls": self.calls}

    def close(self) -> None:
        pass
