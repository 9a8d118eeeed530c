"""The bytes the engines return with each sample for replay: MoE routes
(algorithm.routing_replay / routing_agreement) and DSA indexer pools (indexer_replay /
indexer_agreement), what they cost the driver and Ray's object store per step.

A route array holds, per token, moe_layers x top_k uint16 expert ids (2 B each:
launcher/workers/hf/routing.py). GLM-5.3-Flash: 42 MoE layers x top-8 x 2 B = 672 B per
token, ~2.6 GiB for a 4M-token step. An indexer array holds, per token, indexer layers (DSA
layers with a `full` indexer) x index_topk / index_kpool uint16 pool indices
(launcher/workers/hf/indexer_topk.py): GLM-5.3-Flash, 11 x 2048 / 16 x 2 B = 2,816 B per
token, ~10.7 GiB for a 4M-token step. The token count is the batch chain's worst case
(every sequence at max prompt + max response). What is held at once:
- sync loop: the step's groups, and with DAPO dynamic sampling every generated round's
  (the step's generation summary keeps the groups it saw): 1 + max_regenerations steps;
- async loop: the queue (LoopPlan.queue_steps, plan/loop.py) plus the
  step in training: 1 + min(2, max_staleness) steps.
Each array is in the object store twice (the engine's result, then the trainer call's
shard) and in the driver's memory once. Ray's object store defaults to 30% of a node's RAM.
"""
from dataclasses import dataclass

from launcher.config.schema.model import ArchConfig
from launcher.config.schema.root import LauncherConfig
from launcher.plan._origin import Origins
from launcher.plan.arch import DSA, ArchFacts
from launcher.plan.batch import BatchPlan
from launcher.plan.loop import LoopPlan

REPLAYED_ROUTER_MODEL_TYPES = ("glm5_next", "qwen3_moe")
"""Model types whose router the hf trainer replays (workers/hf/routing.py ROUTER_WEIGHTS: glm5_next's
sigmoid top-k, qwen3_moe's softmax top-k); ROUTE001 refuses the rest."""
ROUTE_ID_BYTES = 2
"""uint16 expert ids."""
POOL_ID_BYTES = 2
"""uint16 pool indices (launcher/workers/indexer_picks.py)."""
OBJECT_STORE_SHARE = 0.3
"""Ray's default object store: 30% of the node's memory."""
OBJECT_STORE_COPIES = 2
"""The engine's result and the trainer call's shard."""
GIB = 1024**3


@dataclass
class RoutesPlan:
    on: bool
    """Any array travels: routes or indexer pools."""
    bytes_per_token: int
    """route_bytes_per_token + indexer_bytes_per_token of what is on."""
    route_bytes_per_token: int
    """moe_layers x top_k x 2 B when routes are on, else 0."""
    indexer_bytes_per_token: int
    """indexer_layers x index_topk / index_kpool x 2 B when indexer pools are on, else 0."""
    tokens_per_step: int
    gib_per_step: float
    steps_held: int
    """Steps' worth of routes the driver holds at once (the loop's queue, DAPO's rounds)."""
    driver_gib: float
    object_store_gib: float
    object_store_capacity_gib: float
    """Ray's default object store on the head node: 30% of cluster.host_memory_gib."""


def indexer_layers(arch: ArchConfig, facts: ArchFacts) -> int:
    """DSA layers that run their own indexer (a `shared` one reuses the layer before's pools)."""
    kinds = arch.indexer_types or ["full"] * arch.num_hidden_layers
    return sum(t == DSA and k == "full" for t, k in zip(facts.layer_types, kinds, strict=False))


def _per_token(cfg: LauncherConfig, arch: ArchFacts) -> tuple[int, int]:
    """(route, indexer) bytes per token of what the config turns on."""
    alg, a = cfg.algorithm, cfg.model.arch
    routes = (alg.routing_replay or alg.routing_agreement) and arch.has_moe
    pools = (alg.indexer_replay or alg.indexer_agreement) and arch.has_dsa and a.index_kpool >= 1
    route_bytes = arch.n_moe * a.num_experts_per_tok * ROUTE_ID_BYTES if routes else 0
    indexer_bytes = indexer_layers(a, arch) * (a.index_topk // a.index_kpool) * POOL_ID_BYTES if pools else 0
    return route_bytes, indexer_bytes


def plan_routes(cfg: LauncherConfig, arch: ArchFacts, batch: BatchPlan, loop: LoopPlan, log: Origins) -> RoutesPlan:
    alg = cfg.algorithm
    route_bytes, indexer_bytes = _per_token(cfg, arch)
    per_token = route_bytes + indexer_bytes
    on = per_token > 0
    per_step = batch.tokens_per_step * per_token / GIB
    if loop.is_async:
        held = 1 + loop.queue_steps
    else:
        held = 1 + (alg.dynamic_sampling.max_regenerations if alg.dynamic_sampling.enabled else 0)
    capacity = OBJECT_STORE_SHARE * cfg.cluster.host_memory_gib
    plan = RoutesPlan(on=on, bytes_per_token=per_token, route_bytes_per_token=route_bytes,
                      indexer_bytes_per_token=indexer_bytes, tokens_per_step=batch.tokens_per_step,
                      gib_per_step=per_step if on else 0.0, steps_held=held,
                      driver_gib=per_step * held if on else 0.0,
                      object_store_gib=per_step * held * OBJECT_STORE_COPIES if on else 0.0,
                      object_store_capacity_gib=capacity)
    if on:
        log.add("routes.gib_per_step", f"{per_step:.3f}",
                f"{batch.tokens_per_step:,} tokens x ({route_bytes} B of MoE routes + {indexer_bytes} B of indexer "
                "pools) per token")
    return plan
