"""Block-skipping attention against transformers' eager attention, in a real (tiny, random) Gemma 3 model whose
sliding window and causal mask are transformers' own: same logits, same greedy tokens through the KV cache."""

from __future__ import annotations

import pytest
import torch  # installed by .ci/setup (the transformers backend's extra)
import transformers

from repocomp.backends import hf_attention


def tiny_gemma3(attn_implementation: str) -> transformers.PreTrainedModel:
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, sliding_window=40,
        layer_types=["sliding_attention"] * 3 + ["full_attention"], max_position_embeddings=1024,
        attn_implementation=attn_implementation)
    return transformers.Gemma3ForCausalLM(config).eval()


@pytest.mark.parametrize("n", [1, 7, hf_attention.BLOCK, 3 * hf_attention.BLOCK + 17])
def test_same_logits_as_eager(n: int) -> None:
    ids = torch.randint(0, 97, (1, n), generator=torch.Generator().manual_seed(n))
    with torch.inference_mode():
        eager = tiny_gemma3("eager")(ids).logits
        blocked = tiny_gemma3(hf_attention.register())(ids).logits
    assert torch.allclose(eager, blocked, atol=1e-5), (eager - blocked).abs().max()


def test_same_greedy_tokens_through_the_cache_past_the_window() -> None:
    ids = torch.randint(0, 97, (1, 150), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        eager = tiny_gemma3("eager").generate(ids, max_new_tokens=60, do_sample=False)
        blocked = tiny_gemma3(hf_attention.register()).generate(ids, max_new_tokens=60, do_sample=False)
    assert eager.shape == (1, 210) and torch.equal(eager, blocked)


def test_a_block_skips_the_keys_its_mask_hides() -> None:
    # Queries 128..255 of a sliding window of 40 see keys 89..255: the products outside are never computed, so
    # NaN there cannot reach the output (eager attention would multiply them in).
    n, window = 2 * hf_attention.BLOCK, 40
    q, k, v = (torch.randn(1, 2, n, 8, generator=torch.Generator().manual_seed(s)) for s in range(3))
    pos = torch.arange(n)
    seen = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    mask = torch.zeros(1, 1, n, n).masked_fill(~seen, torch.finfo(torch.float32).min)
    reference = torch.softmax(q @ k.transpose(2, 3) / 8 ** 0.5 + mask, dim=-1) @ v
    k_poisoned = k.clone()
    k_poisoned[:, :, : hf_attention.BLOCK - window] = float("nan")
    module = torch.nn.Module()
    module.head_dim, module.training = 8, False
    out, _ = hf_attention.blocked_attention(module, q, k_poisoned, v, mask)
    assert torch.allclose(out.transpose(1, 2)[:, :, hf_attention.BLOCK:], reference[:, :, hf_attention.BLOCK:],
                          atol=1e-5)
    assert out[:, : hf_attention.BLOCK].isnan().any()  # the first block does see the poisoned keys


def test_blocked_attention_only_for_models_with_sliding_window_layers(tiny_model_dir) -> None:
    """The backend registers the blocked attention where a sliding window hides keys (Gemma 3); a causal-only model
    (Llama, Qwen2.5-Coder) keeps torch's SDPA, which measured as fast or faster there."""
    from repocomp.backends.hf import TransformersBackend, has_sliding_window

    assert has_sliding_window(tiny_gemma3("eager").config)
    assert not has_sliding_window(transformers.LlamaConfig())
    assert not has_sliding_window(transformers.Qwen2Config(use_sliding_window=False, sliding_window=4096))
    assert has_sliding_window(transformers.Qwen2Config(use_sliding_window=True, sliding_window=4096))
    model, _ = TransformersBackend(model=str(tiny_model_dir), device="cpu", dtype="float32")._load()
    assert model.config._attn_implementation == "sdpa"
