"""Per-step metrics: one fixed-format console line, metrics.jsonl, and wandb when configured.

`kl` is the k3 KL to the reference model when algorithm.kl_coef > 0; otherwise the k3 KL
between the policy that generated the samples (engine log-probs) and the one trained on
them: ~0 in the synchronous loop (a nonzero value there means engine and trainer
disagree), the drift of stale samples in the async one. That one is also `rollout_kl`,
beside the other trainer-vs-rollout keys of every training row (the trainer's old log-probs
against the engine's, over the step's response tokens): `logprob_abs_diff_mean` and
`logprob_abs_diff_max` (|old - rollout|) and `is_masked_frac` (the share of tokens that
algorithm.off_policy's masks dropped). The samples' degeneration signs (rl/degeneration.py):
`repeat_ngram_frac`, `collapse_frac` and the count `nonfinite_logprobs`; with `truncated_frac`
run.rollout_checks bounds them (driver/loop/rollout_health.py).
Timing keys end in `_s`; they are the only values that differ between two runs with the
same seed (the resume test compares everything else).

Each launch first writes a start-up row, `{"step": N, "startup": {actor: {phase: s}}, ...}`
(N: the step it starts or resumes from). Held-out evaluations (launcher/driver/loop/evaluate.py)
are rows of their own, `{"step": N, "eval/...": ...}`, written after step N's training row
(step 0: before the first step); a row is a training row when it has `reward`, an evaluation
row when it has `eval/n`, the start-up row when it has `startup`.

A training row's means over the step's generated samples (step.SAMPLE_MEANS: reward,
accuracy, response_len, ...) are null when it generated none: an async step may train on
groups queued earlier while no new group finished, and so may a sync step with partial
rollouts whose groups were all carried on. The console prints `-` for them, the curves skip
them, and wandb is not sent them (wandb_values).
"""
import json
import os
import sys
import time
from pathlib import Path

from launcher.config.schema.choices import LogBackend, WandbMode
from launcher.driver.records.jsonl_rows import keep_rows
from launcher.driver.records.plot import EVAL_MARK, write_curves

METRICS_FILE = "metrics.jsonl"
STARTUP_MARK = "startup"
"""Present in the start-up row only (one per launch, before its first step's row)."""


def _fmt_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return f"{seconds // 60}m{seconds % 60:02d}s"


def _fixed(value: float | None, spec: str) -> str:
    """`value` formatted by `spec`, or `-` for a mean the step had no sample for."""
    return "-" if value is None else format(value, spec)


def console_line(m: dict) -> str:
    line = (f"step {m['step']:>4}/{m['steps']} | reward {_fixed(m['reward'], '.3f')} acc {_fixed(m['accuracy'], '.2f')} | "
            f"kl {max(m.get('kl', 0.0), 0.0):.4f} ent {m.get('entropy', 0.0):.3f} | len {_fixed(m['response_len'], '.1f')} | "
            f"rollout {m['rollout_s']:.2f}s train {m['train_s']:.2f}s sync {m['sync_s']:.2f}s | "
            f"{m['tokens_per_s']:.0f} tok/s | eta {_fmt_duration(m['eta_s'])}")
    if "staleness_max" in m:
        line += f" | stale {m['staleness_mean']:.1f}/{m['staleness_max']}"
    line += f" | rep {_fixed(m.get('repeat_ngram_frac'), '.2f')} collapse {_fixed(m.get('collapse_frac'), '.2f')}"
    if m.get("turns_mean") is not None:  # multi-turn episodes (data.environment)
        line += (f" | turns {m['turns_mean']:.1f} tools {m['tool_calls']} (err {_fixed(m.get('tool_error_frac'), '.2f')}"
                 f" timeout {_fixed(m.get('tool_timeout_frac'), '.2f')}) obs {m['observation_tokens']}")
    if m.get("nonfinite_logprobs"):
        line += f" | NON-FINITE LOG-PROBS {m['nonfinite_logprobs']}"
    return line


def eval_line(m: dict) -> str:
    line = (f"eval {m['step']:>4}/{m['steps']} | greedy acc {m['eval/greedy_acc']:.3f} "
            f"reward {m['eval/greedy_reward']:.3f}")
    if "eval/mean_at_k_acc" in m:
        k = m["eval/k"]
        line += (f" | mean@{k} acc {m['eval/mean_at_k_acc']:.3f} reward {m['eval/mean_reward']:.3f} "
                 f"pass@{k} {m['eval/pass_at_k']:.2f}")
    return line + f" | n {m['eval/n']} | len {m['eval/response_len']:.1f} | {m['eval/time_s']:.2f}s"


def wandb_values(metrics: dict) -> dict:
    """The row without its null values. wandb 0.31 takes a None without complaint but then
    drops the key from the run summary, so a last async step that generated nothing would
    erase the run's last reward there; left out, the summary keeps the last real one and
    the chart skips the step, as the curves do."""
    return {key: value for key, value in metrics.items() if value is not None}


class StepLogger:
    def __init__(self, run_dir: Path, logging_cfg, run_cfg, start_step: int, config_dict: dict):
        self.run_dir, self.total = Path(run_dir), run_cfg.steps
        self.backends = {LogBackend(b) for b in logging_cfg.backends}
        self.start_step, self.started = start_step, time.monotonic()
        self.metrics_file = self.run_dir / METRICS_FILE
        self._truncate_after(start_step)
        self.wandb = self._init_wandb(logging_cfg.wandb, run_cfg.name, config_dict) if LogBackend.wandb in self.backends else None

    def _truncate_after(self, step: int) -> None:
        """On resume, forget steps past the checkpoint: they are about to be redone, and so is
        the checkpoint's own evaluation (evaluate.py: the resumed run evaluates it first;
        step 0 has no checkpoint, so a fresh start keeps no row)."""
        keep_rows(self.metrics_file, lambda row: row["step"] < step or (
            row["step"] == step and EVAL_MARK not in row and STARTUP_MARK not in row))

    def _init_wandb(self, wandb_cfg, name: str, config_dict: dict):
        import wandb

        mode = WandbMode(wandb_cfg.mode)
        if mode is WandbMode.online and not os.environ.get("WANDB_API_KEY"):
            sys.stderr.write("wandb: no WANDB_API_KEY, logging offline (sync later with `wandb sync`)\n")
            mode = WandbMode.offline
        return wandb.init(project=wandb_cfg.project, entity=wandb_cfg.entity, mode=mode.value, name=name,
                          dir=str(self.run_dir), config=config_dict, resume="allow")

    def eta_s(self, step: int) -> float:
        done = step - self.start_step
        per_step = (time.monotonic() - self.started) / max(done, 1)
        return per_step * (self.total - step)

    def log(self, metrics: dict) -> None:
        metrics = {"steps": self.total, **metrics, "eta_s": self.eta_s(metrics["step"])}
        self._write(metrics, console_line(metrics))

    def log_startup(self, ray_s: float, phases: dict[str, dict[str, float]], estimate_s: float) -> None:
        """The start-up row (STARTUP_MARK): seconds per phase per actor (driver/actors/startup.py),
        Ray's own start counted as the driver's first phase, against the plan's estimate."""
        phases = {**phases, "driver": {"ray": round(ray_s, 2), **phases.get("driver", {})}}
        total = sum(phases["driver"].values())
        row = {"step": self.start_step, STARTUP_MARK: phases, "startup_s": round(total, 2),
               "startup_estimate_s": round(estimate_s, 1)}
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in phases["driver"].items())
        self._write(row, f"start-up {total:.1f}s (plan {estimate_s:.0f}s): {steps}")

    def log_eval(self, metrics: dict) -> None:
        """One evaluation row (evaluate.Evaluator.collect), to the same sinks as the steps."""
        metrics = {"steps": self.total, **metrics}
        self._write(metrics, eval_line(metrics))

    def _write(self, metrics: dict, line: str) -> None:
        if LogBackend.console in self.backends:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if LogBackend.jsonl in self.backends:
            with self.metrics_file.open("a") as f:
                f.write(json.dumps(metrics) + "\n")
        if self.wandb is not None:
            self.wandb.log(wandb_values(metrics), step=metrics["step"])

    def close(self) -> Path | None:
        if self.wandb is not None:
            self.wandb.finish()
            self.wandb = None
        return write_curves(self.metrics_file, self.run_dir / "curves.png")
