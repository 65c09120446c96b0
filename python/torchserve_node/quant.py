"""Quantized weights laid out as GGUF lays them out, and the TorchScript modules that hold them.

A quantized matrix W [N, K] is stored row by row, each row as GGUF stores it (for ggml's
block_q8_0: K / 32 blocks of {float16 scale d, 32 int8 q}, 34 bytes; a value is d * q), in a
uint8 buffer [N, row bytes]: the bytes of a GGUF tensor of that type are used as they are,
and the native runtime reads the same bytes (no re-quantization, no float copy). The types:

- q8_0 (ggml type 8): 34 bytes per 32 values, as above.
- q4_0 (type 2): 18 bytes per 32 values: float16 d, 16 bytes qs; value j < 16 is
  ((qs[j] & 15) - 8) * d, value j + 16 is ((qs[j] >> 4) - 8) * d.
- q5_0 (type 6): 22 bytes per 32 values: float16 d, qh (a little-endian uint32 holding the
  fifth bit of each value), 16 bytes qs; value j < 16 is ((qs[j] & 15 | bit j of qh << 4) - 16)
  * d, value j + 16 is ((qs[j] >> 4 | bit j + 16 of qh << 4) - 16) * d.
- q4_k (type 12), q5_k (type 13) and q6_k (type 14): 256-value super-blocks, described at
  their quantizers.

`quantize_q8_0` is ggml's quantize_row_q8_0_ref (ggml-quants.c) in float32 arithmetic:
amax = max |x| over the block, d = amax / 127, q = roundf(x * (1 / d)) (round half away
from zero), d stored as float16 (round to nearest even).

`QuantLinear` (a Linear layer) and `QuantEmbedding` (an embedding table, which a tied model
also uses as its output head) keep the bytes in the buffer `qweight` and the type in the
string attribute `qtype`; their TorchScript forward dequantizes (so the TorchScript runtime,
a GPU and the load-time check run a quantized checkpoint as they run a float one).
"""

from typing import List, Optional, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

QK8_0 = 32
QK_K = 256
# Bytes of one block and values per block, per type.
BLOCKS = {"q8_0": (34, 32), "q4_0": (18, 32), "q5_0": (22, 32), "q4_k": (144, 256), "q5_k": (176, 256),
          "q6_k": (210, 256)}
QTYPES = tuple(BLOCKS)
# ggml type ids (ggml.h enum ggml_type) of the types here.
GGML_TYPE = {"q8_0": 8, "q4_0": 2, "q5_0": 6, "q4_k": 12, "q5_k": 13, "q6_k": 14}
F32 = np.float32
# What export_hf.py --dtype offers: llama.cpp's mixes of the same names (llama.py's
# llama_tensor_qtype): Q8_0, Q4_0, Q4_K_M and Q5_K_M.
SCHEMES = ("q8_0", "q4_0", "q4_k_m", "q5_k_m")


class QuantError(ValueError):
    pass


def row_bytes(qtype: str, k: int) -> int:
    size, values = BLOCKS[qtype]
    if k % values:
        raise QuantError(f"{qtype} needs rows of a multiple of {values} values, got {k}")
    return k // values * size


def _roundf(v: np.ndarray) -> np.ndarray:
    """C's roundf (half away from zero), exact in float32."""
    a = np.abs(v)
    r = np.floor(a)
    r = r + (a - r >= 0.5)
    return np.copysign(r, v)


def quantize_q8_0(w) -> np.ndarray:
    """[N, K] floats -> uint8 [N, K / 32 * 34], ggml's quantize_row_q8_0_ref row by row."""
    x = np.ascontiguousarray(_numpy32(w))
    n, k = x.shape
    row_bytes("q8_0", k)
    b = x.reshape(n, k // QK8_0, QK8_0)
    amax = np.abs(b).max(axis=2)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, np.float32(1)), np.float32(0)).astype(np.float32)
    q = _roundf((b * inv[:, :, None]).astype(np.float32)).astype(np.int8)
    out = np.empty((n, k // QK8_0, 34), dtype=np.uint8)
    out[:, :, :2] = d.astype(np.float16).view(np.uint8).reshape(n, k // QK8_0, 2)
    out[:, :, 2:] = q.view(np.uint8)
    return out.reshape(n, -1)


def _quantize_legacy(w, qtype: str, nmax: int):
    """ggml's quantize_row_q4_0_ref (nmax 8) and quantize_row_q5_0_ref (nmax 16), the two
    "legacy" 32-value types with a scale and no minimum: d is the block's value of largest
    magnitude (the first of equals) over -nmax, so that value maps to 0 and the range fits
    2 * nmax levels; q = MIN(2 * nmax - 1, (int8_t)(x * (1 / d) + nmax + 0.5)). x * (1 / d)
    lies within [-nmax, nmax] up to rounding, so the sum is positive and the int8_t cast
    truncates as floor does. Every step is float32, as in C.
    Returns (float16 d [N, B], q uint8 [N, B, 32])."""
    x = np.ascontiguousarray(_numpy32(w))
    n, k = x.shape
    row_bytes(qtype, k)
    b = x.reshape(n, k // 32, 32)
    a = np.abs(b)
    first = np.take_along_axis(b, a.argmax(axis=2)[:, :, None], 2)[:, :, 0]
    # ggml's max starts at +0.0 and changes only on a strictly larger |v|: an all-zero block
    # keeps +0.0 even where it holds -0.0, and d = 0 / -nmax is -0.0, as in the C.
    mx = np.where(a.max(axis=2) > 0, first, F32(0)).astype(F32)
    d = (mx / F32(-nmax)).astype(F32)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0)).astype(F32)
    v = ((b * inv[:, :, None]).astype(F32) + F32(nmax + 0.5)).astype(F32)
    q = np.minimum(2 * nmax - 1, np.trunc(v).astype(np.int32)).astype(np.uint8)
    return d.astype(np.float16), q


def quantize_q4_0(w) -> np.ndarray:
    """[N, K] -> uint8 [N, K / 32 * 18]: ggml's quantize_row_q4_0_ref (block_q4_0: float16 d,
    16 bytes of 4-bit quants, value j in the low nibble of byte j, value j + 16 in its high)."""
    d, q = _quantize_legacy(w, "q4_0", 8)
    n, nb = d.shape
    out = np.empty((n, nb, 18), np.uint8)
    out[:, :, 0:2] = d.view(np.uint8).reshape(n, nb, 2)
    out[:, :, 2:] = q[:, :, :16] | (q[:, :, 16:] << 4)
    return out.reshape(n, -1)


def quantize_q5_0(w) -> np.ndarray:
    """[N, K] -> uint8 [N, K / 32 * 22]: ggml's quantize_row_q5_0_ref (block_q5_0: float16 d,
    qh: the fifth bit of value j as bit j of a little-endian uint32, then the low 4 bits as
    q4_0 packs them)."""
    d, q = _quantize_legacy(w, "q5_0", 16)
    n, nb = d.shape
    out = np.empty((n, nb, 22), np.uint8)
    out[:, :, 0:2] = d.view(np.uint8).reshape(n, nb, 2)
    out[:, :, 2:6] = np.packbits((q >> 4).reshape(n, nb, 4, 8), axis=3, bitorder="little")[:, :, :, 0]
    out[:, :, 6:] = (q[:, :, :16] & 15) | ((q[:, :, 16:] & 15) << 4)
    return out.reshape(n, -1)


# ---------------------------------------------------------------- k-quants
# ggml's reference quantizers in float32, vectorised over blocks: every sum is taken in ggml's
# order (one element at a time), every constant is a float32, and nearest_int is ggml's
# (adding 1.5 * 2^23 rounds half to even). ggml's C is compared with these bit for bit when
# built without floating-point contraction (FMA): llama.cpp built with -march=native may fuse
# some of its products and then differ in the last bit of a few scales.

def _nearest_int(f: np.ndarray) -> np.ndarray:
    v = (f.astype(F32) + F32(12582912.0)).astype(F32)
    return (v.view(np.int32) & 0x007FFFFF) - 0x00400000


# The K-quant searches run over rows (sub-blocks) a chunk at a time, each chunk transposed so
# that one column of every row is contiguous: the same float32 operations in the same order
# (the same bits), with the working set in cache rather than strided through the whole matrix
# (a Llama-3.2-1B-shaped Q4_K_M export: over 35 minutes before, minutes after).
_CHUNK_ROWS = 1 << 13


def _by_chunks(search, x: np.ndarray, *more: np.ndarray):
    """search(xt [n, s], *more transposed) -> (L [n, s], *per-row values [s]) over chunks of
    the rows of x [S, n]; returns L [S, n] and the per-row values [S]."""
    parts = [search(np.ascontiguousarray(x[a:a + _CHUNK_ROWS].T),
                    *(np.ascontiguousarray(m[a:a + _CHUNK_ROWS].T) for m in more))
             for a in range(0, x.shape[0], _CHUNK_ROWS)]
    return tuple(np.concatenate([p[0].T for p in parts]) if j == 0 else np.concatenate([p[j] for p in parts])
                 for j in range(len(parts[0])))


def _make_qkx2_quants(x: np.ndarray, weights: np.ndarray, nmax: int, rmin: float, rdelta: float,
                      nstep: int):
    """ggml's make_qkx2_quants (use_mad false) over rows of x [S, n]: (L uint8 [S, n],
    scale [S], the_min [S])."""
    return _by_chunks(lambda xt, wt: _qkx2_columns(xt, wt, nmax, rmin, rdelta, nstep), x, weights)


def _qkx2_columns(xt: np.ndarray, wt: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """_make_qkx2_quants on rows laid out as columns: xt, wt [n, S] -> (L [n, S], scale, the_min)."""
    n, s_ = xt.shape
    mn = xt[0].copy()
    mx = xt[0].copy()
    sum_w = wt[0].copy()
    sum_x = (sum_w * xt[0]).astype(F32)
    for i in range(1, n):
        mn = np.where(xt[i] < mn, xt[i], mn)
        mx = np.where(xt[i] > mx, xt[i], mx)
        sum_w = (sum_w + wt[i]).astype(F32)
        sum_x = (sum_x + wt[i] * xt[i]).astype(F32)
    mn = np.where(mn > 0, F32(0), mn).astype(F32)
    flat = mx == mn
    span = np.where(flat, F32(1), mx - mn).astype(F32)
    iscale = (F32(nmax) / span).astype(F32)
    scale = (F32(1) / iscale).astype(F32)
    L = np.clip(_nearest_int(iscale[None, :] * (xt - mn[None, :])), 0, nmax)
    best = np.zeros(s_, F32)
    for i in range(n):
        diff = (scale * L[i].astype(F32) + mn - xt[i]).astype(F32)
        best = (best + wt[i] * (diff * diff)).astype(F32)
    for step in range(nstep + 1):
        # ggml's loop reads min as the best step so far left it (so does the span).
        span = np.where(flat, F32(1), mx - mn).astype(F32)
        isc = ((F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / span).astype(F32)
        laux = np.clip(_nearest_int(isc[None, :] * (xt - mn[None, :])), 0, nmax)
        sum_l = np.zeros(s_, F32)
        sum_l2 = np.zeros(s_, F32)
        sum_xl = np.zeros(s_, F32)
        for i in range(n):
            lf = laux[i].astype(F32)
            w = wt[i]
            sum_l = (sum_l + w * lf).astype(F32)
            sum_l2 = (sum_l2 + w * lf * lf).astype(F32)
            sum_xl = (sum_xl + w * lf * xt[i]).astype(F32)
        D = (sum_w * sum_l2 - sum_l * sum_l).astype(F32)
        ok = D > 0
        Dd = np.where(ok, D, F32(1))
        this_scale = ((sum_w * sum_xl - sum_x * sum_l) / Dd).astype(F32)
        this_min = ((sum_l2 * sum_x - sum_l * sum_xl) / Dd).astype(F32)
        pos = this_min > 0
        this_min = np.where(pos, F32(0), this_min)
        with np.errstate(divide="ignore", invalid="ignore"):
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale).astype(F32)
        mad = np.zeros(s_, F32)
        for i in range(n):
            diff = (this_scale * laux[i].astype(F32) + this_min - xt[i]).astype(F32)
            mad = (mad + wt[i] * (diff * diff)).astype(F32)
        better = ok & (mad < best) & ~flat
        L = np.where(better[None, :], laux, L)
        best = np.where(better, mad, best)
        scale = np.where(better, this_scale, scale)
        mn = np.where(better, this_min, mn)
    L = np.where(flat[None, :], 0, L)
    scale = np.where(flat, F32(0), scale)
    return L.astype(np.uint8), scale.astype(F32), (-mn).astype(F32)


def _fp16(v: np.ndarray) -> np.ndarray:
    return v.astype(F32).astype(np.float16)


def _quantize_qkx(w, qtype: str, nmax: int, rmin: float, nstep: int):
    """What ggml's quantize_row_q4_K_ref (nmax 15, rmin -1, 20 steps) and quantize_row_q5_K_ref
    (nmax 31, rmin -0.5, 15 steps) share: per sub-block of 32, make_qkx2_quants weighted by
    sqrt(mean x^2) + |x|; the 8 scales and 8 mins of a super-block as 6-bit multiples of
    float16 d and dmin (get_scale_min_k4's packing); then every value requantized against
    those, nearest_int((x + dm) / d) in 0..nmax (a sub-block whose d is 0 keeps its search's).
    Returns N, the first 16 bytes of each block (d, dmin, scales: uint8 [N * K / 256, 16]) and
    the values (uint8 [N * K / 256, 8, 32])."""
    x = np.ascontiguousarray(_numpy32(w))
    n, k = x.shape
    row_bytes(qtype, k)
    nb = n * k // QK_K
    sub = x.reshape(nb * 8, 32)
    sum_x2 = np.zeros(nb * 8, F32)
    for i in range(32):
        sum_x2 = (sum_x2 + sub[:, i] * sub[:, i]).astype(F32)
    av_x = np.sqrt((sum_x2 / F32(32)).astype(F32)).astype(F32)
    weights = (av_x[:, None] + np.abs(sub)).astype(F32)
    L, scales, mins = _make_qkx2_quants(sub, weights, nmax, rmin, 0.1, nstep)
    L = L.reshape(nb, 8, 32)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = np.zeros(nb, F32)
    max_min = np.zeros(nb, F32)
    for j in range(8):
        max_scale = np.where(scales[:, j] > max_scale, scales[:, j], max_scale)
        max_min = np.where(mins[:, j] > max_min, mins[:, j], max_min)
    with np.errstate(divide="ignore"):
        inv_scale = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)), F32(0)).astype(F32)
        inv_min = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0)).astype(F32)
    ls = np.minimum(63, _nearest_int(inv_scale[:, None] * scales).astype(np.uint8))
    lm = np.minimum(63, _nearest_int(inv_min[:, None] * mins).astype(np.uint8))
    head = np.zeros((nb, 16), np.uint8)
    d = _fp16((max_scale / F32(63)).astype(F32))
    dmin = _fp16((max_min / F32(63)).astype(F32))
    head[:, 0:2] = d.view(np.uint8).reshape(nb, 2)
    head[:, 2:4] = dmin.view(np.uint8).reshape(nb, 2)
    packed = head[:, 4:16]                                             # a view: fills head
    packed[:, 0:4] = ls[:, 0:4]
    packed[:, 4:8] = lm[:, 0:4]
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    packed[:, 0:4] |= (ls[:, 4:8] >> 4) << 6
    packed[:, 4:8] |= (lm[:, 4:8] >> 4) << 6
    dd = (d.astype(F32)[:, None] * ls.astype(F32)).astype(F32)
    dm = (dmin.astype(F32)[:, None] * lm.astype(F32)).astype(F32)
    xs = x.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest_int(((xs + dm[:, :, None]) / np.where(dd == 0, F32(1), dd)[:, :, None]).astype(F32)), 0, nmax)
    return n, head, np.where((dd == 0)[:, :, None], L, fresh).astype(np.uint8)


def quantize_q4_k(w) -> np.ndarray:
    """[N, K] -> uint8 [N, K / 256 * 144]: ggml's quantize_row_q4_K_ref (block_q4_K: float16 d,
    float16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of 4-bit quants: sub-block 2j
    in the low nibbles of bytes 32j..32j+31, sub-block 2j + 1 in their high nibbles)."""
    n, head, L = _quantize_qkx(w, "q4_k", 15, -1.0, 20)
    nb = head.shape[0]
    out = np.empty((nb, 144), np.uint8)
    out[:, 0:16] = head
    out[:, 16:] = (L[:, 0::2, :] | (L[:, 1::2, :] << 4)).reshape(nb, 128)
    return out.reshape(n, -1)


def quantize_q5_k(w) -> np.ndarray:
    """[N, K] -> uint8 [N, K / 256 * 176]: ggml's quantize_row_q5_K_ref (block_q5_K: float16 d,
    float16 dmin, 12 bytes of 6-bit scales and mins as Q4_K's, qh[32], qs[128]). qs holds the
    low 4 bits as Q4_K holds its values; the fifth bit of value l of sub-block i is bit i of
    qh[l] (ggml's packing loop: masks 1 and 2 for the first pair of sub-blocks, shifted by 2
    for each next pair)."""
    n, head, L = _quantize_qkx(w, "q5_k", 31, -0.5, 15)
    nb = head.shape[0]
    out = np.empty((nb, 176), np.uint8)
    out[:, 0:16] = head
    out[:, 16:48] = np.packbits(L >> 4, axis=1, bitorder="little")[:, 0, :]
    low = L & 0xF
    out[:, 48:] = (low[:, 0::2, :] | (low[:, 1::2, :] << 4)).reshape(nb, 128)
    return out.reshape(n, -1)


def _make_qx_quants_rmse1(x: np.ndarray, nmax: int):
    """ggml's make_qx_quants(n, nmax, x, L, rmse_type 1, no weights) over rows of x [S, n]:
    (L int8 [S, n] offset by nmax, scale [S])."""
    return _by_chunks(lambda xt: _qx_rmse1_columns(xt, nmax), x)


def _qx_rmse1_columns(xt: np.ndarray, nmax: int):
    """_make_qx_quants_rmse1 on rows laid out as columns: xt [n, S] -> (L [n, S], scale)."""
    n, s_ = xt.shape
    amax = np.zeros(s_, F32)
    mx = np.zeros(s_, F32)
    for i in range(n):
        ax = np.abs(xt[i])
        bigger = ax > amax
        amax = np.where(bigger, ax, amax)
        mx = np.where(bigger, xt[i], mx)
    zero = amax < F32(1e-15)
    mxs = np.where(zero, F32(1), mx).astype(F32)

    def sums(iscale):
        l = np.clip(_nearest_int(iscale[None, :] * xt), -nmax, nmax - 1)
        sumlx = np.zeros(s_, F32)
        suml2 = np.zeros(s_, F32)
        for i in range(n):
            lf = l[i].astype(F32)
            w = (xt[i] * xt[i]).astype(F32)
            sumlx = (sumlx + w * xt[i] * lf).astype(F32)
            suml2 = (suml2 + w * lf * lf).astype(F32)
        return l, sumlx, suml2

    iscale = (F32(-nmax) / mxs).astype(F32)
    L, sumlx, suml2 = sums(iscale)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0)).astype(F32)
    best = (scale * sumlx).astype(F32)
    for step in range(-9, 10):
        if step == 0:
            continue
        isc = (-(F32(nmax) + F32(0.1) * F32(step)) / mxs).astype(F32)
        l, slx, sl2 = sums(isc)
        better = (sl2 > 0) & ((slx * slx).astype(F32) > (best * sl2).astype(F32))
        with np.errstate(divide="ignore", invalid="ignore"):
            new_scale = (slx / np.where(sl2 > 0, sl2, F32(1))).astype(F32)
        L = np.where(better[None, :], l, L)
        scale = np.where(better, new_scale, scale)
        best = np.where(better, (new_scale * slx).astype(F32), best)
    L = np.where(zero[None, :], -nmax, L)
    scale = np.where(zero, F32(0), scale)
    return (L + nmax).astype(np.int8), scale.astype(F32)


def quantize_q6_k(w) -> np.ndarray:
    """[N, K] -> uint8 [N, K / 256 * 210]: ggml's quantize_row_q6_K_ref (block_q6_K: 128 bytes
    of low 4 bits, 64 of high 2 bits, 16 int8 scales, float16 d)."""
    x = np.ascontiguousarray(_numpy32(w))
    n, k = x.shape
    row_bytes("q6_k", k)
    nb = n * k // QK_K
    L, scales = _make_qx_quants_rmse1(x.reshape(nb * 16, 16), 32)
    L = L.reshape(nb, 16, 16).astype(np.int32)
    scales = scales.reshape(nb, 16)
    max_scale = np.zeros(nb, F32)
    max_abs = np.zeros(nb, F32)
    for ib in range(16):
        a = np.abs(scales[:, ib])
        bigger = a > max_abs
        max_abs = np.where(bigger, a, max_abs)
        max_scale = np.where(bigger, scales[:, ib], max_scale)
    zero = max_abs < F32(1e-15)
    iscale = (F32(-128) / np.where(zero, F32(1), max_scale)).astype(F32)
    d = _fp16((F32(1) / iscale).astype(F32))
    sc = np.minimum(127, _nearest_int(iscale[:, None] * scales)).astype(np.int8)
    dd = (d.astype(F32)[:, None] * sc.astype(F32)).astype(F32)
    xs = x.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        fresh = np.clip(_nearest_int((xs / np.where(dd == 0, F32(1), dd)[:, :, None]).astype(F32)), -32, 31) + 32
    L = np.where((dd == 0)[:, :, None], L, fresh).reshape(nb, 2, 4, 32)  # [block, half, quarter, l]
    ql = np.empty((nb, 2, 64), np.uint8)
    ql[:, :, 0:32] = (L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4)
    ql[:, :, 32:64] = (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)
    qh = ((L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)).astype(np.uint8)
    out = np.zeros((nb, 210), np.uint8)
    out[:, 0:128] = ql.reshape(nb, 128)
    out[:, 128:192] = qh.reshape(nb, 64)
    out[:, 192:208] = sc.view(np.uint8)
    out[:, 208:210] = d.view(np.uint8).reshape(nb, 2)
    out[zero] = 0
    return out.reshape(n, -1)


def quantize(qtype: str, w) -> np.ndarray:
    if qtype == "q8_0":
        return quantize_q8_0(w)
    if qtype == "q4_0":
        return quantize_q4_0(w)
    if qtype == "q5_0":
        return quantize_q5_0(w)
    if qtype == "q4_k":
        return quantize_q4_k(w)
    if qtype == "q5_k":
        return quantize_q5_k(w)
    if qtype == "q6_k":
        return quantize_q6_k(w)
    raise QuantError(f"unknown quantization {qtype!r} (one of {', '.join(QTYPES)})")


def dequantize(qtype: str, data, k: int) -> Tensor:
    """uint8 [N, row bytes] -> float32 [N, K] (the forward's own function)."""
    return dequantize_rows(torch.as_tensor(np.asarray(data)), qtype, k)


def _numpy32(w) -> np.ndarray:
    if isinstance(w, Tensor):
        return w.detach().to(torch.float32).cpu().numpy()
    return np.asarray(w, dtype=np.float32)


# ------------------------------------------------------------------ TorchScript side

def _half_to_float(lo: Tensor, hi: Tensor) -> Tensor:
    """IEEE half from its two little-endian bytes (uint8 tensors) -> float32 (finite values;
    TorchScript in torch 1.13 has no dtype view)."""
    bits = lo.to(torch.int32) + hi.to(torch.int32) * 256
    sign = 1.0 - 2.0 * (bits >> 15).to(torch.float32)
    exponent = (bits >> 10) & 31
    mantissa = (bits & 1023).to(torch.float32)
    normal = (mantissa + 1024.0) * torch.exp2((exponent - 25).to(torch.float32))
    subnormal = mantissa * (2.0 ** -24)
    return sign * torch.where(exponent == 0, subnormal, normal)


def _int8(b: Tensor) -> Tensor:
    """uint8 bytes read as int8 -> float32: the uint8 -> int8 conversion wraps (two's
    complement, as every compiler libtorch is built with casts), two passes where widening
    to int32 and correcting took four."""
    return b.to(torch.int8).to(torch.float32)


def _k_scales(b: Tensor) -> Tuple[Tensor, Tensor]:
    """Q4_K's and Q5_K's block header [r, nb, >= 16] (float16 d, float16 dmin, 12 bytes of
    6-bit scales and mins, get_scale_min_k4's packing) -> (d * scale, dmin * min) [r, nb, 8]."""
    d = _half_to_float(b[:, :, 0], b[:, :, 1]).unsqueeze(2)
    dmin = _half_to_float(b[:, :, 2], b[:, :, 3]).unsqueeze(2)
    s = b[:, :, 4:16].to(torch.int32)
    lo_sc = s[:, :, 0:4] & 63
    lo_m = s[:, :, 4:8] & 63
    hi_sc = (s[:, :, 8:12] & 15) | ((s[:, :, 0:4] >> 6) << 4)
    hi_m = (s[:, :, 8:12] >> 4) | ((s[:, :, 4:8] >> 6) << 4)
    sc = torch.cat([lo_sc, hi_sc], 2).to(torch.float32)
    m = torch.cat([lo_m, hi_m], 2).to(torch.float32)
    return d * sc, dmin * m


def dequantize_rows(data: Tensor, qtype: str, k: int) -> Tensor:
    """uint8 [R, row bytes] (whole GGUF rows) -> float32 [R, k]."""
    r = data.size(0)
    if qtype == "q8_0":
        b = data.reshape(r, k // 32, 34)
        d = _half_to_float(b[:, :, 0], b[:, :, 1])
        return (d.unsqueeze(2) * _int8(b[:, :, 2:])).reshape(r, k)
    if qtype == "q4_0":
        b = data.reshape(r, k // 32, 18)
        d = _half_to_float(b[:, :, 0], b[:, :, 1]).unsqueeze(2)
        qs = b[:, :, 2:]
        # The offset is taken in int8, a byte pass where a float one would cost four.
        q = torch.cat([qs & 15, qs >> 4], 2).to(torch.int8) - 8        # [r, nb, 32]
        return (d * q.to(torch.float32)).reshape(r, k)
    if qtype == "q5_0":
        b = data.reshape(r, k // 32, 22)
        d = _half_to_float(b[:, :, 0], b[:, :, 1]).unsqueeze(2)
        # Bit j of the little-endian qh is bit j % 8 of its byte j // 8. A 256-entry table
        # maps a qh byte to its 8 values' fifth bits (0 or 16), all in bytes: on one core,
        # 1.1 ms for 128 x 2048 values where shifting by a broadcast tensor took 1.5 ms.
        table = ((torch.arange(256, device=data.device).unsqueeze(1) >> torch.arange(8, device=data.device)) & 1)
        table = table.to(torch.uint8) << 4                              # [256, 8]
        high = table.index_select(0, b[:, :, 2:6].reshape(-1).to(torch.int64)).reshape(r, k // 32, 32)
        qs = b[:, :, 6:]
        q = (torch.cat([qs & 15, qs >> 4], 2) | high).to(torch.int8) - 16
        return (d * q.to(torch.float32)).reshape(r, k)
    if qtype == "q4_k":
        b = data.reshape(r, k // 256, 144)
        scale, mins = _k_scales(b)                                     # [r, nb, 8]
        q = b[:, :, 16:].reshape(r, k // 256, 4, 32)                   # 4 pairs of sub-blocks (uint8 ops)
        vals = torch.stack([q & 15, q >> 4], 3).reshape(r, k // 256, 8, 32).to(torch.float32)
        out = scale.unsqueeze(3) * vals - mins.unsqueeze(3)
        return out.reshape(r, k)
    if qtype == "q5_k":
        b = data.reshape(r, k // 256, 176)
        scale, mins = _k_scales(b)
        # The fifth bit of value l of sub-block i is bit i of qh[l]: shifted out for all eight
        # sub-blocks at once, in bytes.
        shifts = torch.arange(8, dtype=torch.uint8, device=data.device).view(1, 1, 8, 1)
        high = ((b[:, :, 16:48].unsqueeze(2) >> shifts) & 1) << 4      # [r, nb, 8, 32]
        q = b[:, :, 48:].reshape(r, k // 256, 4, 32)
        low = torch.stack([q & 15, q >> 4], 3).reshape(r, k // 256, 8, 32)
        out = scale.unsqueeze(3) * (low | high).to(torch.float32) - mins.unsqueeze(3)
        return out.reshape(r, k)
    if qtype == "q6_k":
        b = data.reshape(r, k // 256, 210)
        ql = b[:, :, 0:128].reshape(r, k // 256, 2, 64)                # uint8 ops: 6-bit results
        qh = b[:, :, 128:192].reshape(r, k // 256, 2, 32)
        sc = _int8(b[:, :, 192:208])                                   # [r, nb, 16]
        d = _half_to_float(b[:, :, 208], b[:, :, 209]).unsqueeze(2)
        q1 = (ql[:, :, :, 0:32] & 15) | ((qh & 3) << 4)
        q2 = (ql[:, :, :, 32:64] & 15) | (((qh >> 2) & 3) << 4)
        q3 = (ql[:, :, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4)
        q4 = (ql[:, :, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)
        q = torch.stack([q1, q2, q3, q4], 3).to(torch.float32) - 32.0  # [r, nb, 2, 4, 32]
        q = q.reshape(r, k // 256, 16, 16)
        return ((d * sc).unsqueeze(3) * q).reshape(r, k)
    raise RuntimeError("unknown quantization " + qtype)


# dequantized_linear multiplies by a quantized matrix a slab of rows at a time (2^18 values,
# 1 MB of float32), so its float32 temporaries are a few slabs, which the allocator reuses,
# rather than several copies of the whole matrix, each fresh memory the kernel must fault in
# and zero (a 1B model's Q6_K head is 262 million values). Measured on one core: a 128256 x
# 2048 Q6_K head 5.1 s whole, 1.6 s by slabs.
def dequantized_linear(x: Tensor, qweight: Tensor, qtype: str, k: int, bias: Optional[Tensor]) -> Tensor:
    """F.linear(x, dequantize_rows(qweight), bias), dequantizing a slab of rows at a time."""
    n = qweight.size(0)
    rows = max(1, 262144 // k)  # a slab: 2^18 values (TorchScript reads no global constant)
    parts: List[Tensor] = []
    for start in range(0, n, rows):
        w = dequantize_rows(qweight.narrow(0, start, min(rows, n - start)), qtype, k)
        parts.append(F.linear(x, w.to(x.dtype), None))
    y = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
    if bias is not None:
        y = y + bias.to(x.dtype)
    return y


class QuantLinear(nn.Module):
    """y = x W^T + b with W quantized (buffer qweight: GGUF rows; attributes qtype,
    in_features, out_features: plain module attributes, which the native runtime reads).

    `dense` is None in the file; the TorchScript runtime may set it to dequantize() once at
    load (on a GPU, or SERVICE_TORCHSCRIPT_DEQUANTIZE=once), and forward then uses it instead
    of dequantizing the weight on every call."""

    dense: Optional[Tensor]

    def __init__(self, qtype: str, qweight: Tensor, in_features: int, out_features: int,
                 bias: Optional[Tensor] = None):
        super().__init__()
        if tuple(qweight.shape) != (out_features, row_bytes(qtype, in_features)) or qweight.dtype != torch.uint8:
            raise QuantError(f"{qtype} weight of {out_features}x{in_features} must be uint8 "
                             f"[{out_features}, {row_bytes(qtype, in_features)}], got {qweight.dtype} "
                             f"{list(qweight.shape)}")
        self.qtype = qtype
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("qweight", qweight.contiguous())
        self.bias = None if bias is None else nn.Parameter(bias.float(), requires_grad=False)
        self.dense = None

    @staticmethod
    def of(qtype: str, weight: Tensor, bias: Optional[Tensor] = None) -> "QuantLinear":
        n, k = weight.shape
        q = torch.from_numpy(quantize(qtype, weight))
        return QuantLinear(qtype, q, k, n, bias)

    @torch.jit.export
    def dequantize(self) -> Tensor:
        return dequantize_rows(self.qweight, self.qtype, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        dense = self.dense
        b = self.bias
        if dense is None:
            return dequantized_linear(x, self.qweight, self.qtype, self.in_features, b)
        if b is not None:
            b = b.to(x.dtype)
        return F.linear(x, dense.to(x.dtype), b)


class QuantEmbedding(nn.Module):
    """An embedding table of quantized rows (buffer qweight, attribute qtype); linear(x)
    uses it as a tied output head (attributes qtype, num_embeddings, embedding_dim).
    `dense`: as QuantLinear's."""

    dense: Optional[Tensor]

    def __init__(self, qtype: str, qweight: Tensor, num_embeddings: int, embedding_dim: int):
        super().__init__()
        if tuple(qweight.shape) != (num_embeddings, row_bytes(qtype, embedding_dim)) or qweight.dtype != torch.uint8:
            raise QuantError(f"{qtype} embedding of {num_embeddings}x{embedding_dim}: wrong buffer "
                             f"{qweight.dtype} {list(qweight.shape)}")
        self.qtype = qtype
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.register_buffer("qweight", qweight.contiguous())
        self.dense = None

    @torch.jit.export
    def dequantize(self) -> Tensor:
        return dequantize_rows(self.qweight, self.qtype, self.embedding_dim)

    def forward(self, idx: Tensor) -> Tensor:
        dense = self.dense
        shape = [int(n) for n in idx.shape] + [self.embedding_dim]
        if dense is not None:
            return dense.index_select(0, idx.reshape(-1)).view(shape)
        rows = self.qweight.index_select(0, idx.reshape(-1))
        return dequantize_rows(rows, self.qtype, self.embedding_dim).view(shape)

    def linear(self, x: Tensor) -> Tensor:
        dense = self.dense
        if dense is None:
            return dequantized_linear(x, self.qweight, self.qtype, self.embedding_dim, None)
        return F.linear(x, dense.to(x.dtype), None)
