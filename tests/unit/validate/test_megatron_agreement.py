"""The validator agrees with megatron-core 0.19.2's own checks on random meshes and recompute settings.

A seeded generator draws trainer meshes (world 8-128 GPUs, tp, pp, cp, ep, etp, sequence parallel) and
recompute settings (granularity, method, num_layers, modules) for the GLM descriptors: the full
glm5_3_flash, the tiny one, and the tiny one with dense MLPs only (the one GLM variant where
megatron-core's moe_act condition can fail). Each draw is planned and checked by the validator,
and run through megatron-core's checks in this process, in the order a launch meets them:

- parallel_state.initialize_model_parallel on the draw's world size, up to its first process group
  (torch.distributed.new_group patched: megatron's size checks and rank generators run, no group is made),
- TransformerConfig / MLATransformerConfig.__post_init__ on the project's own config
  (model/megatron/optim.megatron_config) with the recompute settings under megatron's field
  names, which the schema mirrors 1:1,
- the MoE base layer's constructor (its `num_moe_experts % ep` assert).

Properties: every megatron-core rejection has a project error at the same key (so every config
the validator accepts also passes megatron-core); every mesh/recompute error on a config megatron
accepts is one of PROJECT_ONLY, each with its reason; both sides accept a good share of draws.
"""
import dataclasses
import functools
import random
import re
import warnings
from dataclasses import dataclass
from types import SimpleNamespace
from unittest import mock

import pytest

from tests.unit.megatron_world import init_world_of_one, megatron_core  # noqa: F401  (skips without megatron-core)

pytestmark = pytest.mark.slow  # 360 draws through megatron-core's checks: ~10 s, the fast set's largest file

SEED, DRAWS_PER_BASE = 21, 120
BASES = {
    "glm5_3_flash": ("recipe=dapo_sync",),
    "tiny": ("recipe=dapo_sync", "model=tiny"),
    "tiny_dense": ("recipe=dapo_sync", "model=tiny", "model.arch.mlp_layer_types=[dense,dense,dense,dense]"),
}
"""Each base is composed once by Hydra; the draws replace its mesh, recompute and cluster sections."""
MEGATRON_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts", "gdn_norm_out")
"""megatron-core 0.19.2's allowed recompute_modules (TransformerConfig.__post_init__)."""
MODULE_POOL = MEGATRON_MODULES + ("mhc", "fancy_attn")  # and two names it rejects
GLM_MODULES = ("core_attn", "moe", "moe_act", "shared_experts", "mla_up_proj")
"""Modules both sides accept for GLM with MoE layers; a draw adds at most one of the others, so each
other module's rejection is seen on its own."""

LIBRARY_KEYS = (
    (r"not divisible by expert_tensor_model_pipeline_parallel", "trainer.mesh.etp"),
    (r"world_size \(\d+\) is not divisible by \d+", "trainer.mesh.tp"),
    (r"num_attention_heads \(\d+\) must be a multiple of tensor_model_parallel_size", "trainer.mesh.tp"),
    (r"sequence parallelism without tensor parallelism", "trainer.mesh.sequence_parallel"),
    (r"recompute_num_layers", "trainer.recompute.num_layers"),
    (r"recompute_method", "trainer.recompute.method"),
    (r"recompute_modules", "trainer.recompute.modules"),
)
"""megatron-core's rejection message -> the config key it is about (first match)."""

PROJECT_ONLY = {
    "MESH002": "pp > 1 with mHC: megatron-core 0.19.2 has no mHC; the project's GlmModel keeps the hc_mult residual "
               "streams in one stage (its builder runs pp=1).",
    "MESH003": "cp > 1 with KDA: the project's KDA layer (model/megatron/kda.py) has no context-parallel path; "
               "megatron-core knows no KDA, so its config passes.",
    "MESH009": "tp > 1 and no sequence parallel: megatron-core's config only warns (its MoE layer raises in the "
               "first training forward, moe_layer.py); this project's layers shard activations across TP whenever "
               "tp > 1 (model/megatron/parallel.py), dense models included.",
    "MESH011": "num_hidden_layers % pp: megatron-core's config does not check it (its layer split does, at build).",
    "RECOMP001": "full recompute with mHC: the project's mHC layer does not thread megatron's checkpoint managers.",
    "RECOMP002": "layernorm / mlp with mHC: the project's layer keeps the norms and recomputes its MLP under `moe`.",
}
"""Project errors on configs megatron-core accepts: this project's own model rules (docs/model.md section 2)."""


@dataclass(frozen=True)
class Outcome:
    base: str
    draw: dict  # the settings drawn (draw_mesh | draw_recompute)
    errors: tuple  # project error findings
    rejection: tuple[str, str] | None  # megatron-core's (key, message), None = accepted
    builder_sequence_parallel: bool | None  # what the project's megatron_config applies, when megatron accepted


def _mostly(rng: random.Random, legal: list, other: list, p_legal: float = 0.8):
    return rng.choice(legal if legal and rng.random() < p_legal else other)


def draw_mesh(rng: random.Random, n_experts: int) -> dict:
    """World 8-128 GPUs (a multiple of pp); tp, ep, etp mostly dividing what they must, sometimes not;
    pp and cp mostly 1."""
    pp = _mostly(rng, [1], [2, 3], 0.85)
    world = 8 * pp * rng.randint(1, 16 // pp)
    stage = world // pp
    tp = _mostly(rng, [d for d in (1, 2, 4, 8, 16) if stage % d == 0], [3, 32, 5])
    ep = _mostly(rng, [d for d in (1, 2, 4, 8, 16, 32) if stage % d == 0 and n_experts % d == 0], [3, 5, 64, 12])
    return {"world": world, "tp": tp, "pp": pp, "cp": _mostly(rng, [1], [2], 0.9),
            "ep": ep, "etp": rng.choice([None, 1, 1, 1, 2, 4]),
            "sequence_parallel": tp > 1 if rng.random() < 0.85 else rng.random() < 0.5}


def draw_recompute(rng: random.Random) -> dict:
    """Granularity, method, num_layers and modules, mostly what megatron-core accepts for the granularity."""
    granularity = rng.choice(["none", "selective", "selective", "selective", "full"])
    full = granularity == "full"
    modules = rng.sample(GLM_MODULES, k=rng.choice([0, 1, 2, 2, 3]))
    if rng.random() < 0.4:
        modules.append(rng.choice([m for m in MODULE_POOL if m not in GLM_MODULES]))
    return {"granularity": granularity,
            "method": _mostly(rng, ["uniform", "block"] if full else [None], [None, "uniform"]),
            "num_layers": _mostly(rng, [1, 2] if full else [None], [None, 1]),
            "modules": modules}


def with_settings(cfg, s: dict):
    """cfg with the draw's mesh and recompute settings on a cluster of s["world"] trainer GPUs (colocated)."""
    from launcher.config.schema.choices import RecomputeGranularity, RecomputeMethod

    t = cfg.trainer
    mesh = dataclasses.replace(t.mesh, tp=s["tp"], pp=s["pp"], cp=s["cp"], ep=s["ep"], etp=s["etp"],
                               sequence_parallel=s["sequence_parallel"])
    recompute = dataclasses.replace(t.recompute, granularity=RecomputeGranularity(s["granularity"]),
                                    method=RecomputeMethod(s["method"]) if s["method"] else None,
                                    num_layers=s["num_layers"], modules=list(s["modules"]))
    return dataclasses.replace(cfg, trainer=dataclasses.replace(t, mesh=mesh, recompute=recompute),
                               cluster=dataclasses.replace(cfg.cluster, nodes=s["world"] // 8, gpus_per_node=8),
                               placement=dataclasses.replace(cfg.placement, trainer_nodes=None, inference_nodes=None))


class _SizesChecked(Exception):
    """Raised at initialize_model_parallel's first group: in 0.19.2 every check on the sizes comes
    before it (parallel_state.py:800-905); what follows builds groups and checks only its own state."""


def _first_group(**kwargs):
    raise _SizesChecked


@functools.cache
def fake_world_rejection(world: int, tp: int, pp: int, cp: int, ep: int, etp: int) -> str | None:
    """megatron-core's initialize_model_parallel for `world` GPUs from this one-rank process, called as the
    project's init_parallel calls it (plus pp/cp, which its builder fixes at 1), up to its first group.
    Its error message, or None."""
    import torch.distributed as dist
    from megatron.core import parallel_state as ps

    ps.destroy_model_parallel()  # as init_parallel does before it initialises
    with mock.patch.object(dist, "new_group", _first_group):
        try:
            ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                         context_parallel_size=cp, expert_model_parallel_size=ep,
                                         expert_tensor_parallel_size=etp, local_world_size=world)
        except _SizesChecked:
            return None
        except (RuntimeError, AssertionError) as e:
            return str(e)
        finally:
            ps.destroy_model_parallel()
    raise AssertionError("initialize_model_parallel made no group: the check above no longer sees its end")


def transformer_config(cfg, spec, plan):
    """The project's megatron_config(spec) for this mesh, with the recompute settings megatron would get.

    megatron_config reads the mesh from parallel_state; megatron's own world-size setters stand in for
    the groups. The project's experts are grouped GEMMs (model/megatron/grouped.py): moe_grouped_gemm
    holds with MoE layers. MLA layers (the DSA ones) make it an MLATransformerConfig. Neither KDA nor
    the project's DSA layer is megatron's GatedDeltaNet or DSAttention: no experimental_attention_variant.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    from model.megatron.optim import megatron_config

    m, r, a, arch_facts = cfg.trainer.mesh, cfg.trainer.recompute, cfg.model.arch, plan.arch
    tp, ep, etp = plan.mesh.tp, plan.mesh.ep, plan.mesh.etp
    setters = (ps.set_tensor_model_parallel_world_size, ps.set_expert_model_parallel_world_size,
               ps.set_expert_tensor_parallel_world_size)
    for setter, size in zip(setters, (tp, ep, etp), strict=True):
        setter(size)
    try:
        built = megatron_config(spec)
    finally:
        for setter in setters:
            setter(None)
    fields = {f.name: getattr(built, f.name) for f in dataclasses.fields(built) if f.init}
    fields.update(sequence_parallel=m.sequence_parallel, pipeline_model_parallel_size=m.pp,
                  context_parallel_size=m.cp, pipeline_dtype=spec.dtype if m.pp > 1 else None,
                  recompute_granularity=None if r.granularity.value == "none" else r.granularity.value,
                  recompute_method=r.method.value if r.method else None, recompute_num_layers=r.num_layers,
                  recompute_modules=list(r.modules), moe_grouped_gemm=arch_facts.has_moe)
    if not arch_facts.has_dsa:
        return TransformerConfig(**fields), built
    mla = dict(multi_latent_attention=True, q_lora_rank=a.q_lora_rank, kv_lora_rank=a.kv_lora_rank,
               qk_head_dim=a.qk_nope_head_dim, qk_pos_emb_head_dim=a.qk_rope_head_dim, v_head_dim=a.v_head_dim)
    return MLATransformerConfig(**{**fields, **mla}), built


class _SizedGroup:
    """A process group as megatron's get_pg_size / get_pg_rank read it (this process is rank 0)."""

    def __init__(self, size: int):
        self._size = size

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return 0


def build_moe_base_layer(config, tp: int, ep: int) -> None:
    """megatron-core's BaseMoELayer constructor: its expert split (`num_moe_experts % ep_size == 0`)."""
    from megatron.core.transformer.moe.moe_layer import BaseMoELayer

    class ExpertSplit(BaseMoELayer):
        def forward(self, hidden_states):
            raise NotImplementedError("built for the constructor's checks only")

    ExpertSplit(config, pg_collection=SimpleNamespace(ep=_SizedGroup(ep), tp=_SizedGroup(tp)))


def key_of(message: str) -> str:
    for pattern, key in LIBRARY_KEYS:
        if re.search(pattern, message):
            return key
    raise AssertionError(f"megatron-core rejected with a message this test cannot place: {message!r}; "
                         "add its pattern and config key to LIBRARY_KEYS")


def megatron_rejection(cfg, plan, spec) -> tuple[tuple[str, str] | None, object]:
    """(megatron-core's first rejection as (key, message) or None, the project's built config)."""
    m = cfg.trainer.mesh
    tp, ep, etp = plan.mesh.tp, plan.mesh.ep, plan.mesh.etp
    message = fake_world_rejection(plan.mesh.world, tp, m.pp, m.cp, ep, etp)
    if message is not None:
        return (key_of(message), message), None
    try:
        config, built = transformer_config(cfg, spec, plan)
    except (ValueError, AssertionError) as e:
        return (key_of(str(e)), str(e)), None
    if plan.arch.has_moe:
        try:
            build_moe_base_layer(config, tp, ep)
        except AssertionError:
            return ("trainer.mesh.ep", f"BaseMoELayer: num_moe_experts {config.num_moe_experts} % ep {ep} != 0"), None
    return None, built


@pytest.fixture(scope="module")
def outcomes() -> list[Outcome]:
    """Every draw of every base, checked by both sides (megatron's parallel state restored afterwards)."""
    from launcher.config.compose import compose
    from launcher.plan import make_plan
    from launcher.validate import check
    from model.megatron.spec import ModelSpec

    init_world_of_one()
    rng, results = random.Random(SEED), []
    try:
        for base, overrides in BASES.items():
            cfg = compose(list(overrides)).config
            spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype, 0)
            for _ in range(DRAWS_PER_BASE):
                settings = draw_mesh(rng, cfg.model.arch.n_routed_experts) | draw_recompute(rng)
                point = with_settings(cfg, settings)
                plan = make_plan(point, driver_env={})
                errors = tuple(f for f in check(point, plan) if f.severity == "error")
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # megatron's advice warnings (core_attn with TE, EP+TP without SP)
                    rejection, built = megatron_rejection(point, plan, spec)
                sp = built.sequence_parallel if built is not None else None
                results.append(Outcome(base, settings, errors, rejection, sp))
    finally:
        init_world_of_one()
    return results


def _mesh_or_recompute(finding) -> bool:
    return finding.id.startswith(("MESH", "RECOMP"))


@pytest.mark.slow
def test_every_megatron_rejection_has_a_project_error_at_its_key(outcomes):
    missed = [(o.base, o.draw, o.rejection, sorted({f.key for f in o.errors})) for o in outcomes
              if o.rejection and o.rejection[0] not in {f.key for f in o.errors}]
    assert not missed, "megatron-core rejects, the validator has no error at that key:\n" + "\n".join(map(str, missed))


def test_project_errors_on_configs_megatron_accepts_are_documented(outcomes):
    extra = [(o.base, o.draw, f.id, f.key, f.message) for o in outcomes if o.rejection is None
             for f in o.errors if _mesh_or_recompute(f) and f.id not in PROJECT_ONLY]
    assert not extra, "project mesh/recompute errors megatron-core does not make:\n" + "\n".join(map(str, extra))
    seen = {f.id for o in outcomes if o.rejection is None for f in o.errors}
    assert set(PROJECT_ONLY) <= seen, f"PROJECT_ONLY entries no draw needed: {set(PROJECT_ONLY) - seen}"


def test_draws_reach_every_check_and_both_sides_accept_some(outcomes):
    """Not vacuous: each kind of megatron rejection occurs, and a share of draws passes both sides."""
    keys = {o.rejection[0] for o in outcomes if o.rejection}
    assert keys >= {key for _, key in LIBRARY_KEYS} | {"trainer.mesh.ep"}
    messages = " ".join(o.rejection[1] for o in outcomes if o.rejection)
    for condition in ("gdn_norm_out in recompute_modules", "moe_act in recompute_modules", "Invalid choices"):
        assert condition in messages
    for base in BASES:
        accepted = [o for o in outcomes if o.base == base and o.rejection is None
                    and not [f for f in o.errors if _mesh_or_recompute(f)]]
        assert len(accepted) >= DRAWS_PER_BASE // 20, f"{base}: only {len(accepted)} draws pass both sides"


def test_accepted_sequence_parallel_is_what_the_builder_applies(outcomes):
    """megatron_config derives sequence_parallel from tp; the validator (MESH008/009) only lets
    through the value it derives, so the validated setting is the applied one."""
    accepted = [o for o in outcomes if o.rejection is None and not [f for f in o.errors if _mesh_or_recompute(f)]]
    assert {o.draw["sequence_parallel"] for o in accepted} == {True, False}
    for o in accepted:
        assert o.builder_sequence_parallel == o.draw["sequence_parallel"], o.draw


def test_megatron_layer_recomputes_what_recomp008_calls_applied():
    """RECOMP008 warns about the modules megatron-core accepts and the project's layer ignores: its
    APPLIED_BY_MEGATRON_MODEL must be exactly the modules for which the layer wraps a checkpoint."""
    import torch

    from launcher.config.compose import compose
    from launcher.validate.rules.recompute import APPLIED_BY_MEGATRON_MODEL
    from model.megatron import layer, pack_lengths
    from model.megatron.build import build_model
    from model.megatron.init import init_weights
    from model.megatron.spec import ModelSpec

    init_world_of_one()
    cfg = compose(["model=tiny"]).config  # dense layer 0, MoE layers 1-3, KDA and DSA attention
    spec = ModelSpec.from_arch(cfg.model.arch, cfg.model.dtype)
    ids = torch.arange(8) % cfg.model.arch.vocab_size
    applied, threads = set(), torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matmuls: two contending threads made each forward ~40x slower here
    try:
        for module in MEGATRON_MODULES:
            model = build_model(spec, "cpu", recompute_modules=frozenset({module}))
            init_weights(model, seed=0)
            with mock.patch.object(layer, "checkpoint", wraps=layer.checkpoint) as checkpoint:
                model(ids, pack_lengths([8], "cpu"))
            if checkpoint.called:
                applied.add(module)
    finally:
        torch.set_num_threads(threads)
    assert applied == set(APPLIED_BY_MEGATRON_MODEL)
