"""Quantize a GGUF file with llama.cpp's own quantizer (llama_model_quantize, the function behind
its llama-quantize tool), from the library node-llama-cpp ships prebuilt, then import it as a
project checkpoint with scripts/model/import_gguf.py. For benchmark models whose quantization by
make_bench_models.py (numpy, one tensor at a time) is too slow: Llama-3.2-1B's shape to Q4_K_M
takes about a minute here against more than 25 there. llama.cpp picks each tensor's type as its
users' files have them (Q4_K_M: Q6_K for half of attn_v and ffn_down and for the output, Q4_K
elsewhere), and both sides of vs-llamacpp.ts then read the same bytes.

    /usr/bin/python3 scripts/bench/llamacpp_quantize.py IN.gguf OUT.gguf --type q4_k_m [--checkpoint OUT.pt]
        [--threads N]

    e.g. M=.cache/bench/models
    /usr/bin/python3 scripts/bench/llamacpp_quantize.py $M/llama-1b-f16.gguf $M/llama-1b-q4_k_m.gguf \\
        --type q4_k_m --checkpoint $M/llama-1b-q4_k_m.pt
"""

import argparse
import ctypes
import glob
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
# llama.h's enum llama_ftype, for the quantized mixes the native runtime serves.
from torchserve_node.gguf import LLAMA_FTYPES as FTYPES  # noqa: E402


class QuantizeParams(ctypes.Structure):
    # llama_model_quantize_params starts with int32 nthread and enum llama_ftype ftype; the rest
    # (flags and pointers) keeps llama_model_quantize_default_params' values. Declared larger
    # than any version of the struct, so the by-value return has room for all of it.
    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int32), ("rest", ctypes.c_uint8 * 248)]


def library():
    arch = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    pattern = os.path.join(ROOT, "node_modules", "@node-llama-cpp", f"linux-{arch}", "bins", f"linux-{arch}", "libllama*.so")
    found = sorted(glob.glob(pattern))
    if not found:
        sys.exit(f"llamacpp_quantize: no libllama under {os.path.dirname(pattern)} (npm ci installs node-llama-cpp)")
    directory = os.path.dirname(found[0])
    # libllama finds its ggml libraries beside it.
    for name in sorted(glob.glob(os.path.join(directory, "libggml-base*.so"))) + sorted(glob.glob(os.path.join(directory, "libggml.*so"))):
        ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(found[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input")
    ap.add_argument("output")
    ap.add_argument("--type", required=True, choices=sorted(FTYPES))
    ap.add_argument("--checkpoint", help="also import the result as this project checkpoint (import_gguf.py)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if not os.path.isfile(args.input):
        sys.exit(f"llamacpp_quantize: {args.input}: no such file")
    llama = library()
    llama.llama_model_quantize_default_params.restype = QuantizeParams
    llama.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(QuantizeParams)]
    llama.llama_model_quantize.restype = ctypes.c_uint32
    params = llama.llama_model_quantize_default_params()
    params.nthread = args.threads
    params.ftype = FTYPES[args.type]
    partial = args.output + ".partial"
    status = llama.llama_model_quantize(args.input.encode(), partial.encode(), ctypes.byref(params))
    if status != 0 or not os.path.isfile(partial):
        sys.exit(f"llamacpp_quantize: llama_model_quantize failed ({status}) on {args.input}")
    os.replace(partial, args.output)
    print(f"llamacpp_quantize: {args.output} ({os.path.getsize(args.output) / 1e9:.2f} GB)")
    if args.checkpoint:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "model", "import_gguf.py"), args.output, args.checkpoint], check=True)


if __name__ == "__main__":
    main()
