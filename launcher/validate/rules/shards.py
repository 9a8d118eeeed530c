"""MODEL009: every language-model tensor in model.hf_path's shards has the shape the
checkpoint's config gives it (plan/shapes.py), read from each shard's safetensors header:
8 bytes of length, then JSON naming every tensor's dtype and shape. No tensor data is read
and nothing is imported, so a 584 GiB checkpoint is checked in well under a second, where the
trainers would find a mis-shaped tensor only after every rank has read its share."""
import functools
import json
import struct
from pathlib import Path

from launcher.config.model_folder import INDEX_FILE, SINGLE_FILE, load_json, weight_problems
from launcher.plan.shapes import checkpoint_shapes
from launcher.validate.registry import error, rule

HEADER_LIMIT_BYTES = 100 << 20
"""safetensors' own bound on a header; a larger length is not a safetensors file."""
SHOWN = 5


class HeaderError(Exception):
    """A shard whose header cannot be read; the message says why."""


@functools.lru_cache(maxsize=256)
def _header(file: Path, mtime: float) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} of one shard, cached per file version (sweeps check every point)."""
    with open(file, "rb") as f:
        raw = f.read(8)
        length = struct.unpack("<Q", raw)[0] if len(raw) == 8 else -1
        if not 0 < length <= HEADER_LIMIT_BYTES:
            raise HeaderError(f"starts with no safetensors header length ({len(raw)} bytes read, length {length})")
        try:
            header = json.loads(f.read(length))
            return {name: tuple(entry["shape"]) for name, entry in header.items() if name != "__metadata__"}
        except (ValueError, TypeError, KeyError, AttributeError) as err:
            raise HeaderError(f"has a damaged safetensors header ({type(err).__name__})") from err


def _shard_files(folder: Path) -> list[Path]:
    if not (folder / INDEX_FILE).is_file():
        return [folder / SINGLE_FILE]
    return sorted({folder / str(f) for f in load_json(folder / INDEX_FILE)["weight_map"].values()})


def _stored(folder: Path) -> tuple[dict[str, tuple[Path, tuple[int, ...]]], list[tuple[Path, str]]]:
    """(tensor name -> (its shard, its shape), (shard, why unreadable) for each unreadable one)."""
    stored, unreadable = {}, []
    for file in _shard_files(folder):
        try:
            stored.update({name: (file, shape) for name, shape in _header(file, file.stat().st_mtime).items()})
        except (HeaderError, OSError) as err:
            unreadable.append((file, str(err)))
    return stored, unreadable


@rule("MODEL009")
def shard_shapes_match(cfg, plan):
    """Each language-model tensor of the checkpoint's shards has its config's shape (glm5_next
    models; checked once MODEL003 found every shard)."""
    path = cfg.model.hf_path
    if path is None or not Path(path).is_dir():
        return
    expected = checkpoint_shapes(cfg.model.arch)  # every tensor of the model: ~35 ms for GLM-5.3-Flash
    if not expected or weight_problems(path):
        return
    stored, unreadable = _stored(Path(path))
    for file, problem in unreadable:
        yield error("model.hf_path", f"model.hf_path={path}: {file.name} {problem}",
                    "Every trainer rank and engine reads its tensors through that header.",
                    f"Re-download or re-convert {file.name} from the checkpoint's source.")
    wrong = [(name, *stored[name], shape) for name, shape in expected.items()
             if name in stored and stored[name][1] != shape]
    if not wrong:
        return
    shown = "; ".join(f"{file.name} holds {name} as {list(has)}, config.json gives {list(want)}"
                      for name, file, has, want in wrong[:SHOWN])
    more = f" (+{len(wrong) - SHOWN} more)" if len(wrong) > SHOWN else ""
    yield error("model.hf_path", f"model.hf_path={path}: {len(wrong)} tensor(s) of another shape than the checkpoint's "
                f"config gives: {shown}{more}",
                "Each trainer rank copies its slice of every tensor into a parameter of the config's shape: the "
                "copy fails after the whole cluster has started and read its shards.",
                "Re-download or re-convert the named shard(s) (compare their size and checksum with the source), or "
                "point model.hf_path at the checkpoint whose config.json describes these tensors.")
