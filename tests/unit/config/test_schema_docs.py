"""The schema documents itself: every key has a docstring, `--help keys` prints them all."""
from launcher.cli.help import help_text
from launcher.config.schema.docs import key_reference

SECTIONS = {"run", "model", "cluster", "placement", "trainer", "inference", "data", "algorithm", "logging",
            "checkpoint", "env"}


def test_every_key_has_a_docstring():
    undocumented = [key for key, _, doc in key_reference() if not doc]
    assert undocumented == []


def test_sections_match_design():
    assert {key for key, _, _ in key_reference() if "." not in key} == SECTIONS


def test_help_keys_lists_every_key_with_type():
    text = help_text("keys")
    for key, tp, _ in key_reference():
        assert f"{key} ({tp}):" in text


def test_help_lists_groups_and_options():
    text = help_text("")
    assert "recipe: dapo_async, dapo_fullft" in text and "cluster: b200x8" in text
