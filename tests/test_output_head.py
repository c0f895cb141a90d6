"""The fast output head (repocomp/backends/output_head.py): greedy decoding through it gives exactly the tokens of
the model's own lm_head, with a tiny random Gemma 3 and with the local model, in bf16 and float32; forced fallbacks
keep them too and are counted; the kernel assumptions its bound rests on hold for real hidden states (every entry of
the full lm_head inside the certified interval, the fp16 pass inside its error bound)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch  # installed by .ci/setup (the transformers backend's extra)
import transformers

from repocomp.backends import hf_attention
from repocomp.backends import local_model as lm
from repocomp.backends import prefix_cache as pc
from repocomp.backends.greedy import generate_greedy
from repocomp.backends.hf import TransformersBackend
from repocomp.backends.output_head import OutputHead, _bf16_round

REPO_ROOT = Path(__file__).resolve().parent.parent


def tiny_bf16_gemma3(vocab: int = 4096, dtype: torch.dtype = torch.bfloat16) -> transformers.Gemma3ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, sliding_window=32,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], max_position_embeddings=4096,
        bos_token_id=0, eos_token_id=1, pad_token_id=1, attn_implementation=hf_attention.register())
    model = transformers.Gemma3ForCausalLM(config).eval().to(dtype)
    with torch.no_grad():  # no weights that float16 holds only as subnormals (the head refuses such a matrix)
        w = model.model.embed_tokens.weight
        w[w.abs() < 2.0 ** -14] = 0
        w[:7].zero_()  # the special tokens (EOS) below the best random logit
    return model


def greedy(model: transformers.PreTrainedModel, ids: torch.Tensor, n: int, head: OutputHead | None) -> list[int]:
    with torch.inference_mode():
        out = generate_greedy(model, ids, pc.empty_cache(), 0, n, lambda seq, _: False, 10, head=head)
    return out[0, ids.shape[1]:].tolist()


def random_prompts(vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    out = []
    for n in (20, 45, 90):
        ids = torch.randint(7, vocab, (n,), generator=g)
        out.append(torch.cat([ids, ids[: n // 3]])[None])  # a repeat: prompt lookup drafts some steps
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tiny_model_greedy_tokens_are_the_same(dtype: torch.dtype) -> None:
    model = tiny_bf16_gemma3(dtype=dtype)
    head = OutputHead.for_model(model)
    assert head is not None
    for ids in random_prompts(model.config.vocab_size):
        assert greedy(model, ids, 40, head) == greedy(model, ids, 40, None)
    stats = head.stats()
    assert stats["accepted"] > 0 and stats["accepted"] + stats["fallbacks"] >= 10


def test_forced_fallbacks_give_the_same_tokens_and_are_counted() -> None:
    model = tiny_bf16_gemma3()
    head = OutputHead.for_model(model)
    assert head is not None
    head.slack = 1e9  # no token can be certified
    ids = random_prompts(model.config.vocab_size)[1]
    assert greedy(model, ids, 32, head) == greedy(model, ids, 32, None)
    stats = head.stats()
    assert stats["accepted"] == 0 and stats["fallbacks"] > 0 and stats["fallback_rate"] == 1.0


def test_exact_ties_go_to_the_lowest_token_or_to_the_fallback() -> None:
    torch.manual_seed(2)
    w = (torch.randn(1000, 64) * 0.05).to(torch.bfloat16)
    w[w.abs() < 2.0 ** -14] = 0
    h = torch.randn(64).to(torch.bfloat16)
    w[[700, 300]] = (h.float() / h.float().norm() * 2).to(torch.bfloat16)  # two equal best rows
    want = int(torch.nn.functional.linear(h[None], w).float().argmax(-1))
    assert want == 300
    assert OutputHead(w, k=16).argmax(h) == 300
    one = OutputHead(w, k=1)  # the other tied token is outside the candidates: no certificate
    assert one.argmax(h) is None and one.stats()["fallbacks"] == 1
    w[700] = (h.float() / h.float().norm() * 2.02).to(torch.bfloat16)  # now 700 wins by a bf16 step or more
    assert int(torch.nn.functional.linear(h[None], w).float().argmax(-1)) == 700
    assert OutputHead(w, k=1).argmax(h) == 700


def test_a_matrix_float16_cannot_hold_is_refused() -> None:
    w = torch.full((10, 4), 2.0 ** -20, dtype=torch.bfloat16)
    with pytest.raises(ValueError):
        OutputHead(w)
    with pytest.raises(ValueError):  # float32 beyond float16's range
        OutputHead(torch.full((10, 4), 1e5))
    assert OutputHead(torch.full((10, 4), 2.0 ** -20), k=4)._conversion_max > 0  # flushed: the bound widens
    assert OutputHead.for_model(torch.nn.Linear(4, 4)) is None


def check_kernel_bounds(head: OutputHead, hidden: torch.Tensor) -> None:
    """Every entry of the full lm_head inside [z - gS, z + gS] (in bf16 rounded outwards), and the fp16 pass within
    its bound."""
    w = head.weight
    outwards = _bf16_round if w.dtype == torch.bfloat16 else (lambda x, down: x - 2.0 ** -24 if down else x + 2.0 ** -24)
    for h in hidden:
        full = torch.nn.functional.linear(h[None], w)[0].double()
        h16 = h.to(torch.float16)
        h16 = torch.where(h16.abs() < 2.0 ** -14, torch.zeros_like(h16), h16)
        approx = torch.nn.functional.linear(h16[None], head.weight16)[0].double()
        for lo in range(0, w.shape[0], 32768):
            rows = w[lo:lo + 32768].double()
            z = rows @ h.double()
            s = rows.abs() @ h.double().abs()
            g = head._gamma
            assert bool((full[lo:lo + 32768] >= outwards(z - g * s, down=True)).all())
            assert bool((full[lo:lo + 32768] <= outwards(z + g * s, down=False)).all())
            rows16 = head.weight16[lo:lo + 32768].double()
            z16 = rows16 @ h16.double()
            s16 = rows16.abs() @ h16.double().abs()
            err = (approx[lo:lo + 32768] - z16).abs()
            assert bool((err <= 2.0 ** -11 * approx[lo:lo + 32768].abs() + 2.0 ** -24 + g * s16).all())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tiny_model_kernel_bounds(dtype: torch.dtype) -> None:
    model = tiny_bf16_gemma3(dtype=dtype)
    head = OutputHead.for_model(model)
    assert head is not None
    with torch.inference_mode():
        hidden = model.model(input_ids=random_prompts(model.config.vocab_size)[2]).last_hidden_state[0, -8:]
        check_kernel_bounds(head, hidden)


# code prompts cut inside functions of this project
def code_prompts() -> list[str]:
    out = []
    for name, cut in (("repocomp/backends/prefix_cache.py", 5200), ("repocomp/config/schema.py", 4100),
                      ("repocomp/backends/hf.py", 6100)):
        text = (REPO_ROOT / name).read_text()
        out.append(text[max(0, cut - 1500):cut])
    return out


def assert_code_prompts_decode_alike(backend: TransformersBackend, head: OutputHead) -> None:
    """40 greedy tokens after each code prompt through `head` are those of the model's own lm_head."""
    assert backend._loaded is not None
    for prompt in code_prompts():
        ids = backend.encode(prompt)["input_ids"]
        assert greedy(backend._loaded.model, ids, 40, head) == greedy(backend._loaded.model, ids, 40, None), \
            prompt[-200:]


def last_hidden(backend: TransformersBackend, positions: int = 3) -> torch.Tensor:
    """The base model's last hidden states for the last `positions` of the third code prompt."""
    assert backend._loaded is not None
    ids = backend.encode(code_prompts()[2])["input_ids"]
    with torch.inference_mode():
        return backend._loaded.model.model(input_ids=ids).last_hidden_state[0, -positions:]


@pytest.fixture(scope="module")
def local_bf16(local_model: lm.LocalModel) -> TransformersBackend:
    return with_head(TransformersBackend(model=str(local_model.path), dtype="bfloat16"))


def with_head(backend: TransformersBackend) -> TransformersBackend:
    """The backend loaded, with a head whatever this CPU's timing at load decided (`float16_reads_faster`)."""
    backend._load_once()
    loaded = backend._loaded
    assert loaded is not None
    if loaded.output_head is None:
        loaded.output_head = OutputHead.for_model(loaded.model)
    return backend


@pytest.mark.local_model
def test_local_model_greedy_tokens_are_the_same(local_bf16: TransformersBackend) -> None:
    loaded = local_bf16._loaded
    assert loaded is not None and loaded.output_head is not None
    head = loaded.output_head
    before = head.stats()
    assert_code_prompts_decode_alike(local_bf16, head)
    after = head.stats()
    assert after["accepted"] - before["accepted"] > 0
    assert local_bf16.output_head_stats() == after


@pytest.mark.local_model
def test_local_model_forced_fallbacks_give_the_same_tokens(local_model: lm.LocalModel,
                                                           local_bf16: TransformersBackend) -> None:
    loaded = local_bf16._loaded
    assert loaded is not None
    head = OutputHead.for_model(loaded.model, k=1)
    assert head is not None
    head.slack = 1e9
    ids = local_bf16.encode(code_prompts()[0])["input_ids"]
    assert greedy(loaded.model, ids, 32, head) == greedy(loaded.model, ids, 32, None)
    assert head.stats()["accepted"] == 0 and head.stats()["fallbacks"] > 0


@pytest.mark.local_model
def test_local_model_kernel_bounds(local_bf16: TransformersBackend) -> None:
    loaded = local_bf16._loaded
    assert loaded is not None and loaded.output_head is not None
    check_kernel_bounds(loaded.output_head, last_hidden(local_bf16))


@pytest.fixture(scope="module")
def local_f32(local_model: lm.LocalModel) -> TransformersBackend:
    return with_head(TransformersBackend(model=str(local_model.path), dtype="float32"))


@pytest.mark.local_model
def test_local_model_in_float32_greedy_tokens_and_kernel_bounds(local_f32: TransformersBackend) -> None:
    """float32, as an AVX2 CPU runs the local model: the head certifies against the float32 product."""
    loaded = local_f32._loaded
    assert loaded is not None and loaded.output_head is not None
    head = loaded.output_head
    before = head.stats()["accepted"]
    assert_code_prompts_decode_alike(local_f32, head)
    assert head.stats()["accepted"] - before > 3 * 10  # every pass verifies a draft: most positions are certified
    check_kernel_bounds(head, last_hidden(local_f32))


@pytest.mark.parametrize("faster", [True, False])
def test_the_backend_builds_the_head_where_float16_reads_faster(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                                faster: bool) -> None:
    """The head pays only where this CPU's float16 product beats the model's own (timed at load): otherwise the
    backend runs its lm_head alone, with the same tokens."""
    import weakref

    from repocomp.backends import hf, output_head

    timed: list[torch.dtype] = []

    def decide(weight: torch.Tensor) -> bool:
        timed.append(weight.dtype)
        return faster

    monkeypatch.setattr(output_head, "float16_reads_faster", decide)
    monkeypatch.setattr(hf, "_LOADED", weakref.WeakValueDictionary())
    backend = TransformersBackend(model=str(tiny_model_dir), dtype="float32")
    backend._load_once()
    assert backend._loaded is not None and timed == [torch.float32]
    assert (backend._loaded.output_head is not None) is faster
