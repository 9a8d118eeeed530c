"""Which names are secrets, and masking them (only them) in config trees and overrides (launcher/secrets.py)."""
import pytest

from launcher.secrets import MASK, is_secret_name, mask_override, mask_secrets


@pytest.mark.parametrize("name", ["WANDB_API_KEY", "HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD",
                                  "MYPASSWORDFILE", "CLIENT_SECRET", "OPENAI_API_KEY", "SSH_KEY"])
def test_secret_env_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["num_key_value_heads", "prompt_key", "answer_key", "tokens_per_step",
                                  "max_tokens_per_microbatch", "dsa_cache_kib_per_token", "CUDA_HOME",
                                  "TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT"])
def test_not_secret_names(name):
    if name.isupper():
        assert not is_secret_name(name)
    tree = {"data": {name: "v"}, "plan": [{name: 1}]}
    assert mask_secrets(tree) == tree
    assert mask_override(f"data.{name}=v") == f"data.{name}=v"


def test_masking_env_entries_and_env_shaped_keys():
    tree = {"env": {"HF_TOKEN": "x", "CUDA_HOME": "/c", "hf_token": "y"}, "runtime": {"env_vars": {"A_KEY": "z"}},
            "flat": {"WANDB_API_KEY": "w", "EMPTY_TOKEN": ""}}
    assert mask_secrets(tree) == {"env": {"HF_TOKEN": MASK, "CUDA_HOME": "/c", "hf_token": MASK},
                                  "runtime": {"env_vars": {"A_KEY": MASK}},
                                  "flat": {"WANDB_API_KEY": MASK, "EMPTY_TOKEN": ""}}
    assert mask_override("+env.HF_TOKEN=abc") == f"+env.HF_TOKEN={MASK}"
    assert mask_override("++env.hf_token=abc") == f"++env.hf_token={MASK}"
