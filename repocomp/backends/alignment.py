"""Where a reused prefix may end, for the in-process backends that prefill in aligned chunks (transformers and
llama.cpp): a prompt is prefilled in chunks of `chunk` tokens at absolute positions 0, chunk, 2 chunk, ..., so a
chunk is computed from the same numbers with the same shapes whether the positions before it came from a cache or
were just computed, and a reused prefix gives the answer a fresh prefill gives, bit for bit (prefix_cache.py)."""

from __future__ import annotations

__all__ = ["aligned_end", "reusable"]


def aligned_end(n: int, chunk: int) -> int:
    """Where the aligned chunks of an `n`-token prompt's prefill end: the last chunk boundary before its last token
    (the pass that computes the next token's logits starts there)."""
    return (n - 1) // chunk * chunk


def reusable(shared: int, prompt_len: int, chunk: int) -> int:
    """The tokens a cache of a `prompt_len`-token prompt's aligned prefill can give a prompt that shares `shared`
    tokens with it: down to a chunk boundary its aligned chunks reached (none from an empty prompt)."""
    common = max(0, min(shared, aligned_end(prompt_len, chunk)))
    return common - common % chunk
