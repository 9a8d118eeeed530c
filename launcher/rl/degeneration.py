"""Signs that an engine's samples went wrong rather than merely bad, measured on a step's
responses: what an engine does after a wake that remapped its recurrent state with undefined
contents (one id to the end, often id 0), a kernel that went non-finite, or a long decode that
loops. Each is a fraction or a count over every sample the step generated (dropped groups
included), so a random-init tiny model on a healthy engine reads near 0 on all of them.
"""
import math

REPEAT_NGRAM = 4
"""The n of repeat_ngram_frac: 4-grams repeat rarely in healthy text, and a loop of any period
up to 4 repeats every 4-gram after its first turn."""
COLLAPSE_MIN_TOKENS = 8
"""A single-id tail shorter than this is not called a collapse: short answers ("1", "11") and
the tiny recipes' 3-token responses repeat an id legitimately."""


def repeated_ngrams(tokens: list[int], n: int = REPEAT_NGRAM) -> tuple[int, int]:
    """(n-grams that occurred earlier in the same response, n-grams in it)."""
    seen, repeats = set(), 0
    for i in range(len(tokens) - n + 1):
        gram = tuple(tokens[i:i + n])
        repeats += gram in seen
        seen.add(gram)
    return repeats, max(len(tokens) - n + 1, 0)


def collapsed(tokens: list[int]) -> bool:
    """One id repeated to the end over at least half the response and COLLAPSE_MIN_TOKENS tokens."""
    if len(tokens) < COLLAPSE_MIN_TOKENS:
        return False
    run = 1
    while run < len(tokens) and tokens[-run - 1] == tokens[-1]:
        run += 1
    return run >= max(COLLAPSE_MIN_TOKENS, len(tokens) / 2)


def degeneration_stats(responses: list[list[int]], logprobs: list[list[float]]) -> dict:
    """repeat_ngram_frac (repeated 4-grams over all 4-grams), collapse_frac (responses ending in
    one id, collapsed()), nonfinite_logprobs (NaN or infinite behaviour log-probs, a count); the
    fractions None without a response or an n-gram, as the step's other sample means."""
    repeats = grams = 0
    for tokens in responses:
        r, g = repeated_ngrams(tokens)
        repeats, grams = repeats + r, grams + g
    return {"repeat_ngram_frac": repeats / grams if grams else None,
            "collapse_frac": sum(map(collapsed, responses)) / len(responses) if responses else None,
            "nonfinite_logprobs": sum(not math.isfinite(x) for row in logprobs for x in row)}
