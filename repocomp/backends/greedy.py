"""Greedy decoding for the in-process model, and the rules that stop a generation.

`generate_greedy` is the decoding loop: greedy with prompt lookup decoding (drafts from transformers'
`PromptLookupCandidateGenerator`, verified in one forward pass, as `generate(prompt_lookup_num_tokens=...)` does),
starting from a cache that holds a prefix of the input (prefix_cache.py). transformers' assisted decoding cannot
start from a filled cache (its first pass feeds the whole prompt again, after the cached part), hence this loop.

A generation stops at the first of:
- an end-of-generation token (`eos_ids`: the model's generation config, else its config);
- the token cap (`max_new_tokens`);
- `StopRules`, asked after every forward pass (and by transformers' `generate` as a stopping criterion when
  sampling): cancelled (the request was abandoned), the time limit (counted from the first token), a stop sequence
  in the text, or the request's `finished` predicate on the text.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from repocomp.backends.prefix_cache import cache_argument, prefill_aligned

if TYPE_CHECKING:
    from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase
    from transformers.models.auto.modeling_auto import _BaseModelWithGenerate as CausalLM

    from repocomp.backends.output_head import OutputHead

__all__ = ["StopRules", "decode", "eos_ids", "generate_greedy"]


def decode(tokenizer: PreTrainedTokenizerBase, ids: torch.Tensor) -> str:
    """The text of the token ids `ids` (1-D), special tokens left out."""
    text = tokenizer.decode(ids, skip_special_tokens=True)
    assert isinstance(text, str)  # a list only for a batch of sequences
    return text


@dataclass(eq=False)
class StopRules:
    """Whether a generation stops, asked with the sequence so far after every forward pass (as transformers asks
    a stopping criterion: `rules(ids, scores)`). `at_time_limit` says whether the time limit stopped it."""

    tokenizer: PreTrainedTokenizerBase
    prompt_len: int  # the sequence's first tokens that are the prompt, not the answer
    stops: tuple[str, ...]  # stop sequences, none empty
    finished: Callable[[str], bool] | None  # True once more text cannot change the completion kept
    cancelled: threading.Event
    max_time_s: float | None  # seconds after the first token (None or 0: no limit)
    first_token_at: float | None = field(default=None, init=False)
    at_time_limit: bool = field(default=False, init=False)

    def __call__(self, ids: torch.Tensor, scores: object = None, **kwargs: object) -> bool:
        if self.cancelled.is_set():
            return True
        # The time limit counts from the first token, not from the prefill: it bounds a run-on generation, and on
        # a slower CPU a prefill that takes the whole limit would leave a token or two of answer.
        now = time.monotonic()
        if self.first_token_at is None:
            self.first_token_at = now
        elif self.max_time_s and now - self.first_token_at >= self.max_time_s:
            self.at_time_limit = True
            return True
        if not self.stops and self.finished is None:
            return False
        text = decode(self.tokenizer, ids[0, self.prompt_len:])
        return any(s in text for s in self.stops) or (self.finished is not None and self.finished(text))


def eos_ids(model: PreTrainedModel) -> torch.Tensor | None:
    """The model's end-of-generation token ids (its generation config's, else its config's), or None."""
    eos = model.generation_config.eos_token_id
    if eos is None:
        eos = model.config.eos_token_id
    if eos is None:
        return None
    return torch.tensor([eos] if isinstance(eos, int) else list(eos), dtype=torch.long)


def _verified(model: CausalLM, head: OutputHead, hidden: torch.Tensor, draft: torch.Tensor) -> torch.Tensor:
    """The greedy tokens after each of `hidden`'s positions (1, d + 1, dim) for a pass that verified the `draft`
    tokens (d): through the certified head one position at a time, up to the first that rejects its draft token
    (the rest are never used); where the head cannot certify, the model's own product over every position, as its
    forward computes it (Gemma3ForCausalLM.forward), so the tokens are those of that product either way."""
    out: list[int] = []
    for i in range(hidden.shape[1]):
        token = head.argmax(hidden[0, i])
        if token is None:
            return model.lm_head(hidden)[0].float().argmax(-1)
        out.append(token)
        if i < draft.shape[0] and token != int(draft[i]):
            break
    return torch.tensor(out)


class _Verifier:
    """One forward pass over the tokens the cache does not hold yet (the last accepted token, then the draft):
    the model's greedy token after each of the draft's positions and after the last one."""

    def __init__(self, model: CausalLM, cache: DynamicCache, head: OutputHead | None) -> None:
        self.model = model
        self.head = head
        self.kwargs: dict[str, Any] = {cache_argument(model): cache, "use_cache": True}
        self.keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        # the same dict's cache: the base model's pass fills it as the full forward does
        self.base_kwargs = dict(self.kwargs)

    def tokens(self, candidate: torch.Tensor, fed: int, draft: int) -> torch.Tensor:
        """`candidate` (1, cur + draft): the sequence, then `draft` drafted tokens; the cache holds its first `fed`."""
        if self.keep_logits:
            self.kwargs["logits_to_keep"] = draft + 1
        new = candidate[:, fed:]
        if self.head is not None:
            hidden = self.model.model(input_ids=new, **self.base_kwargs).last_hidden_state[:, -draft - 1:]
            return _verified(self.model, self.head, hidden, candidate[0, candidate.shape[1] - draft:])
        logits = self.model(input_ids=new, **self.kwargs).logits[0, -draft - 1:]
        return logits.float().argmax(-1)


def _accepted(drafted: torch.Tensor, selected: torch.Tensor, room: int,
              eos: torch.Tensor | None) -> tuple[torch.Tensor, bool]:
    """The tokens a pass adds: the `drafted` tokens (1-D) up to the first the model's `selected` ones reject, then
    the model's own next token; at most `room` (the token cap), and none after an end-of-generation token (the
    second value: whether one was reached)."""
    m = min(drafted.shape[0], selected.shape[0])  # the head stops at the first rejected draft token
    n_matches = int((drafted[:m] == selected[:m]).cumprod(0).sum()) if m else 0
    valid = selected[: n_matches + 1][:room]
    if eos is not None:
        at = torch.isin(valid, eos).nonzero()
        if at.numel():
            return valid[: int(at[0]) + 1], True
    return valid, False


def generate_greedy(model: CausalLM, input_ids: torch.Tensor, cache: DynamicCache, reused: int, max_new_tokens: int,
                    stop: Callable[[torch.Tensor, None], bool], draft_tokens: int = 10,
                    head: OutputHead | None = None, chunk: int | None = None) -> torch.Tensor:
    """Greedy decoding with prompt lookup drafts, `input_ids` (1, n) after `cache`, which holds the keys and values
    of its first `reused` tokens (0 <= reused < n); with `chunk`, the prompt is prefilled in aligned chunks
    (prefix_cache.py) before the first pass that computes logits. Returns the sequence (1, n + generated); `cache`
    then holds every position but the last. Stops at EOS, after `max_new_tokens`, or when `stop(sequence, None)` says so
    (called once per forward pass, after the accepted tokens are added, as `generate` calls stopping criteria).
    With `head` (output_head.py), each pass picks its tokens through it (the same tokens, certified; the full
    lm_head where it cannot certify); the base model's pass, and so the cache, is the same."""
    from transformers.generation.candidate_generator import (
        PromptLookupCandidateGenerator,
    )

    n = input_ids.shape[1]
    if not 0 <= reused < n:
        raise ValueError(f"reused ({reused}) must leave at least one of the {n} prompt tokens to prefill")
    max_length = n + max_new_tokens
    eos = eos_ids(model)
    lookup = PromptLookupCandidateGenerator(eos_token_id=eos, num_output_tokens=draft_tokens, max_length=max_length)
    verifier = _Verifier(model, cache, head)
    seq = input_ids
    fed = prefill_aligned(model, input_ids, cache, reused, chunk)  # the positions the cache holds
    while True:
        cur = seq.shape[1]
        # transformers annotates LongTensor, torch's legacy tensor type that no Tensor matches statically
        candidate, _ = lookup.get_candidates(seq)  # type: ignore[arg-type]
        draft = candidate.shape[1] - cur
        valid, hit_eos = _accepted(candidate[0, cur:], verifier.tokens(candidate, fed, draft), max_length - cur, eos)
        seq = torch.cat([seq, valid[None]], dim=1)
        cache.crop(-(draft - (valid.shape[0] - 1)))  # drop the keys of the rejected draft tokens
        fed = seq.shape[1] - 1
        if stop(seq, None) or hit_eos or seq.shape[1] >= max_length:
            return seq
