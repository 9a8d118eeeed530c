"""The megatron trainer on a CUDA GPU from a checkpoint in the real on-disk format (skipped
without one): the tiny glm5_next fixture (transformers' save_pretrained, bf16, 5+ shards)
is read slice by slice straight into the GPU parameters, the exported stream equals the
files bit for bit, and the NCCL process groups carry trainer.nccl_timeout_s.

    PYTHONPATH=. python -m pytest tests/gpu/test_checkpoint_gpu.py -m gpu -q -s
"""
import pytest

from launcher.contract.spec import ActorSpec

torch = pytest.importorskip("torch")
pytest.importorskip("megatron.core", reason="megatron-core not installed")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

TIMEOUT_S = 1234


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    from launcher.config.compose import compose
    from launcher.workers.hf.tiny_checkpoint import write_tiny_checkpoint
    from launcher.workers.megatron import MegatronTrainer

    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("glm_bf16"), "tiny", dtype="bfloat16")
    cfg = compose(["recipe=tiny_grpo", "trainer.backend=megatron", "model.dtype=bfloat16", f"model.hf_path={folder}",
                   f"trainer.nccl_timeout_s={TIMEOUT_S}"]).config
    trainer = MegatronTrainer(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed("127.0.0.1", _free_port())  # no Ray on the device machine
    return trainer, folder


def test_checkpoint_loads_onto_the_gpu_and_exports_bit_exact(trainer):
    from safetensors.torch import load_file

    trainer, folder = trainer
    assert next(trainer.model.parameters()).device.type == "cuda"
    want = {}
    for shard in sorted(folder.glob("*.safetensors")):
        want.update({k: v for k, v in load_file(shard).items() if not k.startswith("model.visual.")})
    got = {name: t.to("cpu") for _, name, t in trainer._weight_stream(with_base=False)}
    assert set(got) == set(want)
    differ = [n for n in want if not (torch.equal(got[n], want[n]) and got[n].dtype == want[n].dtype)]
    print(f"{len(want)} checkpoint tensors streamed back from the GPU, {len(differ)} differ")
    assert not differ, differ[:5]


def test_nccl_groups_carry_the_configured_timeout(trainer):
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from model.megatron.build import group_timeout_s

    groups = {"world": dist.group.WORLD, "tp": ps.get_tensor_model_parallel_group(),
              "dp": ps.get_data_parallel_group(), "ep": ps.get_expert_model_parallel_group()}
    timeouts = {name: group_timeout_s(group) for name, group in groups.items()}
    print(f"NCCL group timeouts: {timeouts}")
    assert dist.get_backend() == "nccl"
    assert all(t == TIMEOUT_S for t in timeouts.values()), timeouts
