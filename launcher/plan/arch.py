"""Model facts derived from architecture fields, never from the model's name.

A model "has mHC" when hc_mult > 1 and "has KDA" when any layer is linear_attention;
layer schedules default exactly as the HF glm5_next config does.
"""
import dataclasses
import functools
import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from launcher.config.schema.model import ArchConfig

KDA = "linear_attention"
DSA = "indexed_attention"
DENSE, SPARSE = "dense", "sparse"


@dataclass(frozen=True)
class ArchFacts:
    layer_types: tuple[str, ...]
    mlp_layer_types: tuple[str, ...]
    n_kda: int
    n_dsa: int
    n_dense: int
    n_moe: int
    has_mhc: bool
    has_kda: bool
    has_dsa: bool
    has_moe: bool
    is_glm5_next: bool
    layer_pairs: tuple[tuple[tuple[str, str], int], ...]
    """((attention kind, mlp kind), number of layers): per-layer costs are summed per pair."""


def layer_types_of(arch: ArchConfig) -> tuple[str, ...]:
    if arch.layer_types is not None:
        return tuple(arch.layer_types)
    if arch.model_type != "glm5_next":
        return ("full_attention",) * arch.num_hidden_layers
    return tuple(KDA if i % 4 != 3 else DSA for i in range(arch.num_hidden_layers))


def mlp_layer_types_of(arch: ArchConfig) -> tuple[str, ...]:
    if arch.mlp_layer_types is not None:
        return tuple(arch.mlp_layer_types)
    if arch.model_type != "glm5_next":
        return (DENSE,) * arch.num_hidden_layers
    dense = min(3, arch.num_hidden_layers)
    return (DENSE,) * dense + (SPARSE,) * (arch.num_hidden_layers - dense)


_FIELD_VALUES = operator.attrgetter(*(f.name for f in dataclasses.fields(ArchConfig)))


def arch_key(arch: ArchConfig) -> tuple:
    """Hashable snapshot of every architecture field (lists as tuples), for memoisation."""
    return tuple([tuple(v) if type(v) is list else v for v in _FIELD_VALUES(arch)])


T = TypeVar("T")


def per_arch(fn: Callable[[ArchConfig], T]) -> Callable[..., T]:
    """Memoise `fn(arch)` per architecture: mesh search plans thousands of points of one model
    and rules ask for the same facts many times per point. The memoised function takes an
    optional `key`, the caller's arch_key(arch) when it already has one."""
    memo: dict[tuple, T] = {}

    @functools.wraps(fn)
    def memoised(arch: ArchConfig, key: tuple | None = None) -> T:
        key = arch_key(arch) if key is None else key
        if key not in memo:
            memo[key] = fn(arch)
        return memo[key]

    return memoised


@per_arch
def facts(arch: ArchConfig) -> ArchFacts:
    """What rules and the planner ask of the architecture (memoised: see per_arch)."""
    layers, mlps = layer_types_of(arch), mlp_layer_types_of(arch)
    n_moe = sum(m == SPARSE for m in mlps)
    return ArchFacts(
        layer_types=layers, mlp_layer_types=mlps,
        n_kda=sum(t == KDA for t in layers), n_dsa=sum(t == DSA for t in layers),
        n_dense=sum(m == DENSE for m in mlps), n_moe=n_moe,
        has_mhc=arch.hc_mult > 1, has_kda=KDA in layers, has_dsa=DSA in layers,
        has_moe=n_moe > 0 and arch.n_routed_experts > 0,
        is_glm5_next=arch.model_type == "glm5_next",
        layer_pairs=tuple(Counter(zip(layers, mlps, strict=False)).items()),
    )
