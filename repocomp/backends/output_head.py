"""A cheaper output layer for greedy decoding on CPU that provably picks the token the model's own lm_head picks.

The local model's output matrix (tied to the embeddings) is 262,144 x 640 = 168M parameters, read once per
position whose next token is wanted. torch's float16 matrix-vector kernel reads it faster than the model's own
(one [1,640]x[640,262144] product on 2 cores: AVX-512 BF16, idle: fp16 24 ms, bf16 49 ms, float32 57 ms; AVX2:
fp16 23 ms, bf16 31 ms, float32 76 ms, and for 4 rows 75 / 78 / 174 ms). `OutputHead` keeps a float16 copy of the
matrix (made once at load: 335 MB) and, for one hidden state:

1. computes approximate logits `a = fp16(h) . W16` and takes the top k + 1;
2. recomputes the k candidates' logits in float64 (k x 640 products of the model's numbers: exact up to 1e-13);
3. bounds what the model's own lm_head (bf16 or float32) returns for every token, and accepts the best candidate
   only when it must be the full path's argmax (lowest index on ties, as `argmax` picks); otherwise says None and
   the caller runs the full lm_head (a fallback, counted).

A pass of prompt lookup decoding verifies a draft of up to 10 tokens: `prefix_cache.generate_greedy` asks the head
position by position and stops at the first position that rejects its draft token (the model's lm_head computes
every position; most drafts are rejected early).

The bounds. The kernels accumulate in float32 (any order): a computed dot product c of n terms is within g * S of
the exact one z, with g = n u / (1 - n u), u = 2^-24 and S = sum_j |h_j| |w_ij| (Higham, Accuracy and Stability of
Numerical Algorithms, 3.1: products rounded or exact, as for bf16 numbers); flushed denormals add at most n 2^-126.
A bf16 lm_head then rounds c to nearest bf16 (monotone), so its output for token i lies in [rnd(z_i - g S_i),
rnd(z_i + g S_i)]; a float32 one in [z_i - g S_i, z_i + g S_i]. The fp16 pass: bf16 weights convert to fp16 exactly
(checked at build: otherwise no head); float32 ones are rounded (fp16 subnormals zeroed), with error e_j = w_j -
w16_j; h converts with error d = fp16(h) - h (fp16 subnormals are zeroed first, so no kernel can flush them), and
the fp16 output rounding adds 2^-11 |a| (+ 2^-24 near zero); so every token j outside the top k has z_j <= a_(k+1)
+ 2^-11 |a_(k+1)| + 2^-24 + g S16_j + |d . w16_j| + |h . e_j|, with S_j <= ||h||_2 ||w_j||_2, |d . w16_j| <=
||d||_2 ||w16_j||_2 and |h . e_j| <= ||h||_2 ||e_j||_2 (Cauchy-Schwarz, the largest row norms precomputed). The
candidate b chosen (highest lower bound, lowest index) wins when lo_b exceeds hi of every candidate before it and of
the whole rest, and is at least hi of every candidate after it (rounded to bf16 for a bf16 lm_head). For the local
model ||h||_2 is about 150 and the largest row norm 1.03: g S is about 0.006, against a bf16 spacing of 0.125 for
logits in [16, 32); its float32 weights are bf16 numbers, so e is 0 there.

The assumptions (float32 accumulation and round-to-nearest bf16 output of the bf16 kernel, float32 accumulation
in the fp16 and float32 ones) are about torch's CPU kernels, not the model: tests/test_output_head.py checks that
every entry of the full lm_head lies in the interval above, and that the fp16 pass lies within its bound, on real
hidden states.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import torch

log = logging.getLogger(__name__)

_U32 = 2.0 ** -24  # float32 unit roundoff
_U16 = 2.0 ** -11  # float16 unit roundoff
_FP16_MIN_NORMAL = 2.0 ** -14
_TOP_K = 16
_BUILD_ROWS = 8192  # rows converted and measured at a time when the head is built
# the float16 product must take at most this share of the model's own for the head to pay: it also ranks its
# candidates and certifies them (AVX-512 BF16 AMD EPYC: 0.49; AVX2 float32: 0.30; a Xeon with AMX: 0.99)
_WORTH_IT = 0.8


def float16_reads_faster(weight: torch.Tensor, rows: int = 32_768, reps: int = 5) -> bool:
    """Whether this CPU's float16 matrix-vector product is enough faster than the model's own on `weight`'s rows to
    be worth the head (the head's whole gain), timed at load on a slice of them, the fastest of `reps` each."""
    own = weight.detach()[:rows]
    half = own.to(torch.float16)
    h = torch.randn(1, own.shape[1]).to(own.dtype)

    def fastest(w: torch.Tensor, x: torch.Tensor) -> float:
        x @ w.T  # the kernel's first call
        best = float("inf")
        for _ in range(reps):
            started = time.perf_counter()
            x @ w.T
            best = min(best, time.perf_counter() - started)
        return best

    own_s, half_s = fastest(own, h), fastest(half, h.to(torch.float16))
    log.info("output layer: float16 %.2f ms against %s %.2f ms a slice", half_s * 1e3, own.dtype, own_s * 1e3)
    return half_s <= _WORTH_IT * own_s


class OutputHead:
    """The argmax of `hidden . weight^T` for one hidden state, certified against the model's own product in its
    dtype, bf16 or float32 (module docstring)."""

    def __init__(self, weight: torch.Tensor, k: int = _TOP_K) -> None:
        if weight.dtype not in (torch.bfloat16, torch.float32) or weight.dim() != 2:
            raise ValueError("OutputHead needs a 2-D bfloat16 or float32 output matrix")
        if not 1 <= k < weight.shape[0]:
            raise ValueError(f"k must be in 1..{weight.shape[0] - 1}")
        self.weight = weight.detach()
        self.weight16 = torch.empty(weight.shape, dtype=torch.float16)
        self.k = k
        n = weight.shape[1]
        self._gamma = n * _U32 / (1 - n * _U32)
        self._tiny = n * 2.0 ** -126 + 2.0 ** -24  # flushed float32 denormals; fp16 output near zero
        # A block of rows at a time in float32 (elementwise float16 ops are slow on a CPU without native fp16, and
        # the whole matrix in float32 or float64 is 0.7 or 1.3 GB more). A float32 norm of n terms is within
        # (n/2 + 1) u < gamma of the exact one (relative), and w - fp16(w) is exact in float32 (Sterbenz).
        row_norm_max = conversion_max = 0.0
        for start in range(0, weight.shape[0], _BUILD_ROWS):
            w = self.weight[start:start + _BUILD_ROWS].float()
            w16 = w.to(torch.float16).float()
            if weight.dtype == torch.bfloat16:
                # exact conversion, and no fp16 subnormals a kernel could flush: else the bound above does not hold
                if not torch.equal(w16, w) or bool(((w16 != 0) & (w16.abs() < _FP16_MIN_NORMAL)).any()):
                    raise ValueError("the output matrix does not convert to float16 exactly")
            else:  # float32 rounds to fp16: fp16 subnormals flushed here (no kernel flushes), the error bounded per row
                w16 = torch.where(w16.abs() < _FP16_MIN_NORMAL, torch.zeros_like(w16), w16)
                if not bool(torch.isfinite(w16).all()):
                    raise ValueError("the output matrix overflows float16")
            self.weight16[start:start + _BUILD_ROWS] = w16
            norms = torch.maximum(torch.linalg.vector_norm(w, dim=1), torch.linalg.vector_norm(w16, dim=1))
            row_norm_max = max(row_norm_max, float(norms.max()))
            # |h . (w_j - w16_j)| <= ||h||_2 ||w_j - w16_j||_2: 0 where the conversion is exact (bf16)
            conversion_max = max(conversion_max, float(torch.linalg.vector_norm(w - w16, dim=1).max()))
        self._row_norm_max = row_norm_max * (1 + self._gamma)
        self._conversion_max = conversion_max * (1 + self._gamma)
        self._rounded = weight.dtype == torch.bfloat16  # the model's product rounds its float32 sums to bf16
        self._lock = threading.Lock()
        self.accepted = self.fallbacks = 0
        self.slack = 0.0  # widens every bound: tests force fallbacks with it

    @classmethod
    def for_model(cls, model: Any, k: int = _TOP_K, timed: bool = False) -> OutputHead | None:
        """A head for `model`'s lm_head, or None where it does not apply (not a bf16 or float32 CPU model whose
        logits are the plain lm_head product of the base model's last hidden state) or, when `timed`, where it
        would not pay on this CPU (`float16_reads_faster`)."""
        head = getattr(model, "lm_head", None)
        weight = getattr(head, "weight", None)
        config = getattr(model, "config", None)
        if (weight is None or getattr(model, "model", None) is None or getattr(head, "bias", None) is not None
                or not isinstance(head, torch.nn.Linear) or weight.device.type != "cpu"
                or weight.dtype not in (torch.bfloat16, torch.float32)
                or getattr(config, "final_logit_softcapping", None) is not None):
            return None
        from repocomp.backends.prefix_cache import cache_argument

        if cache_argument(model.model) != cache_argument(model):  # generate_greedy passes the cache to both
            return None
        if timed and not float16_reads_faster(weight):
            return None
        try:
            return cls(weight, k)
        except ValueError as exc:
            log.info("no fast output head: %s", exc)
            return None

    def stats(self) -> dict[str, int | float]:
        with self._lock:
            total = self.accepted + self.fallbacks
            return {"accepted": self.accepted, "fallbacks": self.fallbacks,
                    "fallback_rate": self.fallbacks / total if total else 0.0}

    def _count(self, accepted: bool) -> None:
        with self._lock:
            if accepted:
                self.accepted += 1
            else:
                self.fallbacks += 1

    def argmax(self, hidden: torch.Tensor) -> int | None:
        """The token the model's product `hidden . weight^T` (then argmax, lowest index on ties) picks, for one
        hidden state (1-D, the weight's dtype); None when it cannot be certified (the caller then runs the full
        product)."""
        token = self._certified(hidden, self.slack)
        self._count(token is not None)
        return token

    def _certified(self, hidden: torch.Tensor, slack: float) -> int | None:
        h = hidden.detach().reshape(-1)
        h16 = h.to(torch.float16)
        h16 = torch.where(h16.abs() < _FP16_MIN_NORMAL, torch.zeros_like(h16), h16)
        if not bool(torch.isfinite(h16).all()):
            return None
        approx = torch.nn.functional.linear(h16[None], self.weight16)[0]
        top = torch.topk(approx, self.k + 1)
        a_next = float(top.values[-1])
        if not bool(torch.isfinite(top.values).all()):
            return None
        idx = top.indices[: self.k]
        hd = h.double()
        rows = self.weight[idx].double()
        z = rows @ hd  # exact up to n 2^-53 S, covered below
        s = rows.abs() @ hd.abs()
        r = self._row_norm_max
        h_norm = float(torch.linalg.vector_norm(hd))
        d_norm = float(torch.linalg.vector_norm(h16.double() - hd))
        g = self._gamma * (1 + 1e-9) + 1e-12  # + the float64 sums' own error
        # the rest: z_j <= a_j + 2^-11 |a_j| + 2^-24 + g S16_j + |d . w16_j| + |h . (w_j - w16_j)|, then the
        # model's product adds g S_j (and in bf16 its rounding)
        h16_norm = float(torch.linalg.vector_norm(h16.double()))
        rest_hi = (a_next + _U16 * abs(a_next) + self._tiny + g * (h16_norm + h_norm) * r + d_norm * r
                   + h_norm * self._conversion_max + slack)
        margin = g * s + self._tiny + slack
        if self._rounded:
            lo = _bf16_round(z - margin, down=True)
            hi = _bf16_round(z + margin, down=False)
            rest = float(_bf16_round(torch.tensor([rest_hi], dtype=torch.float64), down=False)[0])
        else:
            lo, hi, rest = z - margin, z + margin, rest_hi
        # b: the highest lower bound, lowest token id among equals
        order = sorted(range(self.k), key=lambda i: (-float(lo[i]), int(idx[i])))
        b = order[0]
        lo_b, tok_b = float(lo[b]), int(idx[b])
        if not rest < lo_b:
            return None
        for i in range(self.k):
            if i == b:
                continue
            hi_i = float(hi[i])
            if hi_i > lo_b or (hi_i == lo_b and int(idx[i]) < tok_b):
                return None
        return tok_b


def _bf16_round(x: torch.Tensor, down: bool) -> torch.Tensor:
    """Round-to-nearest bf16 (as float64) of a float32 value beyond `x` (float64) in the given direction: every
    float32 c with c >= x (down: c <= x) rounds to at least (at most) this (rounding is monotone)."""
    widened = x - x.abs() * 2.0 ** -22 - 2.0 ** -140 if down else x + x.abs() * 2.0 ** -22 + 2.0 ** -140
    return widened.float().to(torch.bfloat16).double()
