"""vLLM sampling parameters for one request, and the conversion of its output.

Log-probs: engines run with logprobs_mode="processed_logprobs", so the log-prob of each
sampled token is taken from softmax(logits / temperature) after top-p masking: the
distribution the token was drawn from. With top_p = 1 (every recipe here) that is exactly
the tempered log-prob the trainer recomputes; with top_p < 1 it is higher by the log of
the kept probability mass, which is the correct behaviour-policy value for importance
sampling.
"""


def stop_ids(eos_ids) -> list[int]:
    """An int or a sequence of ids as the list vLLM takes."""
    return [eos_ids] if isinstance(eos_ids, int) else [int(i) for i in eos_ids]


def vllm_sampling_params(sampling, eos_ids, seed: int):
    """`sampling` is the Protocol's SamplingParams (max_tokens, temperature, top_p from
    `algorithm:`); each request gets its own seed so the samples of a group differ.
    `eos_ids`: every id that ends a response (Tokenizer.eos_ids), or one int."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    return SamplingParams(
        n=1,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_tokens=sampling.max_tokens,
        # Engines skip tokenizer init, so vLLM does not know EOS: stop on every EOS id of the
        # checkpoint's generation_config (GLM's turn also ends at <|user|> / <|observation|>).
        stop_token_ids=stop_ids(eos_ids),
        logprobs=0,
        detokenize=False,
        seed=seed,
        # Only the finished request is wanted: no per-step partial outputs to build and ship.
        output_kind=RequestOutputKind.FINAL_ONLY,
    )


def tokens_and_logprobs(completion) -> tuple[list[int], list[float], bool]:
    """(tokens up to and including EOS, log-prob of each, ended by EOS) of a CompletionOutput
    requested with logprobs=0 (one dict per step holding the sampled token)."""
    tokens = list(completion.token_ids)
    logprobs = [step[token].logprob for step, token in zip(completion.logprobs, tokens, strict=True)]
    return tokens, logprobs, completion.finish_reason == "stop"
