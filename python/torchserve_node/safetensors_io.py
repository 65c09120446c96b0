"""Reads and writes the safetensors format without the safetensors package (Debian has none).

A file is: 8 bytes little-endian unsigned header length N, N bytes of JSON
{"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
 "__metadata__": {...}}, then the raw little-endian tensor bytes; offsets are relative to
the end of the header. Sharded models add model.safetensors.index.json
{"weight_map": {"name": "model-00001-of-00002.safetensors", ...}}.
"""

import json
import os
import struct
from typing import Dict, Iterable, Optional

import torch

# safetensors dtype -> (torch dtype, bytes per element). 16-bit floats are read as int16
# and reinterpreted with .view, which works for bfloat16 in torch 1.13.
DTYPES = {
    "F64": (torch.float64, 8), "F32": (torch.float32, 4), "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2), "I64": (torch.int64, 8), "I32": (torch.int32, 4),
    "I16": (torch.int16, 2), "I8": (torch.int8, 1), "U8": (torch.uint8, 1),
    "BOOL": (torch.bool, 1),
}
_NAMES = {v[0]: k for k, v in DTYPES.items()}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsError(Exception):
    pass


def read_header(path: str) -> dict:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise SafetensorsError(f"{path}: too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise SafetensorsError(f"{path}: header length {n} is implausible (not safetensors?)")
        raw = f.read(n)
    if len(raw) != n:
        raise SafetensorsError(f"{path}: truncated header")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not JSON ({e})") from e
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    header["__data_start__"] = 8 + n
    return header


def load_file(path: str, names: Optional[Iterable[str]] = None) -> Dict[str, torch.Tensor]:
    """Tensors of one file (all, or only `names`), as CPU tensors of their stored dtype."""
    header = read_header(path)
    start = header.pop("__data_start__")
    header.pop("__metadata__", None)
    wanted = set(header) if names is None else set(names)
    size = os.path.getsize(path)
    out: Dict[str, torch.Tensor] = {}
    with open(path, "rb") as f:
        for name in sorted(wanted, key=lambda k: header[k]["data_offsets"][0] if k in header else 0):
            if name not in header:
                raise SafetensorsError(f"{path}: no tensor {name!r}")
            info = header[name]
            dtype_name = info.get("dtype")
            if dtype_name not in DTYPES:
                raise SafetensorsError(f"{path}: tensor {name!r} has dtype {dtype_name!r}, "
                                       f"not one of {sorted(DTYPES)}")
            dtype, width = DTYPES[dtype_name]
            shape = [int(s) for s in info["shape"]]
            begin, end = (int(o) for o in info["data_offsets"])
            count = 1
            for s in shape:
                count *= s
            if end - begin != count * width or start + end > size:
                raise SafetensorsError(f"{path}: tensor {name!r} ({dtype_name} {shape}) has "
                                       f"{end - begin} bytes at [{begin}, {end}), file is "
                                       f"{size - start} bytes of data")
            f.seek(start + begin)
            buf = bytearray(f.read(end - begin))
            if count == 0:
                out[name] = torch.empty(shape, dtype=dtype)
                continue
            if dtype in (torch.bfloat16, torch.float16):
                t = torch.frombuffer(buf, dtype=torch.int16).view(dtype)
            else:
                t = torch.frombuffer(buf, dtype=dtype)
            out[name] = t.reshape(shape)
    return out


def load_model_dir(directory: str) -> Dict[str, torch.Tensor]:
    """model.safetensors, or the shards listed by model.safetensors.index.json."""
    index = os.path.join(directory, "model.safetensors.index.json")
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(index):
        with open(index, encoding="utf-8") as f:
            weight_map = json.load(f).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise SafetensorsError(f"{index}: no 'weight_map'")
        by_file: Dict[str, list] = {}
        for name, shard in weight_map.items():
            by_file.setdefault(shard, []).append(name)
        out: Dict[str, torch.Tensor] = {}
        for shard, names in sorted(by_file.items()):
            path = os.path.join(directory, shard)
            if not os.path.exists(path):
                raise SafetensorsError(f"{index} names shard {shard}, which is missing")
            out.update(load_file(path, names))
        return out
    if os.path.exists(single):
        return load_file(single)
    raise SafetensorsError(f"{directory}: neither model.safetensors nor "
                           "model.safetensors.index.json (only safetensors weights are read)")


def tensor_bytes(t: torch.Tensor) -> bytes:
    t = t.detach().contiguous().cpu()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def save_file(tensors: Dict[str, torch.Tensor], path: str,
              metadata: Optional[Dict[str, str]] = None) -> None:
    header: dict = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name in sorted(tensors):
        t = tensors[name]
        data = tensor_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)          # the data starts 8-byte aligned, as the writer does
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def save_sharded(tensors: Dict[str, torch.Tensor], directory: str, shards: int) -> None:
    """Splits the tensors over `shards` files with an index, as save_pretrained does."""
    names = sorted(tensors)
    per = -(-len(names) // shards)
    weight_map = {}
    total = 0
    for i in range(shards):
        part = names[i * per:(i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(directory, fname),
                  {"format": "pt"})
        for n in part:
            weight_map[n] = fname
            total += tensors[n].numel() * tensors[n].element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
