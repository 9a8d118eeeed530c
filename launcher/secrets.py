"""Masking of secrets in anything the launcher prints or writes.

Only environment variables are masked, never schema fields: an entry of an `env`
mapping, or an UPPER_CASE environment-variable-shaped key anywhere (the planner's env,
Ray's `env_vars`), whose underscore-separated name parts match a secret pattern:
`*_API_KEY`, `*_KEY`, `*_TOKEN`, `*_SECRET` (last part), a `SECRET` part anywhere
(AWS_SECRET_ACCESS_KEY) or `PASSWORD` inside any part. Schema fields such as
`data.prompt_key`, `model.arch.num_key_value_heads` or `batch.tokens_per_step` are
lower-case and never masked, so a saved config.yaml reproduces the run.
"""
import re

MASK = "***"
_ENV_VAR_SHAPE = re.compile(r"^[A-Z][A-Z0-9_]*$")
_SECRET_LAST_PARTS = frozenset({"KEY", "TOKEN", "SECRET"})
_ENV_SECTIONS = frozenset({"env", "env_vars"})


def is_secret_name(name: str) -> bool:
    """Whether an environment variable named `name` holds a secret (by whole name parts)."""
    parts = [p for p in str(name).upper().split("_") if p]
    if not parts:
        return False
    return parts[-1] in _SECRET_LAST_PARTS or "SECRET" in parts or any("PASSWORD" in p for p in parts)


def _is_env_var_key(name) -> bool:
    return isinstance(name, str) and bool(_ENV_VAR_SHAPE.match(name))


def _mask_value(v):
    return v if v in (None, "") else MASK


def mask_env(env: dict) -> dict:
    """Copy of a mapping of environment variables with secret ones masked."""
    return {k: (_mask_value(v) if is_secret_name(str(k)) else v) for k, v in env.items()}


def mask_secrets(node):
    """Copy of a plain dict/list tree with secret environment variables' values masked."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _ENV_SECTIONS and isinstance(v, dict):
                out[k] = mask_env(v)
            elif _is_env_var_key(k) and is_secret_name(k):
                out[k] = _mask_value(v)
            else:
                out[k] = mask_secrets(v)
        return out
    if isinstance(node, list):
        return [mask_secrets(v) for v in node]
    return node


def mask_override(override: str) -> str:
    """`env.HF_TOKEN=abc` -> `env.HF_TOKEN=***`; `data.prompt_key=q` is kept."""
    key, sep, value = override.partition("=")
    if not sep:
        return override
    path = key.lstrip("+~").split(".")
    name = path[-1]
    in_env = len(path) >= 2 and path[-2] in _ENV_SECTIONS
    secret = is_secret_name(name) and (in_env or _is_env_var_key(name))
    return f"{key}={MASK}" if secret else override
