"""Forward-pass helpers shared by the hf trainer and the hf engine.

Shape legend: B sequences, T positions, V vocabulary. `logp_BT` is aligned to targets:
column t is the log-probability of token t+1 given tokens 0..t.
Both sides divide logits by the sampling temperature, so the trainer's log-probs are
those of the distribution the engine sampled from.
"""
import torch

from launcher.workers.hf.model import forward_kwargs


def logits_of(model: torch.nn.Module, ids_BT: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids_BT, use_cache=False, **forward_kwargs(model, ids_BT.shape[1])).logits.float()


def target_logprobs(logits_BTV: torch.Tensor, ids_BT: torch.Tensor, temperature: float,
                    with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(token t+1) at each position t (B, T-1), and the entropy there when asked."""
    logp_BTV = torch.log_softmax(logits_BTV[:, :-1] / temperature, dim=-1)
    logp_BT = logp_BTV.gather(-1, ids_BT[:, 1:, None]).squeeze(-1)
    entropy_BT = -(logp_BTV.exp() * logp_BTV).sum(-1) if with_entropy else None
    return logp_BT, entropy_BT


def sample_next(logits_BV: torch.Tensor, temperature: float, top_p: float,
                generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; return it and its log-prob under softmax(logits / T).

    top_p only restricts which tokens can be drawn; the returned log-prob is the untruncated
    tempered one, the same quantity the trainer recomputes. temperature 0 is greedy (held-out
    evaluation): the most likely token, with its log-prob at temperature 1 as vLLM reports it.
    """
    if temperature == 0:
        logp_BV = torch.log_softmax(logits_BV.float(), dim=-1)
        token_B = logp_BV.argmax(dim=-1)
        return token_B, logp_BV.gather(-1, token_B[:, None]).squeeze(-1)
    logp_BV = torch.log_softmax(logits_BV.float() / temperature, dim=-1)
    probs_BV = logp_BV.exp()
    if top_p < 1.0:
        sorted_BV, order_BV = probs_BV.sort(dim=-1, descending=True)
        drop_BV = sorted_BV.cumsum(-1) - sorted_BV > top_p
        probs_BV = probs_BV.scatter(-1, order_BV, sorted_BV.masked_fill(drop_BV, 0.0))
    token_B = torch.multinomial(probs_BV, 1, generator=generator).squeeze(-1)
    return token_B, logp_BV.gather(-1, token_B[:, None]).squeeze(-1)
