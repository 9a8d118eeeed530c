"""`logging.samples`: every sequence a step trains on, one JSON row each, in
`<run dir>/samples.jsonl`, appended step by step. A resumed run first forgets the rows of the
steps past its checkpoint (forget_after), as metrics.jsonl does: those steps are redone, and
their rows would otherwise appear twice with different samples.

A row: step (the training row it belongs to), trained_version (the trainer's policy version
that step updates), reward, prompt_ids, tokens (response ids), logprobs (the engine's
behaviour log-prob of each token) and token_versions (the policy version that produced each
token): enough to recompute every behaviour log-prob from the checkpoints of those versions.
"""
import json
from pathlib import Path

from launcher.driver.records.jsonl_rows import keep_rows

SAMPLES_FILE = "samples.jsonl"


def write_samples(run_dir: Path, step: int, trained_version: int, groups: list) -> None:
    with open(run_dir / SAMPLES_FILE, "a") as out:
        for g in groups:
            for tokens, logprobs, versions, reward in zip(g.responses, g.logprobs, g.token_versions, g.rewards,
                                                          strict=True):
                out.write(json.dumps({"step": step, "trained_version": trained_version, "reward": reward,
                                      "prompt_ids": g.prompt_ids, "tokens": tokens, "logprobs": logprobs,
                                      "token_versions": versions}) + "\n")


def forget_after(run_dir: Path, step: int) -> None:
    """Keep the rows of steps up to `step` (the checkpoint a run resumes from; 0: none)."""
    keep_rows(Path(run_dir) / SAMPLES_FILE, lambda row: row["step"] <= step)
