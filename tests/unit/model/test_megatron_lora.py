"""LoRA on the Megatron model: gradients agree with HF's full-weight gradients through
the LoRA identity (dB = s G A^T, dA = s B^T G), per-expert and shared expert adapters.
"""
import pytest

from tests.unit.megatron_world import init_world_of_one

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TARGETS = ["linear_q_down_proj", "linear_q_up_proj", "linear_kv_down_proj", "linear_kv_up_proj", "linear_proj",
           "linear_fc1", "linear_fc2", "q_proj", "k_proj", "v_proj", "b_proj", "f_a_proj", "g_a_proj", "o_proj"]
LENGTHS = [30, 50]


def _models(shared: bool):
    from launcher.workers.hf.model import build_model as build_hf
    from launcher.workers.hf.model import checkpoint_state
    from launcher.workers.hf.names import model_state
    from model.megatron.build import build_model
    from model.megatron.lora import apply_lora
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import export_hf_state, load_hf_state
    from tests.shared_compose import compose_shipped

    init_world_of_one()
    cfg = compose_shipped(["model=tiny"]).config
    hf = build_hf(cfg.model, pad_id=0, seed=0)
    meg = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype), "cpu")
    load_hf_state(meg, checkpoint_state(hf))
    apply_lora(meg, TARGETS, rank=4, alpha=8.0, share_expert_adapters=shared, expert_rank=4 // 2)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, param in meg.named_parameters():
            if name.endswith("lora_B"):
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    hf.load_state_dict(model_state(hf, export_hf_state(meg)), strict=False)
    return hf, meg


def _loss_hf(hf, ids):
    total = 0.0
    for seq in ids:
        logp = torch.log_softmax(hf(input_ids=seq[None]).logits[0, :-1].float(), -1)
        total = total - logp.gather(-1, seq[1:, None]).sum()
    return total


def _loss_megatron(meg, ids):
    from model.megatron import pack_lengths, token_logprobs

    packed = pack_lengths(LENGTHS, "cpu")
    flat = torch.cat(ids)
    logp_T = token_logprobs(meg(flat, packed), flat.roll(-1))
    ends = torch.tensor([end - 1 for _, end in packed.bounds])
    return -logp_T.sum() + logp_T[ends].sum()


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True])
def test_lora_grads_match_hf_full_weight_grads(shared):
    from device.harness.parity import cosine, expected_lora_grads
    from launcher.workers.hf.model import checkpoint_state

    hf, meg = _models(shared)
    gen = torch.Generator().manual_seed(2)
    ids = [torch.randint(0, 64, (n,), generator=gen) for n in LENGTHS]
    _loss_hf(hf, ids).backward()
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)) for n, p in hf.named_parameters()}
    grads.update({n: torch.zeros_like(b) for n, b in hf.named_buffers()})
    expected = expected_lora_grads(meg, checkpoint_state(hf, grads))
    _loss_megatron(meg, ids).backward()
    got = {n: p.grad for n, p in meg.named_parameters() if ".lora_" in n}
    assert got.keys() == expected.keys() and len(got) > 20
    worst = min((cosine(got[n], expected[n]), n) for n in got if expected[n].abs().sum() > 0)
    assert worst[0] > 0.999, worst
    assert all(p.grad is None for n, p in meg.named_parameters() if ".lora_" not in n)


@pytest.mark.parametrize("shared", [False, True])
def test_merged_stream_equals_the_whole_stack_merge_bitwise(shared, monkeypatch):
    """hf_stream merges an unsplit expert stack one expert at a time (no copy of the stack):
    the same bf16 values, names and order as splitting LoraGrouped.merged_weight."""
    from model.megatron.build import build_model
    from model.megatron.lora import LoraGrouped, apply_lora
    from model.megatron.mapping import split
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import hf_stream
    from model.names import EXPERTS, name_table
    from tests.shared_compose import compose_shipped

    init_world_of_one()
    cfg = compose_shipped(["model=tiny", "model.dtype=bfloat16"]).config
    meg = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype), "cpu")
    apply_lora(meg, ["linear_fc1", "linear_fc2"], rank=4, alpha=8.0, share_expert_adapters=shared, expert_rank=2)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for param in meg.parameters():  # build_model leaves the weights uninitialized
            param.copy_(torch.randn(param.shape, generator=gen).to(param.dtype) * 0.05)
    owners = {f"{n}.weight": m for n, m in meg.named_modules() if isinstance(m, LoraGrouped)}
    kinds = {mname: (kind, names) for mname, kind, names in name_table(meg.spec)}
    want = dict(part for mname, owner in owners.items() for part in split(*kinds[mname], owner.merged_weight()))
    assert all(kinds[m][0] == EXPERTS for m in owners) and len(want) > 8
    monkeypatch.setattr(LoraGrouped, "merged_weight", lambda self: pytest.fail("a copy of the whole stack was made"))
    streamed = list(hf_stream(meg, merged=True))
    got = {name: t for name, t in streamed if name in want}
    assert got.keys() == want.keys()
    assert all(torch.equal(got[n], want[n]) and got[n].dtype == torch.bfloat16 for n in want)
    assert [n for n, _ in streamed if n in want] == list(want)  # split's order: expert by expert
