"""Autoregressive sampling with the model's cache, one batch per prompt length.

Prompts of equal length are decoded together so no sequence ever needs left padding
(KDA's recurrent state and the DSA indexer would see the pads). Each call is seeded, so a
chunk of work samples the same tokens wherever and whenever it runs.

Before every forward (the prefill and each decode step) the caller's `boundary` runs: a
weight update may apply there (inference.update_mode: in_flight, weight_sync/update_gate.py), and it
returns the policy version of the weights the forward runs on. Each token records the
version of the forward whose logits it was sampled from; the cache of the tokens before an
update stays as the earlier weights computed it, so a token's log-prob is that of the new
weights attending over the kept cache: exactly the distribution it was drawn from.
"""
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import torch

from launcher.workers.hf.compute import sample_next
from launcher.workers.hf.model import forward_kwargs


@dataclass
class Sampled:
    tokens: list[int]
    logprobs: list[float]
    finished: bool
    """True when an EOS id was produced (False: cut at max_response_len)."""
    versions: list[int]
    """Per token, the policy version of the weights that produced its logits."""
    routes: np.ndarray | None = None
    """uint16 [len(prompt) + len(tokens) - 1, moe_layers, top_k] when a RouteRecorder was given."""
    indexer_topk: np.ndarray | None = None
    """uint16 [len(prompt) + len(tokens) - 1, indexer_layers, pools] when an IndexerRecorder was given."""


@torch.no_grad()
def _decode_batch(model, prompt_ids_BT: torch.Tensor, sp, eos_ids: tuple[int, ...], pad_id: int,
                  generator: torch.Generator, recorders: dict, boundary) -> list[Sampled]:
    batch = prompt_ids_BT.shape[0]
    eos_E = torch.tensor(eos_ids, dtype=torch.long, device=prompt_ids_BT.device)
    versions_N = [boundary()]
    out = model(input_ids=prompt_ids_BT, use_cache=True, **forward_kwargs(model, prompt_ids_BT.shape[1]))
    taken = {field: [r.take(batch)] for field, r in recorders.items()}
    cache, logits_BV = out.cache, out.logits[:, -1]
    tokens_BN, logps_BN = [], []
    done_B = torch.zeros(batch, dtype=torch.bool, device=prompt_ids_BT.device)
    for _ in range(sp.max_tokens):
        token_B, logp_B = sample_next(logits_BV, sp.temperature, sp.top_p, generator)
        token_B = torch.where(done_B, torch.full_like(token_B, pad_id), token_B)
        tokens_BN.append(token_B)
        logps_BN.append(logp_B)
        done_B |= torch.isin(token_B, eos_E)
        if bool(done_B.all()):
            break
        versions_N.append(boundary())
        out = model(input_ids=token_B[:, None], cache=cache, use_cache=True)
        for field, r in recorders.items():
            taken[field].append(r.take(batch))
        cache, logits_BV = out.cache, out.logits[:, -1]
    results = _unpack(torch.stack(tokens_BN, 1), torch.stack(logps_BN, 1), versions_N, eos_ids)
    # The last sampled token is never fed: a row has prompt + response - 1 recorded positions.
    lengths = [prompt_ids_BT.shape[1] + len(r.tokens) - 1 for r in results]
    for field, chunks in taken.items():
        for res, array in zip(results, recorders[field].arrays(torch.cat(chunks, dim=1), lengths), strict=True):
            setattr(res, field, array)
    return results


def _unpack(tokens_BN: torch.Tensor, logps_BN: torch.Tensor, versions_N: list[int],
            eos_ids: tuple[int, ...]) -> list[Sampled]:
    """Each row up to and including its first EOS id (any of `eos_ids`)."""
    stops = set(eos_ids)
    results = []
    for tokens, logps in zip(tokens_BN.tolist(), logps_BN.tolist(), strict=True):
        first = next((i for i, t in enumerate(tokens) if t in stops), None)
        length = len(tokens) if first is None else first + 1
        results.append(Sampled(tokens[:length], logps[:length], finished=first is not None,
                               versions=versions_N[:length]))
    return results


def sample(model, prompts: list[list[int]], sp, eos_ids, pad_id: int, seed: int,
           recorders: dict | None = None, boundary=lambda: 0) -> list[Sampled]:
    """Sample one response per entry of `prompts` (repeat a prompt to get a group); a
    response ends at any of `eos_ids` (an int is one id: every EOS id of the checkpoint's
    generation_config, Tokenizer.eos_ids). `recorders` maps a Sampled field (`routes`,
    `indexer_topk`) to a recorder hooked on `model` (hf/routing.py RouteRecorder,
    hf/indexer_topk.py IndexerRecorder): each result carries that field's array. `boundary`
    (the module docstring's): called before each forward, returns the weights' policy version."""
    eos_ids = (eos_ids,) if isinstance(eos_ids, int) else tuple(eos_ids)
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    by_len: dict[int, list[int]] = defaultdict(list)
    for row, prompt in enumerate(prompts):
        by_len[len(prompt)].append(row)
    results: list[Sampled | None] = [None] * len(prompts)
    for length in sorted(by_len):
        rows = by_len[length]
        ids_BT = torch.tensor([prompts[r] for r in rows], dtype=torch.long, device=device)
        decoded = _decode_batch(model, ids_BT, sp, eos_ids, pad_id, generator, recorders or {}, boundary)
        for row, res in zip(rows, decoded, strict=True):
            results[row] = res
    return results
