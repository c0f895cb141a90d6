"""FragRel's semantic relation (Eq. 6): the cosine by hand, the embedder, the pool, and the retriever's Eq. 9."""

from __future__ import annotations

import numpy as np
import pytest
from test_retrieval import FakeIndex, small_config
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from repocomp.backends.local_model import LocalModel
from repocomp.context.retrieval import Retriever
from repocomp.context.semantic import MIN_POOL, SemanticRelations, TokenEmbedder, embedder_for, semantic_weights
from repocomp.errors import RepocompError

WORDS = ["alpha", "beta", "gamma", "delta", "[UNK]"]


def word_embedder(matrix: np.ndarray) -> TokenEmbedder:
    tok = Tokenizer(WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    return TokenEmbedder(tok, matrix.astype(np.float16))


def test_semantic_weights_are_the_centred_cosine_computed_by_hand() -> None:
    e = np.array([[2, 0], [2, 1], [0, 2], [0, 0]], np.float32)
    # less the mean (1, 0.75): (1, -0.75), (1, 0.25), (-1, 1.25), (-1, -0.75); norms 1.25, sqrt(1.0625),
    # sqrt(2.5625), 1.25; the two positive cosines: rows 0-1 and 2-3, every other pair negative -> 0
    c01 = (1 - 0.1875) / (1.25 * np.sqrt(1.0625))
    c23 = (1 - 0.9375) / (np.sqrt(2.5625) * 1.25)
    expected = np.zeros((4, 4), np.float32)
    expected[0, 1] = expected[1, 0] = c01
    expected[2, 3] = expected[3, 2] = c23
    np.testing.assert_allclose(semantic_weights(e), expected, atol=1e-6)


def test_a_text_embeds_as_the_mean_of_its_tokens_and_is_cached() -> None:
    m = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 4], [0, 0, 0], [5, 5, 5]], np.float32)
    emb = word_embedder(m)
    out = emb.embed(["alpha beta", "gamma", ""])
    np.testing.assert_allclose(out, [[0.5, 0.5, 0], [0, 0, 4], [0, 0, 0]])
    emb.matrix = np.zeros_like(emb.matrix)  # a cached text is not tokenized again
    np.testing.assert_allclose(emb.embed(["gamma"]), [[0, 0, 4]])
    np.testing.assert_allclose(emb.embed(["delta"]), [[0, 0, 0]])


def test_the_pool_is_the_available_fragments_most_similar_to_the_query() -> None:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS[:4], 3)) for _ in range(12)]
    emb = word_embedder(rng.normal(size=(5, 6)).astype(np.float32))
    s_ind = np.array([0.9, 0.8, 0.0, 0.7, 0.6, 0.5, 0.45, 0.4, 0.35, 0.3, 0.2, 0.95], np.float32)
    available = np.ones(12, bool)
    available[11] = False  # the leak rule took it: never in the pool
    ids, num, den = SemanticRelations(emb, pool=MIN_POOL).environment(
        s_ind, available, lambda ids: [texts[i] for i in ids])
    assert ids.tolist() == [0, 1, 3, 4, 5, 6, 7, 8]
    w = semantic_weights(emb.embed([texts[i] for i in ids]))
    np.testing.assert_allclose(num, w @ s_ind[ids], rtol=1e-5)
    np.testing.assert_allclose(den, w.sum(1), rtol=1e-5)
    few = np.zeros(12, bool)
    few[:MIN_POOL - 1] = True  # too few to have a mean: no semantic relations
    assert len(SemanticRelations(emb).environment(s_ind, few, lambda ids: [texts[i] for i in ids])[0]) == 0


def test_the_retriever_adds_the_semantic_relation_to_eq_9() -> None:
    files = {f"f{i}.py": f"alpha {WORDS[i % 4]} {WORDS[i // 4]} n{i}\ngamma beta" for i in range(10)}
    idx = FakeIndex(files, small_config(window=2, stride=2, alpha=0.5, semantic=2.0))
    emb = word_embedder(np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32))
    r = Retriever(idx, semantic=SemanticRelations(emb))
    q = "alpha beta"
    plain = {h.fragment_id: h for h in r.retrieve(q, alpha=0.0, top_k=10).hits}
    hits = r.retrieve(q, top_k=10).hits
    ids = np.array(sorted(plain))
    s = np.array([plain[i].s_ind for i in ids], np.float32)
    w = 2.0 * semantic_weights(emb.embed([idx.fragments[i].text for i in ids]))  # no structural relations here
    s_env = np.divide(w @ s, w.sum(1), out=np.zeros(len(ids)), where=w.sum(1) > 0)
    got = {h.fragment_id: h for h in hits}
    np.testing.assert_allclose([got[i].s_env for i in ids], s_env, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose([got[i].s_rel for i in ids], s + 0.5 * s_env, rtol=1e-5, atol=1e-7)
    assert s_env.max() > 0


def test_semantic_relations_without_a_prepared_model_are_one_clear_error() -> None:
    idx = FakeIndex({f"f{i}.py": f"alpha beta {i}" for i in range(10)}, small_config(alpha=0.5, semantic=1.0))
    with pytest.raises(RepocompError, match="repocomp model prepare"):
        Retriever(idx).retrieve("alpha beta")


def test_the_code_model_relates_code_that_does_the_same_thing(local_model: LocalModel) -> None:
    reads = ["with open(path) as fh:\n    data = json.load(fh)", "cfg = json.loads(Path(p).read_text())",
             "with open(name, encoding='utf-8') as f:\n    rows = json.load(f)", "text = open(fn).read()\nobj = json.loads(text)"]
    maths = ["def add(a, b):\n    return a + b", "total = sum(x * w for x, w in zip(xs, ws))",
             "def mean(v):\n    return sum(v) / len(v)", "acc = 0\nfor x in values:\n    acc += x * x"]
    w = semantic_weights(embedder_for(local_model.path).embed(reads + maths))
    within = (w[:4, :4].sum() + w[4:, 4:].sum()) / 24  # diagonal zero: 12 + 12 pairs
    across = w[:4, 4:].mean()
    assert within > across + 0.1, (within, across)
