"""Routing replay in the Megatron trainer (CPU, a world of one): the hf engine's routes
replayed by model/megatron's MoE router (megatron-core's routing at the given experts), and
routing_agreement from its own router. The engine's correction bias is perturbed so that
close tokens route differently (as in test_routing_replay.py for the hf trainer)."""
import pytest

from launcher.contract.messages import GenerationRequest, SamplingParams, TrainShard
from launcher.contract.spec import ActorSpec
from launcher.weight_sync.pump import sync_in_process
from tests.unit.megatron_world import init_world_of_one

torch = pytest.importorskip("torch")

PROMPTS = [[5, 6, 7]] * 4 + [[8, 9]] * 4


def _run(replay: bool):
    from launcher.workers.hf import HfEngine
    from launcher.workers.megatron import MegatronTrainer
    from tests.shared_compose import compose_shipped

    cfg = compose_shipped(["recipe=tiny_grpo", "trainer.backend=megatron", "algorithm.max_response_len=6",
                           f"algorithm.routing_replay={replay}", "algorithm.routing_agreement=true"]).config
    init_world_of_one()
    trainer = MegatronTrainer(ActorSpec.planned(cfg, 0, 1))
    trainer.init_distributed("127.0.0.1", 0)
    engine = HfEngine(ActorSpec.planned(cfg, 0))
    sync_in_process(trainer, [engine], 0, with_base=True)
    noise = torch.Generator().manual_seed(0)
    for gate in [m.gate for m in engine.model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]:
        gate.e_score_correction_bias.add_(torch.randn(gate.e_score_correction_bias.shape, generator=noise) * 2e-3)
    gen = engine.generate(GenerationRequest(PROMPTS, 1, SamplingParams(max_tokens=6)))
    seqs = [p + t for p, t in zip(PROMPTS, gen.tokens, strict=True)]
    shard = TrainShard(seqs, [len(p) for p in PROMPTS], [1.0, -1.0] * 4, sum(len(t) for t in gen.tokens), len(seqs),
                       rollout_logprobs=gen.logprobs, routes=gen.routes)
    gap = max(abs(a - b) for u, v in zip(trainer.logprobs(shard), gen.logprobs, strict=True)
              for a, b in zip(u, v, strict=True))
    return gap, trainer.train_step(shard)


@pytest.mark.slow
def test_megatron_replay_routes_as_the_engine_did_and_off_disagrees():
    gap_on, on = _run(True)
    assert on["route_pairs"] > 0 and on["route_agree"] == on["route_pairs"]
    assert on["route_agree_own"] < on["route_pairs"]
    assert gap_on < 1e-4  # megatron vs hf numerics (~1e-5) only: the same experts, the same weights
    gap_off, off = _run(False)
    assert off["route_agree"] == off["route_agree_own"] < off["route_pairs"]
    assert gap_off > 1e-3
