"""Sampling parameters from `algorithm:` and the conversion of vLLM outputs to token/logprob lists.

Log-probs: engines run with logprobs_mode="processed_logprobs", so the log-prob of each
sampled token is taken from softmax(logits / temperature) after top-p masking: the
distribution the token was drawn from. With top_p = 1 (every recipe here) that is exactly
the tempered log-prob the trainer recomputes; with top_p < 1 it is higher by the log of
the kept probability mass, which is the correct behaviour-policy value for importance
sampling.
"""
from dataclasses import dataclass


@dataclass
class Generation:
    tokens: list[int]
    logprobs: list[float]
    """Log-prob of each sampled token (same length as tokens)."""
    finished: bool
    """True when EOS ended the response; False when max_response_len cut it."""


def sampling_params(algorithm, eos_id: int, seed: int, max_tokens: int | None = None):
    """One request's SamplingParams; each request gets its own seed so a group's samples differ."""
    from vllm import SamplingParams

    return SamplingParams(
        n=1,
        temperature=algorithm.temperature,
        top_p=algorithm.top_p,
        max_tokens=max_tokens or algorithm.max_response_len,
        # Engines skip tokenizer init, so vLLM does not know EOS: stop on the project's id.
        stop_token_ids=[eos_id],
        logprobs=0,
        detokenize=False,
        seed=seed,
    )


def to_generation(completion) -> Generation:
    """A vLLM CompletionOutput (logprobs=0: one dict per token holding the sampled token)."""
    tokens = list(completion.token_ids)
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs, tokens, strict=True)]
    return Generation(tokens=tokens, logprobs=logprobs, finished=completion.finish_reason == "stop")
