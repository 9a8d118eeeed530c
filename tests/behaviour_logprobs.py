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
            out = models[versions[i]](input_ids=torch.tensor([[tokens[i - 1]]]), cache=out.cache, use_cache=True)
        logp_V = torch.log_softmax(out.logits[0, -1].float() / temperature, dim=-1)
        logprobs.append(float(logp_V[token]))
    return logprobs


@torch.no_grad()
def full_sequence_logprobs(model, prompt: list[int], tokens: list[int], temperature: float) -> list[float]:
    """The trainer's way: one forward over prompt + response, no cache."""
    ids = torch.tensor([prompt + tokens])
    logp_BT, _ = target_logprobs(logits_of(model, ids), ids, temperature, with_entropy=False)
    return logp_BT[0, len(prompt) - 1:].tolist()
