"""The checkpoint names (and shapes) a vLLM engine expects from a full weight update.

With `model.hf_path` they are the checkpoint's own tensors (its safetensors index, shapes
from the shard headers), less what the trainers never stream: the vision tower
(language_model_only) and layers past num_hidden_layers (MTP heads). A random-init model
has no checkpoint: its names are those of the HF model built from `model.arch` on the meta
device, under checkpoint names, which is what the trainers stream.
"""
import json
import re
from pathlib import Path

_LAYER = re.compile(r"\.layers\.(\d+)\.")
VISION_PREFIX = "model.visual."


def _streamed(name: str, num_layers: int) -> bool:
    if name.startswith(VISION_PREFIX):
        return False
    layer = _LAYER.search(name)
    return layer is None or int(layer.group(1)) < num_layers


def checkpoint_shapes(folder: str) -> dict[str, tuple]:
    """{tensor name: shape} of every tensor in a safetensors checkpoint folder (headers only)."""
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.exists() else \
        [p.name for p in sorted(folder.glob("*.safetensors"))]
    out = {}
    for file in files:
        with safe_open(str(folder / file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                out[name] = tuple(f.get_slice(name).get_shape())
    return out


def expected_shapes(model_cfg, pad_id: int) -> dict[str, tuple]:
    """{checkpoint name: shape} a full update must deliver, exactly once each."""
    arch = model_cfg.arch
    if model_cfg.hf_path:
        shapes = checkpoint_shapes(model_cfg.hf_path)
        return {n: s for n, s in shapes.items() if _streamed(n, arch.num_hidden_layers)}
    import torch

    from launcher.workers.hf.model import _model_class, hf_config, language_items
    from launcher.workers.hf.names import checkpoint_items

    cls = _model_class(arch.model_type)
    with torch.device("meta"):
        config = hf_config(arch, pad_id)
        model = cls.from_config(config) if hasattr(cls, "from_config") else cls._from_config(config)
    return {name: tuple(t.shape) for name, t in checkpoint_items(model, language_items(model))}
