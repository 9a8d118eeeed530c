"""plan/shapes.py's table of checkpoint tensor shapes: its numbers add up to count_params
(which was checked against a meta-device build) for every glm5_next descriptor, it is exactly
what `save_pretrained` writes for the tiny model, and MODEL009 reads a real checkpoint's
headers as passing and names a shard rewritten with a wrong shape."""
import json
import math
import shutil

import pytest

from launcher.plan.params import count_params
from launcher.plan.shapes import LM, checkpoint_shapes
from launcher.validate.rules.shards import shard_shapes_match
from tests.shared_compose import compose_shipped


@pytest.mark.parametrize("descriptor", ["tiny", "glm5_3_flash_4layer", "glm5_3_flash"])
def test_the_shapes_add_up_to_the_parameter_count(descriptor):
    """Plus one correction bias per router: a buffer save_pretrained writes, not a parameter."""
    a = compose_shipped(["recipe=tiny_grpo", f"model={descriptor}"]).config.model.arch
    routers = sum(name.endswith("mlp.gate.e_score_correction_bias") for name in checkpoint_shapes(a))
    numel = sum(math.prod(shape) for shape in checkpoint_shapes(a).values())
    assert numel == count_params(a).total + routers * a.n_routed_experts


def test_a_model_type_without_a_table_has_no_shapes():
    assert checkpoint_shapes(compose_shipped(["recipe=tiny_qwen3_vllm"]).config.model.arch) == {}


def _headers(folder) -> dict[str, tuple[int, ...]]:
    out = {}
    for file in folder.glob("*.safetensors"):
        raw = file.read_bytes()
        header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
        out.update({k: tuple(v["shape"]) for k, v in header.items() if k != "__metadata__"})
    return out


@pytest.mark.slow
def test_the_table_is_what_save_pretrained_writes(tiny_glm_checkpoint):
    cfg = compose_shipped(["recipe=tiny_grpo", f"model.hf_path={tiny_glm_checkpoint}"]).config
    language = {k: v for k, v in _headers(tiny_glm_checkpoint).items() if k.startswith(LM) or k == "lm_head.weight"}
    assert language == checkpoint_shapes(cfg.model.arch)
    assert list(shard_shapes_match(cfg, None)) == []


@pytest.mark.slow
def test_a_shard_rewritten_with_a_wrong_shape_is_named(tiny_glm_checkpoint, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_glm_checkpoint, folder)
    index = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"]
    name = f"{LM}layers.1.mlp.experts.3.up_proj.weight"
    shard = folder / index[name]
    tensors = load_file(shard)
    tensors[name] = tensors[name][:, :60].copy()
    save_file(tensors, shard, metadata={"format": "pt"})
    (found,) = shard_shapes_match(compose_shipped(["recipe=tiny_grpo", f"model.hf_path={folder}"]).config, None)
    assert found.key == "model.hf_path" and found.severity == "error"
    assert f"{shard.name} holds {name} as [32, 60], config.json gives [32, 64]" in found.message
