"""The reward/length curve PNG written into the run directory at the end of a run.

Panels: reward and accuracy, response length, and (when the rows have them) the
trainer-vs-rollout mismatch per step (MISMATCH_SERIES: log-prob gap, rollout KL, masked share)
and the samples' degeneration signs (DEGENERATION_SERIES: repeated n-grams, single-id collapses,
truncation; rl/degeneration.py).

Training rows (those with `reward`) give the sample curves; evaluation rows (those with
EVAL_MARK, launcher/driver/loop/evaluate.py) add the held-out accuracy to the top panel. A curve
skips the steps without its value: a step that generated no sample has null means
(metrics.py), which are not a 0.
"""
import json
from pathlib import Path

EVAL_MARK = "eval/n"
"""Present in every evaluation row of metrics.jsonl and in no training row."""
EVAL_SERIES = (("eval/greedy_acc", "held-out greedy accuracy"), ("eval/mean_at_k_acc", "held-out mean@k accuracy"))
MISMATCH_SERIES = ("logprob_abs_diff_mean", "logprob_abs_diff_max", "rollout_kl", "is_masked_frac", "routing_agreement",
                   "indexer_agreement", "canary_gap_mean")
"""Trainer-vs-rollout keys of the training rows, drawn per step on their own panel."""
DEGENERATION_SERIES = ("repeat_ngram_frac", "collapse_frac", "truncated_frac")
"""Shares of a step's samples that look broken rather than bad, drawn on the last panel."""


def series(rows: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the rows that hold a value for `key` (not null)."""
    have = [r for r in rows if r.get(key) is not None]
    return [r["step"] for r in have], [r[key] for r in have]


def training_rows(rows: list[dict]) -> list[dict]:
    """The rows with `reward`, null or not: one per step trained."""
    return [r for r in rows if "reward" in r]


def panel(rows: list[dict], keys: tuple[str, ...]) -> list[tuple[str, list[int], list[float]]]:
    """(key, steps, values) of each of `keys` some training row has a value for."""
    curves = [(key, *series(training_rows(rows), key)) for key in keys]
    return [curve for curve in curves if curve[1]]


def accuracy_panel(rows: list[dict]) -> list[tuple[str, list[int], list[float]]]:
    """(label, steps, values) of each curve on the top panel: the samples' reward and accuracy
    per training step, then the held-out accuracies at the evaluated steps."""
    curves = [(key, *series(training_rows(rows), key)) for key in ("reward", "accuracy")]
    for key, label in EVAL_SERIES:
        steps, values = series([r for r in rows if EVAL_MARK in r], key)
        if steps:
            curves.append((label, steps, values))
    return curves


def write_curves(metrics_file: Path, out_file: Path) -> Path | None:
    if not metrics_file.exists():
        return None
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    extra = [(curves, label) for curves, label in ((panel(rows, MISMATCH_SERIES), "trainer vs rollout"),
                                                    (panel(rows, DEGENERATION_SERIES), "share of samples"))
             if curves]
    fig, axes = plt.subplots(2 + len(extra), 1, figsize=(7, 3 * (2 + len(extra))), sharex=True)
    top, middle = axes[0], axes[1]
    for label, steps, values in accuracy_panel(rows):
        held_out = label.startswith("held-out")
        top.plot(steps, values, label=label, marker="o" if held_out else None, linestyle="--" if held_out else "-")
    top.set_ylabel("mean over samples / problems")
    top.legend()
    middle.plot(*series(training_rows(rows), "response_len"), color="tab:green")
    middle.set_ylabel("response length (tokens)")
    for axis, (curves, label) in zip(axes[2:], extra, strict=True):
        for key, steps, values in curves:
            axis.plot(steps, values, label=key)
        axis.set_ylabel(label)
        axis.legend()
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file
