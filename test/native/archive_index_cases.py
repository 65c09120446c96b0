"""Python's side of test/native/archiveIndex.test.ts: torch's own view of a TorchScript archive,
and the archives the test reads besides the committed and generated checkpoints.

    archive_index_cases.py view CKPT...     {CKPT: torch.jit.load's view of every attribute, and
                                            where zipfile finds each record's bytes}, as JSON
    archive_index_cases.py records CKPT     where zipfile finds each record's bytes, as JSON (no torch)
    archive_index_cases.py make DIR SOURCE  writes the test's own archives into DIR (SOURCE: a checkpoint)
"""
import json
import math
import os
import struct
import sys
import zipfile
import zlib


def root_of(z: zipfile.ZipFile) -> str:
    return next(n[: -len("/data.pkl")] for n in z.namelist() if n.endswith("/data.pkl") and n.count("/") == 1)


def extra_names(z: zipfile.ZipFile, root: str) -> list:
    prefix = root + "/extra/"
    return [n[len(prefix):] for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]


def element_bytes(t) -> bytes:
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:  # numpy has no bfloat16: the same bits as int16
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def float_json(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def view(path: str) -> dict:
    import torch

    with zipfile.ZipFile(path) as z:
        names = extra_names(z, root_of(z))
    extra = {name: "" for name in names}
    module = torch.jit.load(path, map_location="cpu", _extra_files=extra)
    out = dict(root_class=module._c._type().qualified_name(),
               tensors={}, ints={}, floats={}, bools={}, strings={}, other=[], extra={},
               parameters=[n for n, _ in module.named_parameters()], buffers=[n for n, _ in module.named_buffers()])
    # Every attribute of every submodule, by dotted path, shared ones under each of their names.
    for name, value in torch._C._jit_debug_module_iterators(module._c)["named_attributes_r"]:
        if isinstance(value, torch.Tensor):
            storage = value.storage()
            out["tensors"][name] = dict(
                dtype=str(value.dtype).replace("torch.", ""), shape=list(value.shape), strides=list(value.stride()),
                offset=value.storage_offset(), crc=zlib.crc32(element_bytes(value)),
                storage=storage.data_ptr() if storage.nbytes() > 0 else None)
        elif isinstance(value, bool):
            out["bools"][name] = value
        elif isinstance(value, int):
            out["ints"][name] = str(value)
        elif isinstance(value, float):
            out["floats"][name] = float_json(value)
        elif isinstance(value, str):
            out["strings"][name] = value
        else:
            out["other"].append(name)
    for name, content in extra.items():
        data = content.encode() if isinstance(content, str) else bytes(content)
        out["extra"][name] = dict(size=len(data), crc=zlib.crc32(data))
    out["records"] = records(path)
    return out


def records(path: str) -> dict:
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        root = root_of(z)

        def where(info):
            f.seek(info.header_offset)
            name_length, extra_length = struct.unpack("<HH", f.read(30)[26:30])
            return [info.header_offset + 30 + name_length + extra_length, info.file_size]

        prefix = root + "/data/"
        return dict(root=root, pickle=where(z.getinfo(root + "/data.pkl")),
                    data={i.filename[len(prefix):]: where(i) for i in z.infolist() if i.filename.startswith(prefix)},
                    extra={n: where(z.getinfo(root + "/extra/" + n)) for n in extra_names(z, root)})


def write_zip64(entries, path: str, comment: bytes = b"") -> None:
    """Every entry stored, every size and offset in ZIP64 fields (their 32-bit fields all
    0xffffffff) and a ZIP64 end record, as a writer does past 4 GiB; each record padded to 64-byte
    alignment in its local header's extra field only, as PyTorch's writer does."""
    central = []
    with open(path, "wb") as out:
        for name, data in entries:
            name = name.encode()
            crc, offset = zlib.crc32(data), out.tell()
            zip64 = struct.pack("<HHQQ", 1, 16, len(data), len(data))
            pad = -(offset + 30 + len(name) + len(zip64) + 4) % 64
            extra = zip64 + struct.pack("<HH", 0x4246, pad) + b"Z" * pad
            out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra)))
            out.write(name + extra + data)
            central.append((name, crc, len(data), offset))
        start = out.tell()
        for name, crc, size, offset in central:
            extra = struct.pack("<HHQQQ", 1, 24, size, size, offset)
            out.write(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                                  len(name), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + name + extra)
        end = out.tell()
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(central), len(central), end - start, start))
        out.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, len(comment)) + comment)


def write_zip(entries, path: str, deflated=()) -> None:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries:
            z.writestr(name, data, compress_type=zipfile.ZIP_DEFLATED if name in deflated else zipfile.ZIP_STORED)


def nested_modules(depth: int) -> bytes:
    """A pickle of `depth` modules each the attribute `c` of the one before."""
    out = b"\x80\x02"
    for _ in range(depth):
        out += b"c__torch__\nM\n)\x81}X\x01\x00\x00\x00c"
    out += b"c__torch__\nM\n)\x81}b"
    return out + b"sb" * depth + b"."


def make_odd(path: str) -> None:
    """A module with a tensor of every dtype the reader names, views of one storage (transposed,
    sliced at an offset and a step), a 0-d and an empty tensor, a parameter, and attributes of
    every scalar kind and of kinds the reader leaves out (None, typed lists, tuples, dicts)."""
    import warnings
    from typing import Dict, List, Optional, Tuple

    import torch

    class Leaf(torch.nn.Module):
        def __init__(self, n: int):
            super().__init__()
            self.w = torch.nn.Parameter(torch.arange(n * 3, dtype=torch.float32).reshape(n, 3))
            self.label = "leaf"
            self.k = n

        def forward(self, x):
            return x * self.k

    class Odd(torch.nn.Module):
        sizes: List[int]
        pair: Tuple[int, str]
        table: Dict[str, int]
        maybe: Optional[torch.Tensor]
        tensors: List[torch.Tensor]

        def __init__(self):
            super().__init__()
            g = torch.Generator().manual_seed(7)
            base = torch.randn(6, 10, generator=g)
            self.register_buffer("base", base)
            self.register_buffer("transposed", base.t())
            self.register_buffer("sliced", base[2:5, 1:8:3])
            self.register_buffer("f64", torch.linspace(-1, 1, 7, dtype=torch.float64))
            self.register_buffer("bf16", torch.randn(3, 5, generator=g).to(torch.bfloat16))
            self.register_buffer("f16", torch.randn(4, generator=g).to(torch.float16)[1:])
            self.register_buffer("u8", torch.arange(250, 256, dtype=torch.uint8))
            self.register_buffer("i8", torch.tensor([-128, 0, 127], dtype=torch.int8))
            self.register_buffer("i16", torch.tensor([-3, 4], dtype=torch.int16))
            self.register_buffer("i32", torch.tensor([[-(2 ** 31), 5], [6, 2 ** 31 - 1]], dtype=torch.int32).t())
            self.register_buffer("i64", torch.tensor([2 ** 40, -1], dtype=torch.int64))
            self.register_buffer("flags", torch.tensor([True, False, True]))
            self.register_buffer("empty", torch.zeros(0, 3))
            self.register_buffer("scalar", torch.tensor(2.5))
            self.big, self.neg, self.byte, self.word = 2 ** 40, -70000, 255, 65535
            self.eps, self.ninf, self.half = 1e-300, float("-inf"), -0.5
            self.name, self.blank, self.flag = "é→😀", "", True
            self.sizes = [1, 2, 3]
            self.pair = (4, "x")
            self.table = {"a": 1}
            self.maybe = None
            self.tensors = [torch.ones(2)]
            self.leaf = Leaf(2)
            self.stack = torch.nn.ModuleList([Leaf(1), Leaf(3)])
            self.seq = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())

        def forward(self, x):
            return x + self.base.sum() + len(self.sizes) + self.pair[0] + self.table["a"] + self.leaf(x)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = torch.jit.script(Odd())
    torch.jit.save(module, path, _extra_files={"config.json": '{"odd": true}', "sub/notes.txt": "in a folder"})


def make_unusual_tensors(out_dir: str) -> dict:
    """Tensors an index of records cannot describe: a torch-quantized one, a sparse one.
    Returns {file: what its refusal names}."""
    import torch

    class Holder(torch.nn.Module):
        def __init__(self, t):
            super().__init__()
            self.register_buffer("t", t)

        def forward(self, x):
            return x

    made = {"qtensor.pt": (torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.quint8), "unsupported type 'torch.QUInt8Storage'"),
            "sparse.pt": (torch.randn(4, 4).to_sparse(), "tensor 't' is of a kind not read (torch._utils._rebuild_sparse_tensor)")}
    for file, (tensor, _) in made.items():
        torch.jit.save(torch.jit.script(Holder(tensor)), os.path.join(out_dir, file))
    return {file: why for file, (_, why) in made.items()}


def make(out_dir: str, source: str) -> None:
    odd = os.path.join(out_dir, "odd.pt")
    make_odd(odd)
    with zipfile.ZipFile(odd) as z:
        entries = [(i.filename, z.read(i)) for i in z.infolist()]
    write_zip64(entries, os.path.join(out_dir, "odd-zip64.pt"), comment=b"a comment " * 30)
    with zipfile.ZipFile(source) as z:
        write_zip64([(i.filename, z.read(i)) for i in z.infolist()], os.path.join(out_dir, "source-zip64.pt"))

    # Archives each reader must refuse, with the reason it should give.
    def replaced(name, data):
        return [(n, data if n == name else d) for n, d in entries]

    cases = {
        "no-pickle.pt": ([(n, d) for n, d in entries if not n.endswith("/data.pkl")], (), "no <folder>/data.pkl"),
        "deflated-pickle.pt": (entries, ("odd/data.pkl",), "'odd/data.pkl' is compressed (method 8)"),
        "bad-opcode.pt": (replaced("odd/data.pkl", b"\x80\x02\xff."), (), "unsupported pickle opcode 0xff at offset 2"),
        "no-stop.pt": (replaced("odd/data.pkl", b"\x80\x02N"), (), "ends without its STOP"),
        "deep.pt": (replaced("odd/data.pkl", nested_modules(100)), (), "modules nested more than 64 deep"),
        "state-dict.pt": (replaced("odd/data.pkl", b"\x80\x02}."), (), "holds no module object"),
        "short-record.pt": (replaced("odd/data/0", b"\0" * 100), (), "holds 100 bytes, not 60 float32 elements"),
        "no-record.pt": ([(n, d) for n, d in entries if n != "odd/data/0"], (), "no storage record 'odd/data/0'"),
    }
    for file, (files, deflated, _) in cases.items():
        write_zip(files, os.path.join(out_dir, file), deflated)
    with open(os.path.join(out_dir, "refusals.json"), "w") as f:
        json.dump({**{file: why for file, (_, _, why) in cases.items()}, **make_unusual_tensors(out_dir)}, f)


if __name__ == "__main__":
    if sys.argv[1] == "view":
        print(json.dumps({path: view(path) for path in sys.argv[2:]}))
    elif sys.argv[1] == "records":
        print(json.dumps(records(sys.argv[2])))
    elif sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
