"""FragRel's semantic relation (Eq. 6): fragments related by what their code says, not by where it sits.

A fragment's embedding is the mean of the code model's own input embeddings over its tokens (the model's first
hidden states, mean-pooled: no forward pass, so an embedding costs a tokenization). The relation is the cosine
similarity, `1 - d_cos(e_i, e_j)`, floored at 0 (Eq. 9 averages with non-negative weights). Raw means of token
embeddings share a large common part (on 1,030 windows of diffusers every cosine was about 0.93, the vocabulary's
mean subtracted or not), so the compared fragments' own mean is subtracted first: the median weight is then 0 and
a fragment relates to the few that share what sets it apart. A mean needs enough fragments to be one: a pool of
fewer than `MIN_POOL` gets no semantic relations.

Over a whole repository the relation would be an N x N matrix; Eq. 9 only needs the neighbours that carry some
similarity to the query, so `SemanticRelations.environment` relates the `POOL` fragments most similar to the
query with each other, per request (a 256 x 256 product), each embedding cached by the fragment's text.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from repocomp.errors import RepocompError

if TYPE_CHECKING:
    from repocomp.config.schema import Config

__all__ = ["MIN_POOL", "POOL", "TokenEmbedder", "SemanticRelations", "embedder_for", "relations_for", "semantic_weights"]

log = logging.getLogger(__name__)

POOL = 256  # fragments most similar to the query whose relations to each other are computed per request
MIN_POOL = 8  # fewer fragments than this have no mean to set them apart from
CACHE_ENTRIES = 20_000  # fragment embeddings kept (float16: 20,000 x 896 dims is 36 MB)
MAX_TOKENS = 512  # tokens of one fragment read (a window is 20 lines: a few hundred tokens)


class TokenEmbedder:
    """Mean input embedding of a text's tokens, under a tokenizer (`tokenizers.Tokenizer`) and its matrix."""

    def __init__(self, tokenizer: Any, matrix: np.ndarray) -> None:
        self.tokenizer = tokenizer
        self.matrix = matrix  # vocabulary x dims
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text: its tokens' mean embedding (zeros for a text with no tokens)."""
        out = np.zeros((len(texts), self.matrix.shape[1]), np.float32)
        with self._lock:
            todo = [k for k, t in enumerate(texts) if t not in self._cache]
            if todo:
                for k, enc in zip(todo, self.tokenizer.encode_batch([texts[k] for k in todo]), strict=True):
                    ids = np.asarray(enc.ids[:MAX_TOKENS], np.int64)
                    ids = ids[ids < len(self.matrix)]
                    row = self.matrix[ids].astype(np.float32).mean(0) if len(ids) else out[k]
                    self._cache[texts[k]] = row.astype(np.float16)
            for k, t in enumerate(texts):
                out[k] = self._cache[t]
                self._cache.move_to_end(t)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return out


def semantic_weights(embeddings: np.ndarray) -> np.ndarray:
    """Eq. 6 between every pair of rows: the cosine of the rows less their mean, floored at 0, diagonal 0."""
    e = embeddings - embeddings.mean(0, keepdims=True)
    norms = np.linalg.norm(e, axis=1, keepdims=True)
    e = np.divide(e, norms, out=np.zeros_like(e), where=norms > 1e-12)
    w = np.clip(e @ e.T, 0.0, 1.0)
    np.fill_diagonal(w, 0.0)
    return w.astype(np.float32)


class SemanticRelations:
    """Eq. 9's sums over the semantic relation, for the fragments most similar to a query."""

    def __init__(self, embedder: TokenEmbedder, pool: int = POOL) -> None:
        self.embedder = embedder
        self.pool = pool

    def environment(self, s_ind: np.ndarray, available: np.ndarray,
                    texts: Callable[[np.ndarray], list[str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids, numerator, denominator): for the `pool` available fragments of highest s_ind,
        `sum_j w_ij s_ind_j` and `sum_j w_ij` over the others of the pool; `texts(ids)` gives their code."""
        ranked = np.where(available[: len(s_ind)] & (s_ind > 0), s_ind, -np.inf)
        k = min(self.pool, int(np.isfinite(ranked).sum()))
        if k < MIN_POOL:
            empty = np.zeros(0, np.float32)
            return np.zeros(0, np.int64), empty, empty
        ids = np.argpartition(-ranked, k - 1)[:k]
        ids = np.sort(ids)
        w = semantic_weights(self.embedder.embed(texts(ids)))
        return ids, w @ s_ind[ids].astype(np.float32), w.sum(1)


def _load(folder: Path) -> TokenEmbedder:
    import torch
    from safetensors import safe_open
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        name = next((k for k in f.keys() if k.endswith("embed_tokens.weight")), None)  # noqa: SIM118
        if name is None:
            raise ValueError(f"{folder}: no input embedding matrix (embed_tokens.weight) in model.safetensors")
        matrix = f.get_tensor(name).to(torch.float16).numpy()
    log.info("semantic relations: %s's input embeddings, %d x %d", folder.name, *matrix.shape)
    return TokenEmbedder(tokenizer, matrix)


@lru_cache(maxsize=2)
def embedder_for(folder: Path) -> TokenEmbedder:
    """The token embedder of a prepared local model's folder (loaded once: 272 MB for Qwen2.5-Coder 0.5B)."""
    return _load(folder)


def model_folder(config: Config) -> Path:
    """The folder whose input embeddings relate fragments: the in-process model's, the prompt tokenizer's (a served
    prepared model), else the prepared local model."""
    from repocomp.backends.local_model import prepared

    for name in (config.backend.model, config.prompt.tokenizer):
        if name and (Path(name).expanduser() / "model.safetensors").is_file():
            return Path(name).expanduser()
    local = prepared()
    if local is not None and (local.path / "model.safetensors").is_file():
        return local.path
    raise RepocompError("[retrieval] semantic relates fragments through a local model's input embeddings: "
                        "run `repocomp model prepare` first, or set semantic = 0")


def relations_for(config: Config) -> SemanticRelations:
    return SemanticRelations(embedder_for(model_folder(config)))
