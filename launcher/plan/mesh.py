"""Trainer mesh and GPU budget: dp, edp, resolved etp, experts per GPU, padded vocab.

Values that cannot be derived (the world does not divide) are None and `ok` is False;
the validator reports why, the plan still carries every value that could be derived.
"""
from dataclasses import dataclass

from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins
from launcher.plan.placement import node_counts

VOCAB_PAD_MULTIPLE = 128  # Megatron's make-vocab-size-divisible-by default


@dataclass
class MeshPlan:
    trainer_gpus: int
    inference_gpus: int
    world: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    dp: int | None
    edp: int | None
    experts_per_gpu: int | None
    padded_vocab: int
    ok: bool


def plan_mesh(cfg: LauncherConfig, log: Origins) -> MeshPlan:
    m, arch = cfg.trainer.mesh, cfg.model.arch
    world = node_counts(cfg)[0] * cfg.cluster.gpus_per_node
    log.add("mesh.world", world, f"{world} trainer GPUs from placement {cfg.placement.mode.value} "
            f"on {cfg.cluster.nodes} node(s) x {cfg.cluster.gpus_per_node}")
    etp = m.etp if m.etp is not None else m.tp
    if m.etp is None:
        log.add("mesh.etp", etp, "trainer.mesh.etp unset: Megatron defaults expert TP to tp")
    model_par = m.tp * m.pp * m.cp
    dp = world // model_par if world % model_par == 0 and world >= model_par else None
    log.add("mesh.dp", dp, f"{world} GPUs / (tp {m.tp} x pp {m.pp} x cp {m.cp})")
    expert_grid = m.ep * etp * m.pp
    edp = world // expert_grid if world % expert_grid == 0 and world >= expert_grid else None
    log.add("mesh.edp", edp, f"{world} GPUs / (ep {m.ep} x etp {etp} x pp {m.pp})")
    experts = arch.n_routed_experts // m.ep if arch.n_routed_experts % m.ep == 0 else None
    log.add("mesh.experts_per_gpu", experts, f"{arch.n_routed_experts} experts / ep {m.ep}")
    pad = VOCAB_PAD_MULTIPLE * m.tp
    padded = -(-arch.vocab_size // pad) * pad
    log.add("mesh.padded_vocab", padded, f"vocab {arch.vocab_size} rounded up to 128 x tp {m.tp}")
    inference_gpus = cfg.inference.engines * cfg.inference.tp
    return MeshPlan(trainer_gpus=world, inference_gpus=inference_gpus, world=world, tp=m.tp, pp=m.pp,
                    cp=m.cp, ep=m.ep, etp=etp, dp=dp, edp=edp, experts_per_gpu=experts,
                    padded_vocab=padded, ok=dp is not None and edp is not None)
