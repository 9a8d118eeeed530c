"""The run directory's config.yaml, overrides.yaml and plan.json (launcher/driver/records/rundir.py): secrets masked,
schema fields named *key*/*token* kept, and the saved overrides recompose to the saved config."""
import pytest
import yaml
from omegaconf import OmegaConf

from launcher.config.compose import compose
from launcher.driver.records.rundir import write_run_files
from launcher.secrets import MASK


@pytest.mark.slow
def test_saved_config_composes_to_the_same_config(tmp_path):
    """config.yaml + overrides.yaml of a run reproduce it; schema fields named *key*/*token* stay readable."""
    from launcher.plan import make_plan

    overrides = ["recipe=dapo_sync", f"run.output_dir={tmp_path}", "+env.HF_TOKEN=hunter2", "data.prompt_key=q.text"]
    composed = compose(overrides)
    run_dir = write_run_files(composed, make_plan(composed.config).to_dict())
    text = (run_dir / "config.yaml").read_text() + (run_dir / "plan.json").read_text()
    assert "hunter2" not in text
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["env"]["HF_TOKEN"] == MASK
    arch = saved["model"]["arch"]
    assert arch["num_key_value_heads"] == composed.config.model.arch.num_key_value_heads
    assert saved["trainer"]["max_tokens_per_microbatch"] == composed.config.trainer.max_tokens_per_microbatch
    assert saved["data"]["prompt_key"] == "q.text" and saved["data"]["answer_key"] == composed.config.data.answer_key
    plan = yaml.safe_load((run_dir / "plan.json").read_text())
    assert isinstance(plan["batch"]["tokens_per_step"], int)
    # round trip: the saved overrides recompose to exactly the saved config (the secret as given again)
    saved_overrides = yaml.safe_load((run_dir / "overrides.yaml").read_text())["overrides"]
    again = compose([o.replace(MASK, "hunter2") for o in saved_overrides])
    expected = OmegaConf.to_container(again.cfg, resolve=True, enum_to_str=True)
    expected["env"]["HF_TOKEN"] = MASK
    assert expected == saved
