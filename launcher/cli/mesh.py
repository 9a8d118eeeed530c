"""`python -m launcher mesh [overrides]`: legal meshes for the recipe's model and cluster, ranked."""
import sys
from pathlib import Path

from launcher.config.compose import compose
from launcher.search import search
from launcher.search.render import mesh_json, mesh_plot, mesh_table

TABLE_ROWS = 30


def cmd_mesh(overrides: list[str], fmt: str) -> int:
    composed = compose(overrides)
    cfg = composed.config
    result = search(cfg)
    label = f"{composed.choices['recipe']} on {cfg.cluster.name}"
    if fmt == "json":
        sys.stdout.write(mesh_json(result, composed.choices["recipe"], cfg.cluster.name) + "\n")
    else:
        sys.stdout.write(mesh_table(result, label, TABLE_ROWS))
    if result.meshes:
        out = Path(cfg.run.output_dir) / cfg.run.name
        out.mkdir(parents=True, exist_ok=True)
        png = mesh_plot(result, out / "mesh.png", f"legal meshes: {label}")
        (out / "mesh.json").write_text(mesh_json(result, composed.choices["recipe"], cfg.cluster.name))
        sys.stderr.write(f"wrote {png} and {out / 'mesh.json'}\n")
    return 0 if result.meshes else 1
