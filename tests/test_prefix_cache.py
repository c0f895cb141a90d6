"""Prefix reuse in the in-process backend (repocomp/backends/prefix_cache.py): a cache cut to a common prefix and
then prefilled gives the logits and the greedy tokens of a fresh prefill, past and inside Gemma 3's sliding window
(in bf16 bit for bit, through aligned chunks); answers do not change; keys never cross; memory stays bounded;
hits are counted.

Most tests use a tiny random Gemma 3 with sliding-window layers (window 32) built on the spot with the tiny test
model's tokenizer (tests/tiny_model.py builds a Llama: no sliding window); the `local_model` ones the real model.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest
import torch  # installed by .ci/setup (the transformers backend's extra)
import transformers

from repocomp.backends import GenerationRequest, hf_attention
from repocomp.backends import local_model as lm
from repocomp.backends import prefix_cache as pc
from repocomp.backends.greedy import generate_greedy
from repocomp.backends.hf import TransformersBackend

REPO_ROOT = Path(__file__).resolve().parent.parent
WINDOW = 32
# code that no one edits (the prompts' token counts decide which entries typing replaces)
SOURCE = "".join(f"def handler_{i}(request, limit={i}):\n    value = compute_{i % 7}(request.body, limit)\n"
                 f"    if value > {i * 3}:\n        return respond(value, status={200 + i % 5})\n    return None\n\n\n"
                 for i in range(60))


def tiny_gemma3(vocab: int, window: int = WINDOW) -> transformers.Gemma3ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=window,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], max_position_embeddings=4096,
        bos_token_id=0, eos_token_id=1, pad_token_id=1, attn_implementation=hf_attention.register())
    model = transformers.Gemma3ForCausalLM(config).eval()
    with torch.no_grad():  # tied embeddings: logit 0 for the special tokens, below the best random one
        model.model.embed_tokens.weight[:7].zero_()
    return model


@pytest.fixture(scope="module")
def tiny_gemma_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-gemma3")
    tok = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    tiny_gemma3(len(tok)).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def backend(tiny_gemma_dir: Path) -> TransformersBackend:
    b = TransformersBackend(model=str(tiny_gemma_dir), dtype="float32")
    b._load_once()
    return b


def req(prompt: str, key: str | None, n: int = 24) -> GenerationRequest:
    return GenerationRequest(prompt=prompt, prefix=prompt, suffix="", candidates=(), max_new_tokens=n,
                             cache_key=key)


def text(backend: TransformersBackend, prompt: str, key: str | None, n: int = 24) -> str:
    return backend._generate(req(prompt, key, n), threading.Event())[0]


def fresh_and_reused(model, ids: torch.Tensor, cuts: list[int], keep: int | None = None) -> None:
    """Logits (and, with `keep`, the last hidden states of every position after the cut) of a cache cut at each
    of `cuts` then prefilled, against one fresh prefill of `ids`."""
    kwargs = {"logits_to_keep": keep} if keep else {}
    full = pc.empty_cache()
    fresh = model(ids, cache=full, use_cache=True, output_hidden_states=True, **kwargs)
    for cut in cuts:
        cache = pc.cut(full, cut)
        assert cache.get_seq_length() == cut
        out = model(ids[:, cut:], cache=cache, use_cache=True, output_hidden_states=True, **kwargs)
        want = fresh.logits[:, -out.logits.shape[1]:]
        assert torch.allclose(out.logits, want, rtol=1e-4, atol=1e-4), (cut, (out.logits - want).abs().max())
        assert torch.equal(out.logits.argmax(-1), want.argmax(-1)), cut
        hidden, hidden_want = out.hidden_states[-1], fresh.hidden_states[-1][:, cut:]
        assert torch.allclose(hidden, hidden_want, rtol=1e-4, atol=1e-4), (cut, (hidden - hidden_want).abs().max())
    # cutting made views: the full cache is still whole
    assert full.get_seq_length() == ids.shape[1] and all(layer.keys.shape[2] == ids.shape[1] for layer in full.layers)


class Counting:
    """The model, counting its forward passes (fewer than tokens generated: prompt lookup drafts were accepted)."""

    def __init__(self, model) -> None:
        self.model, self.calls = model, 0
        self.forward, self.generation_config, self.config = model.forward, model.generation_config, model.config

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


# ---- exactness on the tiny sliding-window model --------------------------------------------------------------

def test_a_cut_cache_then_prefilled_gives_the_logits_of_a_fresh_prefill_inside_and_past_the_window() -> None:
    ids = torch.randint(7, 500, (1, 300), generator=torch.Generator().manual_seed(3))
    model = tiny_gemma3(500)
    with torch.inference_mode():
        fresh_and_reused(model, ids, [1, 5, WINDOW - 1, WINDOW, WINDOW + 1, 100, hf_attention.BLOCK,
                                      hf_attention.BLOCK + 3, 250, 299])
    # and transformers' own cache (sliding layers drop what the window left) gives the same logits as ours
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, model(ids, cache=pc.empty_cache(), use_cache=True).logits,
                              atol=1e-6)


@pytest.mark.parametrize("cut", [0, 1, WINDOW - 1, WINDOW + 1, 150, 239])
def test_greedy_from_a_reused_prefix_is_generate_with_prompt_lookup(cut: int) -> None:
    g = torch.Generator().manual_seed(4)
    base = torch.randint(7, 500, (1, 80), generator=g)
    ids = torch.cat([base, base[:, :40], torch.randint(7, 500, (1, 100), generator=g), base[:, 20:40]], 1)
    model = tiny_gemma3(500)
    with torch.inference_mode():
        want = model.generate(ids, max_new_tokens=60, do_sample=False, prompt_lookup_num_tokens=10)
        assert torch.equal(want, model.generate(ids, max_new_tokens=60, do_sample=False))
        full = pc.empty_cache()
        model(ids[:, :cut], cache=full, use_cache=True) if cut else None
        counting = Counting(model)
        got = generate_greedy(counting, ids, pc.cut(full, cut) if cut else pc.empty_cache(), cut, 60,
                              lambda seq, _: False)
    assert torch.equal(got, want)
    assert counting.calls < 60  # drafts were accepted: prompt lookup decoding is on


def test_a_stop_ends_the_loop_with_the_cache_holding_all_but_the_last_token() -> None:
    ids = torch.randint(7, 500, (1, 70), generator=torch.Generator().manual_seed(5))
    model = tiny_gemma3(500)
    with torch.inference_mode():
        cache = pc.empty_cache()
        seq = generate_greedy(model, ids, cache, 0, 100, lambda s, _: s.shape[1] >= 80)
        assert 80 <= seq.shape[1] < 170 and cache.get_seq_length() == seq.shape[1] - 1
        again = generate_greedy(model, ids, pc.empty_cache(), 0, seq.shape[1] - 70, lambda s, _: False)
    assert torch.equal(seq, again)
    with pytest.raises(ValueError):
        generate_greedy(model, ids, cache, 70, 4, lambda s, _: False)  # nothing left to prefill


def test_in_bf16_an_aligned_reuse_gives_a_fresh_prefills_logits_bit_for_bit() -> None:
    chunk = 64
    g = torch.Generator().manual_seed(6)
    first = torch.randint(7, 500, (1, 5 * chunk + 20), generator=g)
    model = tiny_gemma3(500).to(torch.bfloat16)
    with torch.inference_mode():
        full = pc.empty_cache()
        pc.next_logits(model, first, full, 0, chunk)
        for common in (chunk, 2 * chunk + 1, 4 * chunk - 1, 5 * chunk + 5):  # then the prompts part
            second = torch.cat([first[:, :common], torch.randint(7, 500, (1, 50), generator=g)], 1)
            fresh = pc.next_logits(model, second, pc.empty_cache(), 0, chunk)
            cut = pc.reusable(common, first.shape[1], chunk)
            assert torch.equal(pc.next_logits(model, second, pc.cut(full, cut), cut, chunk), fresh), common


# ---- the backend: answers, keys, bounds, counts ------------------------------------------------------------

PROMPTS = [SOURCE[:n] for n in (900, 1500, 2100)] + [SOURCE[3000:4200]]


def typing(prompt: str) -> list[str]:
    """A few keystrokes at the end of `prompt`, a deletion, and a small edit a little before the end."""
    cut = len(prompt) - 12
    return [prompt, prompt + "x", prompt + "xy", prompt + "x", prompt + "x = f(", prompt[:cut] + "#" + prompt[cut:]]


@pytest.fixture(scope="module")
def bf16_backend(tiny_gemma_dir: Path) -> TransformersBackend:
    b = TransformersBackend(model=str(tiny_gemma_dir), dtype="bfloat16")
    b._load_once()
    assert b._loaded.prefix_cache.chunk == pc.CHUNK
    b._loaded.prefix_cache = pc.PrefixCache(chunk=64)  # the tiny tokenizer's prompts are a few chunks of 64 long
    return b


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_answers_after_a_reused_prefix_are_the_answers_without_reuse(dtype: str, request) -> None:
    backend = request.getfixturevalue("backend" if dtype == "float32" else "bf16_backend")
    before = backend.cache_stats()
    for i, prompt in enumerate(PROMPTS):
        for p in typing(prompt):
            assert text(backend, p, f"folder/doc{i}") == text(backend, p, None), p[-40:]
    stats = backend.cache_stats()
    requests = 2 * len(PROMPTS) * len(typing(""))
    assert stats["requests"] - before["requests"] == requests
    # every keyed request but the first of each document reused its previous prompt's
    assert stats["hits"] - before["hits"] == len(PROMPTS) * (len(typing("")) - 1)
    assert stats["reused_tokens"] > stats["prefilled_tokens"] / 3 > 0
    assert stats["entries"] <= len(PROMPTS)  # typing replaced each document's entry (it was not kept beside it)


def test_a_cache_never_crosses_documents_or_folders(backend: TransformersBackend) -> None:
    prompt = PROMPTS[1]
    text(backend, prompt, "/ws/a\0file:///ws/a/x.py")
    before = backend.cache_stats()
    for key in ("/ws/a\0file:///ws/a/y.py", "/ws/b\0file:///ws/a/x.py", None):  # another document, folder, none
        text(backend, prompt + "z", key)
        assert backend.cache_stats()["hits"] == before["hits"], key
    text(backend, prompt + "z", "/ws/a\0file:///ws/a/x.py")
    after = backend.cache_stats()
    assert after["hits"] == before["hits"] + 1 and after["reused_tokens"] > before["reused_tokens"]


def test_a_request_without_a_key_leaves_nothing_behind(backend: TransformersBackend) -> None:
    backend._loaded.prefix_cache.clear()
    text(backend, PROMPTS[0], None)
    stats = backend.cache_stats()
    assert stats["entries"] == 0 and stats["tokens"] == 0


def test_the_cache_stays_within_its_bounds_over_many_prompts(backend: TransformersBackend) -> None:
    loaded = backend._loaded
    shared = loaded.prefix_cache
    loaded.prefix_cache = small = pc.PrefixCache(max_entries=3, max_tokens=500)
    try:
        for i in range(30):  # different documents, different prompts, some longer than the token cap
            start = (i * 397) % 6000
            prompt = SOURCE[start:start + 300 + (i % 5) * 400]
            text(backend, prompt, f"doc{i % 7}", n=8)
            assert len(small) <= 3 and small.tokens <= 500, (i, len(small), small.tokens)
        assert len(small) > 0 and backend.cache_stats()["requests"] == 30
    finally:
        loaded.prefix_cache = shared


def test_sampling_reuses_the_prefix_too(backend: TransformersBackend) -> None:
    prompt = PROMPTS[2]
    sample = dataclasses.replace(req(prompt, "sampled", n=6), temperature=0.8)
    backend._generate(sample, threading.Event())
    hits = backend.cache_stats()["hits"]
    _, n, _ = backend._generate(dataclasses.replace(sample, prompt=prompt + "q"), threading.Event())
    assert n > 0 and backend.cache_stats()["hits"] == hits + 1


# ---- the local model (the default; Gemma 3 270M's sliding window was 512) ---------------------------------------

@pytest.fixture(scope="module")
def local_backend(local_model: lm.LocalModel) -> TransformersBackend:
    # float32, as an AVX2-only CPU runs it (auto): bf16 without native kernels is ten times slower
    b = TransformersBackend(model=str(local_model.path), dtype="float32")
    b._load_once()
    return b


def local_prompt(backend: TransformersBackend, tokens: int) -> str:
    """Source code of this project, about `tokens` tokens long."""
    text = "".join(p.read_text() for p in sorted((REPO_ROOT / "repocomp" / "backends").glob("*.py")))
    ids = backend.encode(text)["input_ids"][0][1:tokens]
    return backend._loaded.tokenizer.decode(ids)


@pytest.mark.local_model
@pytest.mark.slow
def test_local_model_an_aligned_reuse_gives_a_fresh_prefills_logits_bit_for_bit(
        local_backend: TransformersBackend) -> None:
    model = local_backend._loaded.model
    window = getattr(model.config, "sliding_window", None) or 512  # a model without one: past a long prefix
    ids = local_backend.encode(local_prompt(local_backend, 1100))["input_ids"]
    assert ids.shape[1] > 2 * window
    with torch.inference_mode():
        full = pc.empty_cache()
        pc.next_logits(model, ids, full, 0, pc.CHUNK)
        for common in (pc.CHUNK + 7, window + 1, ids.shape[1] - 3):  # the second prompt parts inside, past the window
            second = torch.cat([ids[:, :common], ids[:, 100:140]], 1)
            fresh = pc.next_logits(model, second, pc.empty_cache(), 0, pc.CHUNK)
            cut = pc.reusable(common, ids.shape[1], pc.CHUNK)
            assert cut >= pc.CHUNK
            assert torch.equal(pc.next_logits(model, second, pc.cut(full, cut), cut, pc.CHUNK), fresh), common


@pytest.mark.local_model
@pytest.mark.slow
def test_local_model_answers_the_same_with_reuse(local_backend: TransformersBackend) -> None:
    prompt = local_prompt(local_backend, 1000)
    n = local_backend.encode(prompt)["input_ids"].shape[1]
    before = local_backend.cache_stats()
    for p in typing(prompt)[:3]:
        assert text(local_backend, p, "folder\0doc", n=12) == text(local_backend, p, None, n=12)
    with torch.inference_mode():  # and the same tokens as transformers' generate with prompt lookup
        ids = local_backend.encode(prompt + "x")["input_ids"]
        want = local_backend._loaded.model.generate(ids, max_new_tokens=12, do_sample=False,
                                                    prompt_lookup_num_tokens=10)
    got = local_backend._loaded.tokenizer.decode(want[0, ids.shape[1]:], skip_special_tokens=True)
    assert text(local_backend, prompt + "x", "folder\0doc", n=12) == got
    stats = local_backend.cache_stats()
    # each hit reused the aligned chunks of the previous prompt: all but its last, partial one
    assert stats["hits"] - before["hits"] == 3
    assert stats["reused_tokens"] - before["reused_tokens"] == 3 * pc.aligned_end(n, pc.CHUNK) > 2 * n


def test_bench_prefill_reports_exact_aligned_reuse_and_the_cuts_each_rule_allows() -> None:
    from repocomp.bench.prefill import CHUNKS, _prompts, format_table, prefill_bench

    model = tiny_gemma3(500).to(torch.bfloat16)
    first, second = _prompts(None, 500, 600)
    res = prefill_bench(model, first, second, reps=1)
    assert res["tokens"] == 600 and res["shared"] >= 550 and res["dtype"] == "bfloat16"
    assert [c["chunk"] for c in res["chunks"]] == list(CHUNKS) and all(c["bitwise_equal"] for c in res["chunks"])
    # the typed request reuses all it shares unsplit, and down to a chunk boundary the aligned prefill reached
    assert res["typed_ms"]["unsplit"]["reused"] == res["shared"]
    assert {k: v["reused"] for k, v in res["typed_ms"].items() if k != "unsplit"} == {"128": 512, "256": 512,
                                                                                       "512": 512}
    assert set(res["cold_ms"]) == {"unsplit", "128", "256", "512"} and res["decode_step_ms"] >= 0
    table = format_table(res)
    assert "chunks of 256: reuse of 512 bit for bit the fresh prefill: yes" in table
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not model.lm_head]
    flop = sum(2 * 600 * m.in_features * m.out_features for m in linears)
    floor = res["floor"]
    assert floor["gflop"] == round(flop / 1e9, 1) and floor["gflops"] > 0
    assert floor["ms"] == pytest.approx(flop / 1e6 / floor["gflops"], rel=0.05, abs=1)  # rates print rounded
    assert "the floor under a cold prefill" in table


def test_an_empty_held_prompt_gives_nothing_to_reuse() -> None:
    """llama.cpp's context holds nothing before its first request: no prefix, never a negative one."""
    assert pc.reusable(0, 0, 32) == 0 and pc.reusable(5, 0, 32) == 0
    assert pc.reusable(100, 200, 32) == 96 and pc.reusable(300, 200, 32) == 192


def test_a_prefill_fills_the_cache_a_request_then_reuses_and_answers_as_a_fresh_prompt(
        bf16_backend: TransformersBackend) -> None:
    """The language server's prefetch (`aprefill`): the prompt's aligned chunks computed under the request's key, in
    pieces not counted as requests; the request that follows (the prompt, or the prompt typed on) reuses them and
    answers as without a key; no prefill without a key, and none while a generation waits for the model."""
    backend, key, prompt = bf16_backend, "/ws\0file:///ws/prefilled.py", PROMPTS[2] * 3
    chunk = backend._loaded.prefix_cache.chunk
    n = backend.encode(prompt)["input_ids"].shape[1]
    assert n > 4 * chunk  # several pieces of two chunks
    before = backend.cache_stats()
    assert backend._prefill(req(prompt, key), threading.Event())
    after = backend.cache_stats()
    assert after["requests"] == before["requests"] and after["entries"] >= 1
    for typed in (prompt, prompt + "x = f("):
        reused = backend.cache_stats()["reused_tokens"]
        assert text(backend, typed, key) == text(backend, typed, None)
        assert backend.cache_stats()["reused_tokens"] - reused >= (n - 1) // chunk * chunk - chunk
    assert not backend._prefill(req(prompt + "#", None), threading.Event())
    backend._loaded.turns.waiting += 1  # as a generation that waits for the model
    try:
        entries = backend.cache_stats()["entries"]
        assert not backend._prefill(req(PROMPTS[0] * 3, key + "2"), threading.Event())
        assert backend.cache_stats()["entries"] == entries
    finally:
        backend._loaded.turns.waiting -= 1
