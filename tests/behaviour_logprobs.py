"""Recompute an engine's behaviour log-probs from the weights of each token's policy version.

A sequence generated across weight updates (inference.update_mode: in_flight) has tokens of
several versions, and the KV cache of the tokens before an update was computed by the weights
before it (hf/sampling.py). Token i was sampled from the logits of the forward at decode step i
(step 0: the prompt's prefill), run by version versions[i] over the cache that steps 0..i-1 left.
`replayed_logprobs` runs exactly that, one model per version, on one sequence: an independent
re-derivation of every recorded log-prob from the versions' own weights.
"""
import torch

from launcher.workers.hf.compute import logits_of, target_logprobs
from launcher.workers.hf.model import forward_kwargs


@torch.no_grad()
def replayed_logprobs(models: dict, prompt: list[int], tokens: list[int], versions: list[int],
                      temperature: float) -> list[float]:
    """Each token's log-prob at `temperature`, decode step i run by models[versions[i]]."""
    ids = torch.tensor([prompt])
    out = models[versions[0]](input_ids=ids, use_cache=True, **forward_kwargs(models[versions[0]], ids.shape[1]))
    logprobs = []
    for i, token in enumerate(tokens):
        if i:
            out = _decode_step(models[versions[i]], tokens[i - 1], out)
        logp_V = torch.log_softmax(out.logits[0, -1].float() / temperature, dim=-1)
        logprobs.append(float(logp_V[token]))
    return logprobs


def _decode_step(model, token: int, out):
    """One token over the cache `out` left: glm5_next's own `cache`, or transformers' past_key_values."""
    ids = torch.tensor([[token]])
    if hasattr(out, "cache"):
        return model(input_ids=ids, cache=out.cache, use_cache=True)
    return model(input_ids=ids, past_key_values=out.past_key_values, use_cache=True)


@torch.no_grad()
def full_sequence_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """The trainer's way: one forward over prompt + response, no cache."""
    ids = torch.tensor([prompt + tokens])
    logp_BT, _ = target_logprobs(logits_of(model, ids), ids, temperature, with_entropy=False)
    return logp_BT[0, len(prompt) - 1:].tolist()


def version_models(run_dir, config) -> dict:
    """policy version N -> the engine's model with checkpoint step N's trainer weights; version
    0 is the trainer's random init, rebuilt from run.seed as the trainer built it."""
    from launcher.rl.tokenizer import make_tokenizer
    from launcher.workers.hf.model import VISION_PREFIX, build_model

    pad_id = make_tokenizer(config.model).pad_id
    models = {0: build_model(config.model, pad_id, seed=config.run.seed).eval()}
    for folder in sorted(run_dir.rglob("step_*")):
        model = build_model(config.model, pad_id, seed=0).eval()
        loaded = model.load_state_dict(torch.load(folder / "trainer" / "model.pt"), strict=False)
        assert not loaded.unexpected_keys and all(k.startswith(VISION_PREFIX) for k in loaded.missing_keys)
        models[int(folder.name.removeprefix("step_"))] = model
    return models


def check_spanning_sequences(rows: list[dict], models: dict, temperature: float, tol: float, checked: int = 4) -> None:
    """samples.jsonl rows (logging.samples): the first `checked` sequences spanning two or more
    versions whose weights `models` has, token by token: the tokens before the first update
    against the old version's full forward, every token against the replayed decode. Versions
    whose weights barely differ would pass either way, so the old version must miss at least
    one later token by 10 x `tol`."""
    import pytest

    spanning = [r for r in rows if len(set(r["token_versions"])) > 1 and set(r["token_versions"]) <= models.keys()]
    assert spanning, "no trained sequence spans two versions"
    largest_miss = 0.0
    for row in spanning[:checked]:
        prompt, tokens, versions = row["prompt_ids"], row["tokens"], row["token_versions"]
        assert versions == sorted(versions) and max(versions) <= row["trained_version"]
        swap = versions.index(versions[-1]) if len(set(versions)) == 2 else versions.index(max(versions))
        first = full_sequence_logprobs(models[versions[0]], prompt, tokens, temperature)
        assert row["logprobs"][:swap] == pytest.approx(first[:swap], abs=tol)
        largest_miss = max([largest_miss, *(abs(a - b) for a, b in zip(row["logprobs"][swap:], first[swap:], strict=True))])
        replayed = replayed_logprobs(models, prompt, tokens, versions, temperature)
        assert row["logprobs"] == pytest.approx(replayed, abs=tol)
    assert largest_miss > 10 * tol, f"the versions' log-probs differ by at most {largest_miss:.1e}: nothing was told apart"
