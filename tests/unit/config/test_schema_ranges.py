"""Every numeric field driven with 0, -1, a huge value and (ints) a float.

Never a traceback: a value outside a field's declared range (launcher/config/schema/ranges.py) is a
finding naming the key (CFG007 at composition, or the rule named in `checked_by`); an in-range
value composes, plans and validates without raising.
"""
import copy
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from launcher.config.compose import compose
from launcher.config.compose_errors import translate
from launcher.config.schema import LauncherConfig
from launcher.config.schema.keys import _unwrap_optional, schema_fields
from launcher.config.schema.ranges import RANGES, range_findings
from launcher.errors import ConfigError
from launcher.validate import plan_and_check

ROOT = Path(__file__).resolve().parents[3]
NUMERIC = {k: _unwrap_optional(t)[0] for k, t in schema_fields().items() if _unwrap_optional(t)[0] in (int, float)}
HUGE = {int: 10**15, float: 1e300}


@pytest.fixture(scope="module")
def base():
    return compose(["recipe=tiny_grpo"])


def _set(config, key, value):
    node = config
    *parents, leaf = key.split(".")
    for part in parents:
        node = getattr(node, part)
    setattr(node, leaf, value)


def test_every_int_size_count_and_length_declares_a_range():
    """Ints are sizes, counts, lengths, seeds or timeouts here: each one has a declared range."""
    ints = {k for k, t in NUMERIC.items() if t is int}
    assert ints - set(RANGES) == set()
    assert set(RANGES) <= set(NUMERIC)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(NUMERIC))
def test_numeric_field_bad_values_are_findings_never_tracebacks(base, key):
    kind = NUMERIC[key]
    rng = RANGES.get(key)
    for value in (0, -1, HUGE[kind]):
        value = kind(value)
        composed = copy.deepcopy(base)
        _set(composed.config, key, value)
        at_compose = [f for f in range_findings(composed.config) if f.key == key]
        if at_compose:
            assert repr(value) in at_compose[0].message and rng.describe() in at_compose[0].message
            continue
        findings, _ = plan_and_check(composed)  # must not raise
        if rng is not None and not rng.contains(value):
            assert rng.checked_by, f"{key}={value!r} is outside {rng.describe()} but nothing reported it"
            assert any(f.id == rng.checked_by and f.key == key for f in findings), (key, value, findings)


@pytest.mark.parametrize("key", sorted(k for k, t in NUMERIC.items() if t is int))
def test_int_field_given_a_float_names_the_key(key):
    schema = OmegaConf.structured(LauncherConfig)
    with pytest.raises(Exception) as err:  # noqa: PT011 - whatever OmegaConf raises is translated
        OmegaConf.merge(schema, OmegaConf.from_dotlist([f"{key}=2.5"]))
    (finding,) = translate(err.value, [f"{key}=2.5"]).findings
    assert finding.id == "CFG002" and finding.key == key


@pytest.mark.slow
@pytest.mark.parametrize("overrides, key", [
    (["trainer.mesh.tp=-2"], "trainer.mesh.tp"), (["trainer.mesh.ep=-8"], "trainer.mesh.ep"),
    *[([f"trainer.mesh.{k}=0"], f"trainer.mesh.{k}") for k in ("tp", "pp", "cp", "ep", "etp")],
    (["inference.tp=0"], "inference.tp"), (["cluster.nodes=0"], "cluster.nodes"), (["run.name=''"], "run.name"),
    (["trainer.mesh.tp=10000000000000000000000"], "trainer.mesh.tp"),
])
def test_composition_names_key_value_and_range(overrides, key):
    with pytest.raises(ConfigError) as err:
        compose(["recipe=dapo_sync", *overrides])
    (finding,) = err.value.findings
    assert (finding.id, finding.key) == ("CFG007", key)
    assert key == "run.name" or (overrides[0].split("=")[1] in finding.message and ">= 1" in finding.message)


def test_all_out_of_range_keys_reported_together():
    with pytest.raises(ConfigError) as err:
        compose(["recipe=tiny_grpo", "trainer.mesh.tp=0", "inference.tp=-1", "cluster.gpus_per_node=0"])
    assert {f.key for f in err.value.findings} == {"trainer.mesh.tp", "inference.tp", "cluster.gpus_per_node"}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "launcher", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.slow
def test_cli_and_sweep_report_ranges_without_traceback(tmp_path):
    out = _cli("validate", "recipe=dapo_sync", "trainer.mesh.tp=-2", "--format", "json")
    assert out.returncode == 2 and '"key": "trainer.mesh.tp"' in out.stdout and "Traceback" not in out.stderr
    out = _cli("-m", "plan", "recipe=tiny_grpo", "trainer.mesh.tp=0,1", f"run.output_dir={tmp_path}")
    assert "Traceback" not in out.stderr + out.stdout
    assert "CFG007 trainer.mesh.tp" in out.stdout and "1 legal of 2" in out.stdout
