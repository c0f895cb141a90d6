"""Prefix reuse for the in-process model: the KV caches of recent prompts, and greedy decoding that starts from one.

Two requests in one document a few keystrokes apart share almost all of their prompt, and a 1,024-token prefill
of the local model takes 2.3 s on an AVX2 CPU. `PrefixCache` keeps the keys and values of recent prompts (and of
what was generated after them), per cache key, and hands a request a cache already holding its longest common
token prefix with one of them: only the tokens after it are prefilled.

- Keys: `GenerationRequest.cache_key`, which the caller makes name the folder and the document; entries are only
  ever matched against requests with the same key, so a cache never crosses documents or folders. A request
  without a key (None) reuses nothing and leaves nothing behind: a one-shot caller (the CLI) pays nothing for it.
- Bounded: at most `max_entries` entries and `max_tokens` tokens over all of them, least recently used evicted
  first. A token of the local model costs 18 layers x 2 x 256 floats = 36 KiB in float32 (18 KiB in bf16): the
  defaults (8 entries, 8,192 tokens) hold at most 288 MiB.
- Exact, bit for bit. A prefill split where a fresh one was not rounds differently (bf16 on a CPU with native
  bf16: logits moved by up to 0.6 at one cut; float32 on an AVX2 CPU: by 4e-4), and a near-tie could turn a
  greedy token. So every prompt is prefilled in chunks of `CHUNK` tokens aligned at absolute positions (0, CHUNK,
  2 CHUNK, ...), up to the last boundary before its last token, and a cache is reused only up to such a boundary
  that its own aligned chunks reached: a chunk is then computed from the same numbers with the same shapes whether
  the positions before it came from a cache or were just computed, so its keys and values are those of a fresh
  prefill, and an answer never depends on what was cached before it (`repocomp bench prefill` shows both).
- An entry that the new prompt repeats but for its last few tokens (`SUPERSEDE`: typing, a small edit at the end)
  is replaced by the new one; one that shares less (another retrieval round's prompt) stays, for its own next turn.
- Exact with sliding-window layers (Gemma 3): the cache keeps every position of every layer (`DynamicCache()`
  without a config: plain `DynamicLayer`s), and the attention mask, built from the model's config, still enforces
  the window. transformers' default cache drops a sliding layer's positions older than the window, which could not
  be cut back to an earlier prefix; a full-length one is cut by slicing, and is the same cache a fresh prefill of
  the prefix builds. The block-skipping attention (hf_attention.py) never computes the products of the keys that
  the window hides, so the longer cache costs memory (and a longer copy per forward pass), not attention time.

The decoding loop that starts from such a cache is `greedy.generate_greedy`.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import torch

from repocomp.backends.alignment import aligned_end, reusable

if TYPE_CHECKING:
    from transformers import DynamicCache

# tokens a prefill pass computes (a cache is reused up to a multiple of it). A 950-token prefill on 2 cores, one pass
# against chunks of 256 (median of 5, `repocomp bench prefill`): AMX bf16 676 / 474 ms, AVX2 float32 2,270 /
# 2,481 ms; chunks of 128 cost 10-30% more, chunks of 512 would reuse half a prompt at most
CHUNK = 256
SUPERSEDE = 16  # an entry whose prompt the new one repeats but for at most this many last tokens is replaced
MAX_ENTRIES = 8
MAX_TOKENS = 8192


@dataclass(eq=False)
class Entry:
    key: str
    tokens: torch.Tensor  # 1-D: the tokens whose keys and values `cache` holds (prompt, then generated)
    prompt_len: int  # of those, the prompt's (its first `aligned_end(prompt_len, chunk)` came from aligned chunks)
    cache: DynamicCache  # of plain (full-length) layers


@dataclass
class Reuse:
    """What `PrefixCache.take` found: a cache holding the first `reused` tokens of the prompt."""

    cache: DynamicCache
    reused: int
    source: Entry | None
    shared: int = 0  # tokens the prompt shares with `source` (more than `reused` where reuse stops at a chunk)


class PrefixCache:
    """The KV caches of recent prompts, bounded in entries and tokens, reused up to multiples of `chunk` (see the
    module's docstring)."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_tokens: int = MAX_TOKENS, chunk: int = CHUNK) -> None:
        self.max_entries = max_entries
        self.max_tokens = max_tokens
        self.chunk = chunk
        self._entries: OrderedDict[int, Entry] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self.requests = self.hits = self.reused_tokens = self.prefilled_tokens = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def tokens(self) -> int:
        return sum(e.tokens.shape[0] for e in self._entries.values())

    def stats(self) -> dict[str, int | float]:
        with self._lock:
            return {"requests": self.requests, "hits": self.hits,
                    "hit_rate": self.hits / self.requests if self.requests else 0.0,
                    "reused_tokens": self.reused_tokens, "prefilled_tokens": self.prefilled_tokens,
                    "entries": len(self._entries), "tokens": self.tokens}

    def take(self, key: str | None, ids: torch.Tensor, count: bool = True) -> Reuse:
        """A cache for prompt `ids` (1-D): holding its longest common prefix with an entry of `key`, cut down to a
        chunk boundary that the entry's aligned prefill reached and that leaves the prompt's last token to prefill
        (it computes the next token's logits), or empty. Counts the request (not a prefill's piece: `count`).
        The entry itself is not changed (the new cache holds views of its tensors; the prefill makes new ones)."""
        n = ids.shape[0]
        best, reused, shared = None, 0, 0
        with self._lock:
            if key is not None and supports_reuse():
                for entry in self._entries.values():
                    if entry.key == key:
                        same = min(common_prefix(entry.tokens, ids), n - 1)
                        common = reusable(same, entry.prompt_len, self.chunk)
                        if common > reused:
                            best, reused, shared = entry, common, same
            if best is None or reused == 0:
                best, reused = None, 0
            else:
                self._entries.move_to_end(id(best))
            if count:
                self.requests, self.hits = self.requests + 1, self.hits + (best is not None)
                self.reused_tokens += reused
                self.prefilled_tokens += n - reused
        return Reuse(cache=empty_cache() if best is None else cut(best.cache, reused), reused=reused, source=best,
                     shared=shared)

    def put(self, key: str | None, tokens: torch.Tensor, prompt_len: int, cache: DynamicCache, reuse: Reuse) -> None:
        """Keep `cache` (holding `tokens`, 1-D, of which the first `prompt_len` are the prompt) under `key`."""
        if key is None or not supports_reuse() or cache.get_seq_length() != tokens.shape[0]:
            return
        with self._lock:
            source = reuse.source
            if source is not None and id(source) in self._entries and source.prompt_len - reuse.shared <= SUPERSEDE:
                del self._entries[id(source)]
            if tokens.shape[0] > self.max_tokens:
                return
            entry = Entry(key=key, tokens=tokens.detach().clone(), prompt_len=prompt_len, cache=cache)
            self._entries[id(entry)] = entry
            total = self.tokens
            while len(self._entries) > self.max_entries or total > self.max_tokens:
                _, old = self._entries.popitem(last=False)
                total -= old.tokens.shape[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def common_prefix(a: torch.Tensor, b: torch.Tensor) -> int:
    """The length of the longest common prefix of two 1-D token tensors."""
    m = min(a.shape[0], b.shape[0])
    differ = (a[:m] != b[:m]).nonzero()
    return int(differ[0]) if differ.numel() else m


@functools.cache
def supports_reuse() -> bool:
    """Whether this transformers' DynamicCache is a list of layers that can be built from tensors (>= 4.56)."""
    from transformers import DynamicCache

    return hasattr(DynamicCache(), "layers")


def empty_cache() -> DynamicCache:
    """A cache of full-length layers: every position of every layer, sliding-window layers included."""
    from transformers import DynamicCache

    return DynamicCache()


def cut(cache: DynamicCache, n: int) -> DynamicCache:
    """A new cache holding the first `n` positions of `cache` (views: `cache` is not changed)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    out = DynamicCache()
    for layer in cast("list[DynamicLayer]", cache.layers):  # a cache of `empty_cache`'s: plain full-length layers
        keys, values = layer.keys, layer.values
        assert keys is not None and values is not None, "a cache of a prefilled prompt"
        copy = DynamicLayer()
        copy.lazy_initialization(keys, values)
        copy.keys, copy.values = keys[:, :, :n], values[:, :, :n]
        out.layers.append(copy)
    return out


def cache_argument(model: torch.nn.Module) -> str:
    """The name the model's forward takes its cache by: `cache` in transformers >= 5.x, `past_key_values` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def prefill_aligned(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache, reused: int,
                    chunk: int | None) -> int:
    """Fill `cache` (holding the first `reused` tokens of `input_ids`, (1, n)) chunk by aligned chunk up to
    `aligned_end(n, chunk)`: keys and values only (the base model, no output layer); nothing without a chunk.
    Returns the positions it holds."""
    if not chunk:
        return reused
    fed, end = reused, aligned_end(input_ids.shape[1], chunk)
    base = getattr(model, "model", model)  # a causal LM's decoder (no output layer), where it has one
    while fed < end:
        step = chunk - fed % chunk
        base(input_ids=input_ids[:, fed:fed + step], **{cache_argument(base): cache, "use_cache": True})
        fed += step
    return fed


def next_logits(model: torch.nn.Module, input_ids: torch.Tensor, cache: DynamicCache, reused: int,
                chunk: int | None) -> torch.Tensor:
    """The next token's logits (float32, (1, vocab)) after `input_ids` (1, n), prefilled as `greedy.generate_greedy`
    prefills from `cache` holding its first `reused` tokens: aligned chunks, then one pass that computes logits."""
    fed = prefill_aligned(model, input_ids, cache, reused, chunk)
    out = model(input_ids[:, fed:], use_cache=True, logits_to_keep=1, **{cache_argument(model): cache})
    return out.logits[:, -1].float()
