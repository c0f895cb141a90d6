"""Build a tiny random-weight Llama, locally and deterministically, for backend tests.

No model can be downloaded on the machines the tests run on, so the tests make their own: a byte-level BPE
tokenizer trained with `tokenizers` on this project's own code, and a 2-layer Llama (hidden 128, head dim 64:
vLLM's CPU attention kernel refuses head dim 16) with seeded random weights, saved with `save_pretrained`.

The weights are random, so the text is noise; tests assert on structure (token counts, stops, aborts).
One thing is arranged on purpose: the output rows of the special tokens (EOS, BOS, FIM markers) are zero, so
their logit is 0 while the best of ~2k random logits is always positive: greedy decoding never stops early and
`max_new_tokens` is always reached exactly.

Usage: `build_tiny_model(Path("some/cache/dir"))` returns the model dir (rebuilt only when the corpus or this
recipe changed). Also runnable: `python tests/tiny_model.py OUT_DIR`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

RECIPE_VERSION = 2  # bump when the recipe below changes, so cached models are rebuilt
VOCAB_SIZE = 2048
SEED = 1234
MAX_LEN = 16384  # long enough that a cancelled request is surely still generating when the abort lands
SPECIAL_TOKENS = ("<s>", "</s>", "<unk>", "<PRE>", "<SUF>", "<MID>", "<EOT>")
CORPUS_DIRS = ("repocomp", "graph", "lsp_server", "fixtures")  # not tests/: editing a test must not rebuild it
MARKER = "repocomp_tiny_model.json"

REPO_ROOT = Path(__file__).resolve().parent.parent


def corpus_files(root: Path = REPO_ROOT) -> list[Path]:
    """The project's own source and fixture code, in a stable order."""
    files: list[Path] = []
    for name in CORPUS_DIRS:
        base = root / name
        if base.is_dir():
            files.extend(p for p in base.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    return files


def _corpus(root: Path) -> list[str]:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in corpus_files(root)]
    # A fixed seed text keeps the vocabulary non-trivial even in a nearly empty checkout.
    texts.append(_SEED_TEXT)
    return texts


def _fingerprint(texts: list[str]) -> str:
    h = hashlib.sha256(f"recipe={RECIPE_VERSION} vocab={VOCAB_SIZE} seed={SEED}".encode())
    for t in texts:
        h.update(hashlib.sha256(t.encode()).digest())
    return h.hexdigest()


def is_built(out_dir: Path, fingerprint: str | None = None) -> bool:
    marker = Path(out_dir) / MARKER
    if not marker.is_file() or not (Path(out_dir) / "tokenizer.json").is_file():
        return False
    if fingerprint is None:
        return True
    try:
        return json.loads(marker.read_text())["fingerprint"] == fingerprint
    except (ValueError, KeyError):
        return False


def build_tiny_model(out_dir: Path, root: Path = REPO_ROOT) -> Path:
    """Build (or reuse) the tiny model in `out_dir`; returns `out_dir`."""
    out_dir = Path(out_dir)
    texts = _corpus(root)
    fp = _fingerprint(texts)
    if is_built(out_dir, fp):
        return out_dir

    # Heavy imports here: importing this module must stay cheap.
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="</s>",
        model_max_length=MAX_LEN,
        clean_up_tokenization_spaces=False,
    )
    hf_tok.add_bos_token = False  # harmless attribute for fast tokenizers; the template below adds none

    vocab = len(hf_tok)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_LEN,
        rms_norm_eps=1e-5,
        bos_token_id=hf_tok.convert_tokens_to_ids("<s>"),
        eos_token_id=hf_tok.convert_tokens_to_ids("</s>"),
        pad_token_id=hf_tok.convert_tokens_to_ids("</s>"),
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name in SPECIAL_TOKENS:
            model.lm_head.weight[hf_tok.convert_tokens_to_ids(name)].zero_()
    model.eval()

    # Built beside the target and swapped in, so a server still reading the old copy never sees half a model.
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    model.save_pretrained(tmp, safe_serialization=True)
    hf_tok.save_pretrained(tmp)
    # Written last: its presence means the directory is complete.
    (tmp / MARKER).write_text(json.dumps({"fingerprint": fp, "recipe": RECIPE_VERSION, "vocab": vocab}))
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
    os.replace(tmp, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out_dir


_SEED_TEXT = '''
import os
from pathlib import Path


def read_lines(path: Path) -> list[str]:
    """Return the lines of a text file."""
    with open(path, encoding="utf-8") as fh:
        return [line.rstrip("\\n") for line in fh]


class Counter:
    def __init__(self, start: int = 0) -> None:
        self.value = start

    def increment(self, step: int = 1) -> int:
        self.value += step
        return self.value


if __name__ == "__main__":
    for i in range(10):
        print(i, os.getcwd())
'''


if __name__ == "__main__":  # pragma: no cover - manual use
    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".cache/tiny-llama")
    print(build_tiny_model(target))
