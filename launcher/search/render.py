"""Mesh search output: a ranked table, a JSON object and a PNG of memory vs step time."""
import dataclasses
import json
from pathlib import Path

COLUMNS = ("rank", "tp", "pp", "cp", "ep", "etp", "dp", "edp", "engines x tp", "trainer GiB", "inference GiB",
           "coloc peak GiB", "headroom GiB", "step s", "warnings")


def _row(i, p) -> tuple:
    peak = "-" if p.colocated_peak_gib is None else f"{p.colocated_peak_gib:.1f}"
    return (i, p.tp, p.pp, p.cp, p.ep, p.etp, p.dp, p.edp, f"{p.inference_engines} x {p.inference_tp}",
            f"{p.trainer_gib:.1f}", f"{p.inference_gib:.1f}", peak, f"{p.headroom_gib:.1f}",
            f"{p.step.total_s:,.0f}", ",".join(p.warnings) or "-")


def mesh_table(result, title: str, limit: int | None = None) -> str:
    rows = [COLUMNS] + [_row(i + 1, p) for i, p in enumerate(result.meshes[:limit])]
    widths = [max(len(str(r[c])) for r in rows) for c in range(len(COLUMNS))]
    lines = ["  ".join(str(v).rjust(w) for v, w in zip(r, widths, strict=True)) for r in rows]
    rejected = ", ".join(f"{k} x{v}" for k, v in result.rejected_by_rule.most_common())
    head = f"{title}: {len(result.meshes)} legal of {result.candidates} candidates (rejected by first error: {rejected})"
    return head + "\n" + "\n".join(lines) + "\n"


def mesh_json(result, recipe: str, cluster: str) -> str:
    meshes = []
    for p in result.meshes:
        entry = dataclasses.asdict(p)
        entry["estimated_step_s"] = p.step.total_s
        meshes.append(entry)
    return json.dumps({"recipe": recipe, "cluster": cluster, "candidates": result.candidates,
                       "rejected_by_rule": dict(result.rejected_by_rule), "meshes": meshes}, indent=2)


def mesh_plot(result, path: Path, title: str) -> Path:
    """Per legal mesh: per-GPU peak memory against estimated step time (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    mem = [p.trainer_gib if p.colocated_peak_gib is None else p.colocated_peak_gib for p in result.meshes]
    step = [p.step.total_s for p in result.meshes]
    ax.scatter(step, mem, s=18, alpha=0.7)
    for p, x, y in list(zip(result.meshes, step, mem, strict=True))[:8]:
        ax.annotate(f"tp{p.tp} ep{p.ep} etp{p.etp} | {p.inference_engines}x{p.inference_tp}", (x, y), fontsize=7)
    ax.set_xlabel("estimated step time (s)")
    ax.set_ylabel("peak memory per GPU (GiB)")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
