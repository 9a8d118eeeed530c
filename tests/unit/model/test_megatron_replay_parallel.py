"""Routing replay on TP+SP and EP meshes of the Megatron model, two CPU processes (gloo).

The replay is all in the forward (whole training runs on these meshes:
tests/integration/test_megatron_model_parallel.py): the trainer lays the engine's routes out on
the packed stream (model/megatron/routes.py packed_routes), each TP rank keeps its sequence-
parallel chunk (rank_routes), and an EP group gathers the replayed expert ids with the tokens
(moe.py _across_group). Given routes drawn at random (so they differ from the model's own),
every mesh must route exactly by them (agreement 1.0) and give the logits of the same model
replaying them on one rank's whole stream.
"""
import pytest

from tests.unit.megatron_world import megatron_core, run_on_two_ranks  # noqa: F401  (skips without megatron-core)

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytestmark = pytest.mark.slow  # two spawned processes

LENGTHS = [24, 20, 30, 22]
MESHES = {"tp2_sp": (2, 1, 1), "ep2": (1, 2, 1), "tp2_ep2": (2, 2, 1)}


def _inputs(spec):
    """Sequences and, per sequence, random routes [n - 1, MoE layers, top_k] as the engines send them."""
    gen = torch.Generator().manual_seed(3)
    ids = [torch.randint(0, 64, (n,), generator=gen) for n in LENGTHS]
    layers = sum(kind == "sparse" for kind in spec.mlp_layer_types)
    routes = [torch.rand(n - 1, layers, spec.n_routed_experts, generator=gen).argsort(-1)[..., :spec.num_experts_per_tok]
              .numpy().astype("uint16") for n in LENGTHS]
    return ids, routes, layers


def _logits(model, ids, routes, rows, layers, replay: bool):
    """Full-vocabulary logits of `rows` packed as the trainer packs them, with the routes given
    to every MoE block; (logits of the real tokens, the slot's agreement counts)."""
    from megatron.core import parallel_state as ps

    from model.megatron import full_logits, pack_lengths
    from model.megatron.routes import attach_route_slot, packed_routes, rank_routes

    slot = attach_route_slot(model, replay=replay)
    flat = torch.cat([ids[r] for r in rows])
    pad = -len(flat) % ps.get_tensor_model_parallel_world_size()
    packed = pack_lengths([LENGTHS[r] for r in rows] + ([pad] if pad else []), "cpu")
    ids_T = torch.cat([flat, torch.zeros(pad, dtype=torch.long)])
    grid = packed_routes(routes, rows, ids, len(ids_T), layers, model.spec.num_experts_per_tok)
    with torch.no_grad(), slot.active(rank_routes(grid), count=True):
        logits = full_logits(model(ids_T, packed))[: len(flat)]
    return logits, slot.counts()


def _model(cfg, hf, mesh):
    from launcher.workers.hf.model import checkpoint_state
    from model.megatron.build import build_model, init_parallel
    from model.megatron.spec import ModelSpec
    from model.megatron.weights import load_hf_state

    init_parallel(*mesh)
    model = build_model(ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, pad_token_id=0), "cpu")
    load_hf_state(model, checkpoint_state(hf))
    return model


def _worker(rank: int, store: str, queue) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    from launcher.config.compose import compose
    from launcher.workers.hf.model import build_model as build_hf

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    cfg = compose(["model=tiny"]).config
    hf = build_hf(cfg.model, pad_id=0, seed=0)
    reference = _model(cfg, hf, (1, 1, 1))  # data parallel: every rank's forward is its own
    ids, routes, layers = _inputs(reference.spec)
    every = list(range(len(LENGTHS)))
    want, _ = _logits(reference, ids, routes, every, layers, replay=True)
    own, _ = _logits(reference, ids, routes, every, layers, replay=False)
    results = {"replay_changes_logits": (want - own).abs().max().item()}
    starts = [sum(LENGTHS[:r]) for r in every]
    for name, mesh in MESHES.items():
        model = _model(cfg, hf, mesh)
        dp, dp_rank = ps.get_data_parallel_world_size(), ps.get_data_parallel_rank()
        rows = every[dp_rank::dp]
        got, counts = _logits(model, ids, routes, rows, layers, replay=True)
        ref = torch.cat([want[starts[r]: starts[r] + LENGTHS[r]] for r in rows])
        _, off = _logits(model, ids, routes, rows, layers, replay=False)
        results[name] = {"logit_diff": (got - ref).abs().max().item(), **counts,
                         "agreement_off": off["route_agree"] / off["route_pairs"]}
    queue.put((rank, results))
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def replay_results() -> dict:
    return run_on_two_ranks(_worker)


def test_random_routes_are_not_the_models_own(replay_results):
    assert replay_results[0]["replay_changes_logits"] > 1e-3


@pytest.mark.parametrize("name", list(MESHES))
def test_every_mesh_routes_by_the_given_experts(replay_results, name):
    for rank in (0, 1):
        stats = replay_results[rank][name]
        assert stats["route_pairs"] > 0 and stats["route_agree"] == stats["route_pairs"], (rank, stats)
        assert stats["agreement_off"] < 0.5, (rank, stats)  # random routes: the model's own mostly differ
        assert stats["logit_diff"] < 1e-4, (rank, stats)
