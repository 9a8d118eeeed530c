"""The reward/length curve PNG written into the run directory at the end of a run."""
import json
from pathlib import Path


def write_curves(metrics_file: Path, out_file: Path) -> Path | None:
    if not metrics_file.exists():
        return None
    rows = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    top.plot(steps, [r["reward"] for r in rows], label="reward")
    top.plot(steps, [r["accuracy"] for r in rows], label="accuracy")
    top.set_ylabel("mean over samples")
    top.legend()
    bottom.plot(steps, [r["response_len"] for r in rows], color="tab:green")
    bottom.set_ylabel("response length (tokens)")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_file, dpi=100)
    plt.close(fig)
    return out_file
