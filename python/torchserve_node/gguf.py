"""A reader of GGUF files (llama.cpp's format), version 2 and 3.

    GgufFile(path) -> .version, .metadata {key: value}, .tensors {name: TensorInfo},
                      .data(name) -> numpy array over the file (memory-mapped, not copied)

Layout: "GGUF", uint32 version, uint64 tensor count, uint64 metadata count; the metadata
(string key, uint32 value type, value; arrays are uint32 element type, uint64 count,
elements); the tensor infos (string name, uint32 dimension count, uint64 dimensions innermost
first, uint32 ggml type, uint64 offset); padding to `general.alignment` (default 32); the
tensor data, each tensor at data start + offset. Strings are uint64 length + UTF-8 bytes.
Every number is little-endian.

A float tensor's array has its ggml dtype (float32, float16; bfloat16 as uint16) and shape
[outer .. inner]; a quantized tensor's is uint8 [rows, row bytes] (rows = the product of
every dimension but the innermost), GGUF's rows as they are.
"""

import mmap
import struct
from dataclasses import dataclass
from typing import Dict, List, Tuple

import numpy as np

GGUF_MAGIC = b"GGUF"

# metadata value types
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
T_STRING, T_ARRAY = 8, 9
_NUMPY = {0: np.uint8, 1: np.int8, 2: np.uint16, 3: np.int16, 4: np.uint32, 5: np.int32, 6: np.float32,
          7: np.bool_, 10: np.uint64, 11: np.int64, 12: np.float64}

# llama.cpp's file types (llama.h's enum llama_ftype, a file's general.file_type) of the
# quantized mixes whose tensors the project serves, by config.json "quantization" name.
LLAMA_FTYPES = {"q8_0": 7, "q4_0": 2, "q5_0": 8, "q4_k_s": 14, "q4_k_m": 15, "q5_k_s": 16, "q5_k_m": 17, "q6_k": 18}

# ggml types: id -> (name, values per block, bytes per block)
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2),
}


class GgufError(ValueError):
    pass


@dataclass
class TensorInfo:
    name: str
    dims: Tuple[int, ...]       # innermost first, as in the file
    type: int
    offset: int

    @property
    def type_name(self) -> str:
        return GGML_TYPES.get(self.type, (f"type {self.type}",))[0]

    @property
    def shape(self) -> Tuple[int, ...]:
        """Outermost first (torch order)."""
        return tuple(reversed(self.dims))

    def nbytes(self) -> int:
        _, values, size = GGML_TYPES[self.type]
        count = 1
        for d in self.dims:
            count *= d
        return count // values * size


class GgufFile:
    def __init__(self, path: str):
        self.path = path
        with open(path, "rb") as f:
            try:
                self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError as e:
                raise GgufError(f"{path}: empty file") from e
        self._pos = 0
        if self._take(4) != GGUF_MAGIC:
            raise GgufError(f"{path}: not a GGUF file (no GGUF magic)")
        (self.version,) = self._unpack("<I")
        if self.version not in (2, 3):
            raise GgufError(f"{path}: GGUF version {self.version} is not supported (2 or 3)")
        n_tensors, n_kv = self._unpack("<QQ")
        if n_tensors > 1 << 24 or n_kv > 1 << 24:
            raise GgufError(f"{path}: implausible counts ({n_tensors} tensors, {n_kv} keys)")
        self.metadata: Dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            (kind,) = self._unpack("<I")
            self.metadata[key] = self._value(kind, key)
        self.tensors: Dict[str, TensorInfo] = {}
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("<I")
            if n_dims > 4:
                raise GgufError(f"{path}: tensor {name!r} has {n_dims} dimensions")
            dims = self._unpack(f"<{n_dims}Q")
            kind, offset = self._unpack("<IQ")
            self.tensors[name] = TensorInfo(name, tuple(dims), kind, offset)
        alignment = self.metadata.get("general.alignment", 32)
        if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
            raise GgufError(f"{path}: general.alignment {alignment!r} is not a power of two")
        self.data_start = self._pos + (-self._pos % alignment)
        for t in self.tensors.values():
            if t.type in GGML_TYPES and self.data_start + t.offset + t.nbytes() > len(self._map):
                raise GgufError(f"{path}: tensor {t.name!r} lies past the end of the file (truncated?)")

    # ----------------------------------------------------------------- parsing
    def _take(self, n: int) -> bytes:
        if self._pos + n > len(self._map):
            raise GgufError(f"{self.path}: truncated header")
        b = self._map[self._pos:self._pos + n]
        self._pos += n
        return b

    def _unpack(self, fmt: str):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt)))

    def _string(self) -> str:
        (n,) = self._unpack("<Q")
        if n > 1 << 30:
            raise GgufError(f"{self.path}: implausible string length {n}")
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError:
            return self._map[self._pos - n:self._pos].decode("utf-8", errors="replace")

    def _value(self, kind: int, key: str):
        if kind in _SCALARS:
            (v,) = self._unpack(_SCALARS[kind])
            return v
        if kind == T_STRING:
            return self._string()
        if kind == T_ARRAY:
            elem, n = self._unpack("<IQ")
            if elem in _NUMPY:
                size = np.dtype(_NUMPY[elem]).itemsize
                return np.frombuffer(self._take(n * size), dtype=_NUMPY[elem]).copy()
            if elem == T_STRING:
                return [self._string() for _ in range(n)]
            if elem == T_ARRAY:
                return [self._value(T_ARRAY, key) for _ in range(n)]
            raise GgufError(f"{self.path}: key {key!r} is an array of unknown type {elem}")
        raise GgufError(f"{self.path}: key {key!r} has unknown value type {kind}")

    # ----------------------------------------------------------------- access
    def data(self, name: str) -> np.ndarray:
        t = self.tensors[name]
        if t.type not in GGML_TYPES:
            raise GgufError(f"tensor {name!r} has ggml type {t.type}, which is not known")
        kind, values, size = GGML_TYPES[t.type]
        start = self.data_start + t.offset
        raw = np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes(), offset=start)
        shape = t.shape
        if values == 1:
            dtype = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64, "I8": np.int8,
                     "I16": np.int16, "I32": np.int32, "I64": np.int64}[kind]
            return raw.view(dtype).reshape(shape)
        inner = t.dims[0]
        if inner % values:
            raise GgufError(f"tensor {name!r}: {inner} values per row is not a multiple of {kind}'s block")
        rows = t.nbytes() // (inner // values * size)
        return raw.reshape(rows, inner // values * size)

    def close(self):
        try:
            self._map.close()
        except BufferError:
            pass            # arrays from data() still use the map; it closes when they go

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def tensor_list(f: GgufFile) -> List[str]:
    return [f"{t.name} {t.type_name} {list(t.shape)}" for t in f.tensors.values()]
