"""Masking of secrets in anything the launcher prints or writes.

Any key or environment variable whose name contains KEY, TOKEN, SECRET or PASSWORD
is replaced by `***` (WANDB_API_KEY, HF_TOKEN, ...), wherever it sits in the config.
"""
import re

MASK = "***"
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def mask_secrets(node):
    """Copy of a plain dict/list tree with secret-named keys' values masked."""
    if isinstance(node, dict):
        return {k: (MASK if is_secret_name(str(k)) and v not in (None, "") else mask_secrets(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [mask_secrets(v) for v in node]
    return node


def mask_override(override: str) -> str:
    """`env.HF_TOKEN=abc` -> `env.HF_TOKEN=***`."""
    key, sep, value = override.partition("=")
    return f"{key}={MASK}" if sep and is_secret_name(key) else override
