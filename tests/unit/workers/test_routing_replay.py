"""Rollout routing replay on the hf path: the hf engine returns, per token and MoE layer, the
top-k expert ids its router chose (uint16 arrays carried with the samples through scoring,
DAPO's group filter and the trainer shards), the hf trainer replays them, and
routing_agreement says how often the trainer's experts are the engine's.

The engine's router is made to disagree on close tokens by perturbing only its
e_score_correction_bias (which picks experts but does not weigh them): with replay the
trainer's forward is then the engine's computation exactly; without it, some tokens go to
other experts."""
import numpy as np
import pytest
import torch

from launcher.contract.spec import ActorSpec
from launcher.driver.loop.data import PromptStream
from launcher.driver.loop.loop_sync import fill_groups
from launcher.driver.loop.rollout import make_chunks, sampling_params, score_group, split_generation
from launcher.driver.loop.train import train_on_groups
from launcher.plan.routes import REPLAYED_ROUTER_MODEL_TYPES
from launcher.rl.algorithm import make_algorithm
from launcher.rl.tokenizer import CharTokenizer
from launcher.weight_sync.pump import sync_in_process
from launcher.workers import engine_class, trainer_class
from launcher.workers.hf.model import build_model
from launcher.workers.hf.routing import ROUTE_DTYPE, moe_gates, replayed, routes_grid, to_routes
from tests.shared_compose import compose_shipped

SAMPLES = 4
MOE_LAYERS, TOP_K = 3, 2  # model/descriptors/tiny.yaml: mlp [dense, sparse, sparse, sparse], top-2 of 8


def test_route_arrays_are_uint16_and_must_fit_their_sequence():
    routes_BTLK = torch.arange(2 * 5 * MOE_LAYERS * TOP_K).reshape(2, 5, MOE_LAYERS, TOP_K) % 8
    arrays = to_routes(routes_BTLK, [4, 2])
    assert [a.shape for a in arrays] == [(4, MOE_LAYERS, TOP_K), (2, MOE_LAYERS, TOP_K)]
    assert all(a.dtype == ROUTE_DTYPE for a in arrays)
    sequences = [[1] * 5, [1] * 3]
    grid = routes_grid(arrays, [0, 1], sequences, 6, MOE_LAYERS, TOP_K)
    assert grid.shape == (2, 6, MOE_LAYERS, TOP_K)
    assert (grid[0, :4] == routes_BTLK[0, :4]).all() and (grid[0, 4:] == -1).all() and (grid[1, 2:] == -1).all()
    with pytest.raises(ValueError, match="does not fit a sequence of 4 tokens"):
        routes_grid(arrays, [0], [[1] * 4], 6, MOE_LAYERS, TOP_K)
    with pytest.raises(ValueError, match="uint16"):
        routes_grid([arrays[0].astype(np.int64)], [0], sequences, 6, MOE_LAYERS, TOP_K)


@pytest.mark.parametrize("model", ["tiny", "tiny_qwen3_moe"])
def test_replayed_weights_of_the_routers_own_picks_are_its_own_weights(model):
    """Each replayable router's formula (ROUTER_WEIGHTS) against its own forward, and every
    model type ROUTE001 lets through has gates replay finds."""
    cfg = compose_shipped([f"model={model}"]).config
    assert cfg.model.arch.model_type in REPLAYED_ROUTER_MODEL_TYPES
    gates = moe_gates(build_model(cfg.model, pad_id=0, seed=0))
    assert len(gates) == sum(t == "sparse" for t in cfg.model.arch.mlp_layer_types)
    hidden_ND = torch.randn(16, cfg.model.arch.hidden_size, generator=torch.Generator().manual_seed(0))
    for gate in gates:
        logits_NE, weights_NK, ids_NK = gate(hidden_ND)
        assert torch.allclose(replayed(gate, logits_NE, ids_NK), weights_NK, rtol=1e-6, atol=1e-7)


class _InProcessTrainers:
    """The trainer group's two calls train_on_groups makes, on one in-process rank."""

    dp = 1

    def __init__(self, trainer):
        self.trainer = trainer

    def train_step(self, shards):
        return [self.trainer.train_step(s) for s in shards]

    def logprobs(self, shards, order):
        return self.trainer.logprobs(shards[0])


def _setup(replay: bool, bias_noise: float, *overrides, moe_layers: int = MOE_LAYERS):
    """An hf trainer and engine on one config; the engine's routers perturbed by `bias_noise`:
    glm5_next's correction bias (it picks experts but does not weigh them), Qwen3-MoE's
    router weight (it has no bias: its picks and weights both move)."""
    cfg = compose_shipped(["recipe=tiny_dapo_async", f"algorithm.samples_per_prompt={SAMPLES}", "algorithm.max_response_len=6",
                           "algorithm.dynamic_sampling.max_regenerations=1", f"algorithm.routing_replay={replay}",
                           "algorithm.routing_agreement=true", *overrides]).config
    trainer, engine = trainer_class("hf")(ActorSpec.planned(cfg, 0, 1)), engine_class("hf")(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)
    noise = torch.Generator().manual_seed(0)
    gates = moe_gates(engine.model)
    assert len(gates) == moe_layers
    with torch.no_grad():
        for gate in gates:
            picker = getattr(gate, "e_score_correction_bias", gate.weight)
            picker.add_(torch.randn(picker.shape, generator=noise) * bias_noise)
    return cfg, trainer, engine


def _kept_groups(cfg, engine, wanted=4):
    """DAPO's dynamic sampling (loop_sync.fill_groups) over the real engine's generations."""
    tok, algorithm = CharTokenizer(64), make_algorithm(cfg.algorithm)
    stream, position = PromptStream(cfg.data, 0, tok), [0]

    def generate_round(round_index, n_prompts):
        problems = stream.take(position[0], n_prompts)
        position[0] += n_prompts
        prompt_ids = [tok.encode(p.prompt) for p in problems]
        out = []
        for members, request in make_chunks(prompt_ids, SAMPLES, n_prompts, sampling_params(cfg.algorithm),
                                            lambda c: 100 * round_index + c):
            gen = engine.generate(request)
            for g, rows in split_generation(members, gen, SAMPLES):
                out.append((round_index, g, score_group(problems[g], prompt_ids[g], gen, rows, stream.task, tok,
                                                        algorithm)))
        return out

    kept, seen, _ = fill_groups(generate_round, algorithm.keep_group, wanted, 1)
    return kept, seen, algorithm


@pytest.mark.slow
def test_replay_makes_the_trainer_route_as_the_engine_did():
    cfg, trainer, engine = _setup(True, 2e-3)
    kept, seen, algorithm = _kept_groups(cfg, engine)
    assert kept and len(seen) >= len(kept)
    for group in kept:  # the routes went through scoring and the filter with their samples
        assert [r.shape for r in group.routes] == [(len(group.prompt_ids) + len(t) - 1, MOE_LAYERS, TOP_K)
                                                   for t in group.responses]
        assert all(isinstance(r, np.ndarray) and r.dtype == np.uint16 for r in group.routes)
    metrics = train_on_groups(_InProcessTrainers(trainer), kept, cfg.algorithm, algorithm)
    assert metrics["routing_agreement"] == 1.0
    assert metrics["routing_agreement_own"] < 1.0  # the trainer's own router would have differed
    # the engine's computation exactly: its bias picks the experts, the weights use no bias
    assert metrics["logprob_abs_diff_max"] < 1e-4


@pytest.mark.slow
def test_qwen3_moe_replays_the_engines_softmax_routes():
    """The softmax router of the Qwen3-MoE the H200 runs use (model=qwen3_moe_4layer at a CPU
    width): with replay every token takes the engine's experts though the trainer's own
    router would have picked others for some."""
    cfg, trainer, engine = _setup(True, 2e-2, "model=tiny_qwen3_moe", moe_layers=2)
    kept, _, algorithm = _kept_groups(cfg, engine)
    assert all(r.shape[1:] == (2, 2) for group in kept for r in group.routes)
    metrics = train_on_groups(_InProcessTrainers(trainer), kept, cfg.algorithm, algorithm)
    assert metrics["routing_agreement"] == 1.0
    assert metrics["routing_agreement_own"] < 1.0


@pytest.mark.slow
def test_without_replay_close_routing_differs_and_the_logprobs_with_it():
    cfg, trainer, engine = _setup(False, 2e-3)
    kept, _, algorithm = _kept_groups(cfg, engine)
    metrics = train_on_groups(_InProcessTrainers(trainer), kept, cfg.algorithm, algorithm)
    assert 0.5 < metrics["routing_agreement"] < 1.0
    assert metrics["routing_agreement"] == metrics["routing_agreement_own"]
    assert metrics["logprob_abs_diff_max"] > 1e-3


@pytest.mark.slow
def test_same_weights_route_the_same_and_two_mini_batches_replay_in_the_old_logprob_pass():
    """Unperturbed: engine and trainer (both fp32 on CPU) agree on every token; with two
    mini-batches the pre-update log-prob pass replays too (without counting)."""
    cfg, trainer, engine = _setup(True, 0.0, "algorithm.prompts_per_step=4", "algorithm.mini_batch_prompts=1",
                                  "algorithm.dynamic_sampling.enabled=false")
    kept, _, algorithm = _kept_groups(cfg, engine)
    metrics = train_on_groups(_InProcessTrainers(trainer), kept, cfg.algorithm, algorithm)
    assert metrics["mini_batches"] == 4
    assert metrics["routing_agreement"] == metrics["routing_agreement_own"] == 1.0
