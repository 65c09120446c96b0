"""Quantized weights laid out as GGUF lays them out, and the TorchScript modules that hold them.

A quantized matrix W [N, K] is stored row by row, each row as GGUF stores it (ggml's
block_q8_0: K / 32 blocks of {float16 scale d, 32 int8 q}, 34 bytes; a value is d * q), in a
uint8 buffer [N, K / 32 * 34]: the bytes of a GGUF tensor of that type are used as they are,
and the native runtime reads the same bytes (no re-quantization, no float copy).

`quantize_q8_0` is ggml's quantize_row_q8_0_ref (ggml-quants.c) in float32 arithmetic:
amax = max |x| over the block, d = amax / 127, q = roundf(x * (1 / d)) (round half away
from zero), d stored as float16 (round to nearest even).

`QuantLinear` (a Linear layer) and `QuantEmbedding` (an embedding table, which a tied model
also uses as its output head) keep the bytes in the buffer `qweight` and the type in the
string attribute `qtype`; their TorchScript forward dequantizes (so the TorchScript runtime,
a GPU and the load-time check run a quantized checkpoint as they run a float one).
"""

from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

QK8_0 = 32
# Bytes of one block and values per block, per type.
BLOCKS = {"q8_0": (34, 32)}
QTYPES = tuple(BLOCKS)
# ggml type ids (ggml.h enum ggml_type) of the types here.
GGML_TYPE = {"q8_0": 8}


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


def quantize(qtype: str, w) -> np.ndarray:
    if qtype == "q8_0":
        return quantize_q8_0(w)
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
    v = b.to(torch.int32)
    return torch.where(v > 127, v - 256, v).to(torch.float32)


def dequantize_rows(data: Tensor, qtype: str, k: int) -> Tensor:
    """uint8 [R, row bytes] (whole GGUF rows) -> float32 [R, k]."""
    r = data.size(0)
    if qtype == "q8_0":
        b = data.reshape(r, k // 32, 34)
        d = _half_to_float(b[:, :, 0], b[:, :, 1])
        return (d.unsqueeze(2) * _int8(b[:, :, 2:])).reshape(r, k)
    raise RuntimeError("unknown quantization " + qtype)


class QuantLinear(nn.Module):
    """y = x W^T + b with W quantized (buffer qweight: GGUF rows; attribute qtype)."""
    qtype: torch.jit.Final[str]
    in_features: torch.jit.Final[int]
    out_features: torch.jit.Final[int]

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

    @staticmethod
    def of(qtype: str, weight: Tensor, bias: Optional[Tensor] = None) -> "QuantLinear":
        n, k = weight.shape
        q = torch.from_numpy(quantize(qtype, weight))
        return QuantLinear(qtype, q, k, n, bias)

    def dequantize(self) -> Tensor:
        return dequantize_rows(self.qweight, self.qtype, self.in_features)

    def forward(self, x: Tensor) -> Tensor:
        w = self.dequantize().to(x.dtype)
        b = self.bias
        if b is not None:
            b = b.to(x.dtype)
        return F.linear(x, w, b)


class QuantEmbedding(nn.Module):
    """An embedding table of quantized rows (buffer qweight, attribute qtype); linear(x)
    uses it as a tied output head."""
    qtype: torch.jit.Final[str]
    num_embeddings: torch.jit.Final[int]
    embedding_dim: torch.jit.Final[int]

    def __init__(self, qtype: str, qweight: Tensor, num_embeddings: int, embedding_dim: int):
        super().__init__()
        if tuple(qweight.shape) != (num_embeddings, row_bytes(qtype, embedding_dim)) or qweight.dtype != torch.uint8:
            raise QuantError(f"{qtype} embedding of {num_embeddings}x{embedding_dim}: wrong buffer "
                             f"{qweight.dtype} {list(qweight.shape)}")
        self.qtype = qtype
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.register_buffer("qweight", qweight.contiguous())

    @staticmethod
    def of(qtype: str, weight: Tensor) -> "QuantEmbedding":
        n, k = weight.shape
        return QuantEmbedding(qtype, torch.from_numpy(quantize(qtype, weight)), n, k)

    def forward(self, idx: Tensor) -> Tensor:
        rows = self.qweight.index_select(0, idx.reshape(-1))
        out = dequantize_rows(rows, self.qtype, self.embedding_dim)
        shape = [int(n) for n in idx.shape] + [self.embedding_dim]
        return out.view(shape)

    def linear(self, x: Tensor) -> Tensor:
        w = dequantize_rows(self.qweight, self.qtype, self.embedding_dim).to(x.dtype)
        return F.linear(x, w, None)
