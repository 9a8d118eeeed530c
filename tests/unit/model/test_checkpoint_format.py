"""The real on-disk checkpoint format in and out of the Megatron model.

The fixture is a tiny glm5_next written by transformers' own `save_pretrained` (several
shards + index). Each CPU mesh loads it streamed (every rank reads only its slices) and
exports it again; the export must equal the files bit for bit, under the same names.

    .venv/bin/python -m pytest tests/unit/model/test_checkpoint_format.py -q
"""
import json
import shutil
from pathlib import Path

import pytest

from tests.unit.megatron_world import init_world_of_one, megatron_core, run_on_two_ranks  # noqa: F401  (skips without megatron-core)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

MESHES = {"dp2": (1, 1, 1), "tp2": (2, 1, 1), "ep2": (1, 2, 1), "tp2_ep2": (2, 2, 1)}


def _language_tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    out = {}
    for shard in sorted(folder.glob("*.safetensors")):
        out.update({k: v for k, v in load_file(shard).items() if not k.startswith("model.visual.")})
    return out


def _model_spec(folder: Path, dtype="float32"):
    from model.megatron.spec import ModelSpec
    from tests.shared_compose import compose_shipped

    cfg = compose_shipped(["model=tiny", f"model.hf_path={folder}"]).config
    return ModelSpec.from_arch(cfg.model.arch, dtype, pad_token_id=0)


class _Spy:
    """A SafetensorsFolder that records which tensors and files were read."""

    def __init__(self, folder):
        from model.megatron.reader import SafetensorsFolder

        self.inner = SafetensorsFolder(folder)
        self.read_names: list[str] = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def read(self, name, index):
        self.read_names.append(name)
        return self.inner.read(name, index)


def _mesh_round_trip(folder: Path, mesh) -> dict:
    import torch.distributed as dist

    from model.megatron.build import build_model, init_parallel
    from model.megatron.weights import hf_stream, load_weights

    init_parallel(*mesh)
    model = build_model(_model_spec(folder), "cpu")
    spy = _Spy(folder)
    load_weights(model, spy)
    exported = {n: t.clone() for n, t in hf_stream(model)}
    want = _language_tensors(folder)
    equal = list(exported) == [n for n in exported if n in want] and set(exported) == set(want) and all(
        torch.equal(exported[n], want[n]) and exported[n].dtype == want[n].dtype for n in want)
    experts = sorted({int(n.split(".experts.")[1].split(".")[0]) for n in spy.read_names if ".experts." in n})
    return {"equal": equal, "experts_read": experts, "rank": dist.get_rank()}


def _worker(rank: int, store: str, folder: str, queue) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    queue.put((rank, {name: _mesh_round_trip(Path(folder), mesh) for name, mesh in MESHES.items()}))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def mesh_results(tiny_glm_checkpoint) -> dict:
    return run_on_two_ranks(_worker, str(tiny_glm_checkpoint))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MESHES))
def test_every_mesh_loads_the_checkpoint_and_exports_it_bit_exact(mesh_results, name):
    for rank in (0, 1):
        assert mesh_results[rank][name]["equal"], (rank, name)
    ep = MESHES[name][1]
    experts = [mesh_results[r][name]["experts_read"] for r in (0, 1)]
    if ep == 1:
        assert experts[0] == experts[1] == list(range(8))
    else:  # each rank read only its own routed experts
        assert experts == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_streamed_sync_names_are_the_save_pretrained_key_set(tiny_glm_checkpoint):
    """Both trainers ship what `save_pretrained` wrote, and nothing under another name."""
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.build import build_model
    from model.megatron.weights import hf_stream, load_model_folder
    from tests.shared_compose import compose_shipped

    init_world_of_one()
    want = _language_tensors(tiny_glm_checkpoint)
    meg = build_model(_model_spec(tiny_glm_checkpoint), "cpu")
    load_model_folder(meg, str(tiny_glm_checkpoint))
    names = [n for n, _ in hf_stream(meg)]
    assert len(names) == len(set(names)) and set(names) == set(want)
    cfg = compose_shipped(["model=tiny", f"model.hf_path={tiny_glm_checkpoint}"]).config
    hf_state = checkpoint_state(build_hf(cfg.model, pad_id=0, seed=0))
    assert set(hf_state) == set(want) and all(torch.equal(hf_state[n], want[n]) for n in want)


def _damaged_copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def _index(folder: Path) -> dict:
    return json.loads((folder / "model.safetensors.index.json").read_text())


def _load(folder: Path):
    from model.megatron.build import build_model
    from model.megatron.weights import load_model_folder

    init_world_of_one()
    load_model_folder(build_model(_model_spec(folder), "cpu"), str(folder))


def _rewrite_tensor(folder: Path, name: str, tensor) -> str:
    """Replace one tensor of its shard (the rest of the shard as it was)."""
    from safetensors.torch import load_file, save_file

    file = _index(folder)["weight_map"][name]
    tensors = load_file(folder / file)
    tensors[name] = tensor
    save_file(tensors, folder / file, metadata={"format": "pt"})
    return file


def test_truncated_shard_names_the_file_and_tensor(tiny_glm_checkpoint, tmp_path):
    from model.megatron.reader import CheckpointFormatError

    folder = _damaged_copy(tiny_glm_checkpoint, tmp_path)
    name = "model.language_model.layers.1.mlp.experts.3.up_proj.weight"
    file = folder / _index(folder)["weight_map"][name]
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])
    with pytest.raises(CheckpointFormatError, match=str(file)):
        _load(folder)


def test_wrong_shape_names_the_tensor_file_and_shapes(tiny_glm_checkpoint, tmp_path):
    from model.megatron.reader import CheckpointFormatError

    folder = _damaged_copy(tiny_glm_checkpoint, tmp_path)
    name = "model.language_model.layers.2.self_attn.f_a_proj.weight"
    file = _rewrite_tensor(folder, name, torch.zeros(8, 64))
    with pytest.raises(CheckpointFormatError, match=rf"shape \[16, 64\]: {name} \[8, 64\] in .*{file}"):
        _load(folder)


def test_integer_dtype_is_refused(tiny_glm_checkpoint, tmp_path):
    from model.megatron.reader import CheckpointFormatError

    folder = _damaged_copy(tiny_glm_checkpoint, tmp_path)
    name = "model.language_model.norm.weight"
    _rewrite_tensor(folder, name, torch.ones(64, dtype=torch.int32))
    with pytest.raises(CheckpointFormatError, match=rf"{name} has dtype I32"):
        _load(folder)


def test_index_naming_an_absent_file_is_named(tiny_glm_checkpoint, tmp_path):
    from model.megatron.reader import CheckpointFormatError

    folder = _damaged_copy(tiny_glm_checkpoint, tmp_path)
    index = _index(folder)
    gone = index["weight_map"]["lm_head.weight"]
    (folder / gone).unlink()
    with pytest.raises(CheckpointFormatError, match=f"{gone}: the index names this shard but the file does not exist"):
        _load(folder)


@pytest.mark.slow
def test_tensor_missing_from_the_index_is_named(tiny_glm_checkpoint, tmp_path):
    from model.megatron.reader import CheckpointFormatError

    folder = _damaged_copy(tiny_glm_checkpoint, tmp_path)
    index = _index(folder)
    del index["weight_map"]["model.language_model.layers.0.hc_ffn_fn"]
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointFormatError, match="layers.0.hc_ffn_fn is not in the checkpoint"):
        _load(folder)
