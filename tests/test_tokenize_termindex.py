"""Tokenizer and sparse term index: hand-computed Jaccard/BM25 values, rank-bm25 agreement, incremental rows."""

from __future__ import annotations

import math
import pickle
import random
import time
import zlib

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from repocomp.index import term_index, vocabulary
from repocomp.index.store import whole
from repocomp.index.term_index import TermIndex
from repocomp.index.vocabulary import StoredVocabulary, vocabulary_arrays
from repocomp.tokenize import code_tokens

DOCS = [
    "a = foo(b)",
    "foo(b) + bar",
    "x = 1",
    None,
    "return foo(x) * foo(y)",
]


def test_code_tokens_splits_identifiers_numbers_operators() -> None:
    assert code_tokens("def f(x_1, y=2.5e-3): return x_1 ** 2 -> self.val[0]") == [
        "def", "f", "(", "x_1", ",", "y", "=", "2.5e-3", ")", ":", "return", "x_1", "**", "2", "->",
        "self", ".", "val", "[", "0", "]",
    ]
    assert code_tokens("a//=b != c") == ["a", "//=", "b", "!=", "c"]
    assert code_tokens("   \n\t") == []


def test_jaccard_hand_computed() -> None:
    idx = TermIndex.build(DOCS)
    s = idx.score("foo(b)", "jaccard")
    assert s.dtype == np.float32 and s.shape == (5,)
    # query set {foo, (, b, )} = 4
    # doc0 {a, =, foo, (, b, )}: inter 4, union 6
    # doc1 {foo, (, b, ), +, bar}: inter 4, union 6
    # doc2 {x, =, 1}: 0
    # doc4 {return, foo, (, x, ), *, y}: inter {foo, (, )} = 3, union 4 + 7 - 3 = 8
    np.testing.assert_allclose(s, [4 / 6, 4 / 6, 0.0, 0.0, 3 / 8], rtol=1e-6)
    # unknown query tokens still enlarge the union: {zzz, foo} vs doc4: inter 1, union 2 + 7 - 1
    np.testing.assert_allclose(idx.score("zzz foo", "jaccard")[4], 1 / 8, rtol=1e-6)


def test_bm25_hand_computed_one_term() -> None:
    idx = TermIndex.build(["a b", "a c c", "d"])
    # N=3, avgdl=2; df(c)=1: idf = ln(3 - 1 + 0.5) - ln(1 + 0.5)
    idf = math.log(2.5) - math.log(1.5)
    tf, dl = 2, 3
    want = idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * dl / 2))
    np.testing.assert_allclose(idx.score("c", "bm25"), [0.0, want, 0.0], rtol=1e-6)


def _corpus(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = [f"name{i}" for i in range(60)] + ["self", "return", "(", ")", "=", ".", ",", ":"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 40))) for _ in range(n)]


def test_bm25_equals_rank_bm25() -> None:
    texts = _corpus(200)
    idx = TermIndex.build(texts)
    ref = BM25Okapi([code_tokens(t) for t in texts])
    for q in (texts[3], texts[17] + " name1 name1 unknownword", "self . name5 ( )"):
        ours = idx.score(q, "bm25")
        theirs = ref.get_scores(code_tokens(q))
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)
        assert list(np.argsort(-ours, kind="stable")[:10]) == list(np.argsort(-theirs, kind="stable")[:10])


def test_set_rows_equals_fresh_build() -> None:
    texts = _corpus(300, seed=1)
    idx = TermIndex.build(texts)
    new = _corpus(40, seed=2)
    ids = list(range(0, 80, 2)) + [305]  # some replaced, one new row past the end (grows, 301..304 empty)
    new_texts: list[str | None] = list(new) + ["brand newterm ( x )"]
    new_texts[5] = None  # cleared row
    with pytest.raises(ValueError, match="differ in length"):
        idx.set_rows(ids, iter(new_texts[:-1]))
    idx.set_rows(ids, iter(new_texts))  # texts made one at a time
    want_texts: list[str | None] = list(texts) + [None] * 6
    for i, t in zip(ids, new_texts):
        want_texts[i] = t
    fresh = TermIndex.build(want_texts)
    assert idx.n_rows == fresh.n_rows == 306
    for q in (texts[1], new[0], "brand newterm", "name3 = name4"):
        for m in ("jaccard", "bm25"):
            np.testing.assert_allclose(idx.score(q, m), fresh.score(q, m), rtol=1e-5, atol=1e-6)
    assert idx.score("brand newterm", "jaccard")[305] > 0
    assert idx.score(new[5] or "", "jaccard")[10] == 0.0  # row 10 was cleared


def test_updates_folded_into_the_rows_equal_a_fresh_build(monkeypatch) -> None:
    """Past a few changed rows the delta is folded into the row matrix: rows replaced, cleared, grown, and set
    again after a fold score as a fresh build of the final texts does."""
    monkeypatch.setattr("repocomp.index.term_index._MAX_DELTA_ROWS", 3)
    rng = random.Random(5)
    texts: list[str | None] = list(_corpus(60, seed=4))
    idx = TermIndex.build(texts)
    for step in range(25):
        ids = rng.sample(range(len(texts) + 3), rng.randrange(1, 6))
        new: list[str | None] = [None if rng.random() < 0.2 else c for c in _corpus(len(ids), seed=100 + step)]
        idx.set_rows(ids, new)
        texts += [None] * (max(ids) + 1 - len(texts))
        for i, t in zip(ids, new):
            texts[i] = t
    fresh = TermIndex.build(texts)
    assert idx.n_rows == fresh.n_rows
    for q in (texts[3] or "x", "name3 = name4", "brand newterm"):
        for m in ("jaccard", "bm25"):
            np.testing.assert_allclose(idx.score(q, m), fresh.score(q, m), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(idx.nonempty(), fresh.nonempty())


def test_jaccard_counted_from_the_common_terms_flags_equals_the_postings_count(monkeypatch) -> None:
    """The terms in an eighth of the rows or more are counted from rows of flags: the same scores, bit for bit, as
    from their postings alone, before and after rows are replaced, cleared and grown past the base."""
    texts: list[str | None] = list(_corpus(400, seed=7))
    with_flags, plain = TermIndex.build(texts), TermIndex.build(texts)
    monkeypatch.setattr(plain, "_base_flags", lambda: term_index._Flags(
        plain._base, np.full(len(plain._base.indptr) - 1, -1, np.int64), np.zeros((0, plain.n_rows), np.uint8)))
    queries = [texts[9] or "", "self . name5 ( ) = name7", "return ( self , name1 : name2 )", "zzz"]
    for q in queries:
        np.testing.assert_array_equal(with_flags.score(q), plain.score(q))
    fresh = TermIndex.build(texts)
    assert fresh._flags is None
    fresh.prepare()  # what a server does once it loaded or saved the index: the first query finds them made
    assert fresh._flags is not None and fresh._flags.postings is fresh._base
    flags = with_flags._base_flags()
    df = np.diff(with_flags._base.indptr)
    common = int((df * term_index._FLAG_SHARE >= with_flags.n_rows).sum())  # "self", "(", "name1", ...
    # the commonest up to the cap flagged; the others counted from their postings, beside them
    assert common > term_index._FLAG_ROWS_MAX == len(flags.flags)
    updates: list[str | None] = [None, "self ( self ) brand", *_corpus(3, seed=8)]
    for idx in (with_flags, plain):
        idx.set_rows([0, 5, 17, 399, 403], updates)
    assert with_flags.n_rows == 404 > flags.flags.shape[1]
    for q in queries + ["brand self"]:
        np.testing.assert_array_equal(with_flags.score(q), plain.score(q))


def test_a_query_never_waits_for_the_flags_another_thread_is_making() -> None:
    """The language server makes them after a save, pausing between terms while requests are answered: a request
    that waited for them waited for those pauses (57 s once). It counts from the postings instead: the same."""
    idx = TermIndex.build(_corpus(400, seed=7))
    query = "self . name5 ( ) = name7"
    with idx._making_flags:  # another thread making them
        meanwhile = idx.score(query)
        assert idx._flags is None
    assert np.array_equal(meanwhile, idx.score(query)) and idx._flags is not None  # made by the query, once free


def test_flags_another_thread_made_while_a_query_looked_are_not_made_again() -> None:
    from repocomp.index.term_index import _Flags

    idx = TermIndex.build(_corpus(400, seed=7))
    made = _Flags.of(idx._base, idx._rows.shape[0])

    class FinishedMeanwhile:  # the other thread made them between this one's look and its lock
        def acquire(self, blocking: bool = True) -> bool:
            idx._flags = made
            return True

        def release(self) -> None:
            pass

    idx._making_flags = FinishedMeanwhile()  # type: ignore[assignment]
    idx.score("self . name5 ( ) = name7")
    assert idx._flags is made


def test_take_equals_a_build_of_the_kept_rows_and_drops_unused_terms() -> None:
    texts: list[str | None] = list(_corpus(200, seed=3))
    idx = TermIndex.build(texts)
    idx.set_rows([7, 8, 9], [None, "only_here_term = 1", None])  # cleared rows, one with a term used nowhere else
    idx.set_rows([8], [None])
    keep = np.array([i for i in range(200) if i not in (7, 8, 9)][::-1])  # renumbered, in another order
    taken = idx.take(keep)
    fresh = TermIndex.build([texts[i] for i in keep.tolist()])
    assert "only_here_term" not in taken.vocab and len(taken.vocab) == len(fresh.vocab)
    for q in (texts[1], texts[150], "name3 = name4"):
        for m in ("jaccard", "bm25"):
            np.testing.assert_allclose(taken.score(q, m), fresh.score(q, m), rtol=1e-5, atol=1e-6)


def test_state_roundtrip_through_pickle() -> None:
    texts = _corpus(50, seed=3) + [None]
    idx = TermIndex.build(texts)
    idx.set_rows([2], ["changed ( text )"])
    back = TermIndex.from_state(pickle.loads(pickle.dumps(idx.state())))
    assert back.n_rows == idx.n_rows and dict(back.vocab.items()) == idx.vocab
    for m in ("jaccard", "bm25"):
        np.testing.assert_allclose(back.score(texts[7] or "", m), idx.score(texts[7] or "", m), rtol=1e-6)
    assert all(isinstance(v, (np.ndarray, int, str)) for v in idx.state().values())


@pytest.mark.parametrize("block_entries", [1, 7, 1 << 22])
def test_the_state_in_pieces_equals_the_state_folded_without_folding_the_index(block_entries: int) -> None:
    """What a save writes piece by piece (the changed rows merged into the rows and postings block by block) is the
    folded state, array for array and dtype for dtype, whatever the blocks: rows changed, cleared, added past the
    end, new terms among them."""
    rng = random.Random(block_entries)
    words = [f"{w}{i}" for w in ("alpha", "beta", "gamma", "delta") for i in range(12)]

    def text() -> str | None:
        return None if rng.random() < 0.15 else " ".join(rng.choice(words) for _ in range(rng.randrange(12)))

    for trial in range(25):
        idx = TermIndex.build([text() for _ in range(rng.randrange(1, 50))])
        for _ in range(rng.randrange(4)):
            ids = sorted({rng.randrange(idx.n_rows + 8) for _ in range(rng.randrange(1, 9))})
            idx.set_rows(ids, [(t or "") + f" fresh{rng.randrange(4)}" if rng.random() < 0.8 else None
                               for t in (text() for _ in ids)])
        changed = dict(idx._changed)
        pieces = idx.state_pieces(block_entries)
        assert idx._changed == changed  # the index is left as it is
        for key, value in idx.state().items():
            got = whole(pieces[key]) if isinstance(value, np.ndarray) else pieces[key]
            if isinstance(value, np.ndarray):
                assert got.dtype == value.dtype and np.array_equal(got, value), (trial, key)
            else:
                assert got == value, (trial, key)


def test_bad_method_raises() -> None:
    with pytest.raises(ValueError):
        TermIndex.build(["a"]).score("a", "tfidf")


def test_query_and_update_are_fast_at_10k_rows() -> None:
    # Not a benchmark (that is `repocomp bench retrieve`): a guard against falling back to Python row loops.
    texts = _corpus(10_000, seed=4)
    idx = TermIndex.build(texts)
    q = "\n".join(texts[:20])
    idx.score(q, "bm25")
    t0 = time.perf_counter()
    for _ in range(10):
        idx.score(q, "jaccard")
        idx.score(q, "bm25")
    per_query = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    idx.set_rows(list(range(100, 150)), texts[200:250])
    update = time.perf_counter() - t0
    assert per_query < 0.02, per_query
    assert update < 0.05, update


TRICKY_TOKENS = ["x", "self", "naïve", "变量", "𝑓", "\ud800lone", "0x1F", "==", "_", "Ωmega"]


def test_a_stored_vocabulary_finds_every_token_by_its_crc_as_the_dict_did() -> None:
    """The compiled fill and probe hash as zlib's CRC-32 does (the stored format), multi-byte and lone-surrogate
    tokens included; tokens added after the load get the ids given, and the arrays made again hold them too."""
    vocab = {tok: i for i, tok in enumerate(TRICKY_TOKENS + [f"name{i}" for i in range(3000)])}
    for tok in TRICKY_TOKENS:
        key = np.frombuffer(tok.encode("utf-8", "surrogatepass"), np.uint8)
        assert vocabulary._crc32(key, 0, len(key), vocabulary._CRC_TABLE) == zlib.crc32(key.tobytes())
    arrays = vocabulary_arrays(vocab)
    assert len(arrays["slots"]) >= 2 * len(vocab) and (arrays["slots"] >= 0).sum() == len(vocab)
    stored = StoredVocabulary(arrays["bytes"], arrays["ends"], arrays["slots"])
    assert len(stored) == len(vocab) and all(stored.get(t) == i for t, i in vocab.items())
    assert dict(stored.items()) == vocab and list(stored) == list(vocab)
    assert stored.get("name3000") is None and "nam" not in stored and "name1" in stored
    assert not stored._known  # lookups (a query's) keep nothing; an edit's `ids` remember what they found
    # a query's distinct tokens at once: the same ids, -1 for a token not held (a prefix, a longer name, nothing)
    assert stored.find_many([*vocab, "name3000", "nam", ""]).tolist() == [*vocab.values(), -1, -1, -1]
    assert stored.find_many([]).tolist() == []
    assert stored.ids(["brand_new", "name7"]) == [len(vocab), vocab["name7"]] and stored["brand_new"] == len(vocab)
    assert stored.find_many(["brand_new", "name7"]).tolist() == [len(vocab), vocab["name7"]]  # added since the load
    again = StoredVocabulary(**{k if k != "bytes" else "blob": v for k, v in stored.arrays().items()})
    assert dict(again.items()) == dict(stored.items()) and again["brand_new"] == len(vocab)
    empty = vocabulary_arrays({})
    assert len(StoredVocabulary(empty["bytes"], empty["ends"], empty["slots"])) == 0


@pytest.mark.parametrize("damage", ["slot_out_of_range", "full_table", "no_table", "ends_past_bytes",
                                    "not_a_separator"])
def test_a_damaged_stored_vocabulary_is_a_value_error(damage: str) -> None:
    a = {k: v.copy() for k, v in vocabulary_arrays({t: i for i, t in enumerate(TRICKY_TOKENS)}).items()}
    if damage == "slot_out_of_range":
        a["slots"][np.flatnonzero(a["slots"] >= 0)[0]] = len(TRICKY_TOKENS)
    elif damage == "full_table":  # no free slot: a lookup of an unknown token would never end
        a["slots"] = np.arange(16, dtype=np.int32) % len(TRICKY_TOKENS)
    elif damage == "no_table":
        a["slots"] = a["slots"][:0]
    elif damage == "ends_past_bytes":
        a["ends"][-1] += 1
    else:
        a["ends"][0] -= 1
    with pytest.raises(ValueError, match="vocabulary"):
        StoredVocabulary(a["bytes"], a["ends"], a["slots"])


def test_a_stored_vocabulary_gives_ids_as_setdefault_does_and_forgets_what_it_found_within_its_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import repocomp.index.vocabulary as vocabulary

    monkeypatch.setattr(vocabulary, "_KNOWN_KEPT", 8)  # found tokens forgotten often
    base = {t: i for i, t in enumerate(TRICKY_TOKENS)}
    stored = StoredVocabulary(*vocabulary_arrays(base).values())
    plain = dict(base)
    rng = random.Random(5)
    for _ in range(30):
        tokens = [rng.choice(TRICKY_TOKENS + [f"new{i}" for i in range(12)]) for _ in range(rng.randint(0, 20))]
        assert stored.ids(tokens) == [plain.setdefault(t, len(plain)) for t in tokens]
        assert len(stored._known) <= max(8, len(set(tokens)))
    assert len(stored) == len(plain) and dict(stored.items()) == plain
