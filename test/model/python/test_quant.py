"""quant.py (ggml's quantizers and GGUF layouts, the dequantizing TorchScript modules),
llama.py's Q4_0, Q4_K_M and Q5_K_M mixes, export_hf.py --dtype q8_0|q4_0|q4_k_m|q5_k_m, and
GGUF: the reader, export_gguf.py of a quantized checkpoint and import_gguf.py back, with named
errors for what it cannot serve."""

import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [HERE, os.path.join(ROOT, "python")]
import make_hf_fixture  # noqa: E402
from torchserve_node import export_gguf, export_hf, gguf, import_gguf, llama, quant  # noqa: E402

torch.set_num_threads(1)


def golden_inputs() -> np.ndarray:
    """16 rows of 512 values, integer arithmetic and IEEE float32 divisions only (the same
    bits everywhere), with an all-zero super-block and a constant stretch."""
    i = np.arange(16, dtype=np.int64)[:, None]
    j = np.arange(512, dtype=np.int64)[None, :]
    x = (((i * 131 + j * 71 + (i * j) % 13) % 257) - 128).astype(np.float32) / np.float32(37)
    x = x * (np.float32(1) + (j % 7).astype(np.float32)) * (np.float32(0.01) * (i + 1).astype(np.float32))
    x[3, :256] = 0
    x[5, 100:300] = np.float32(0.5)
    return x.astype(np.float32)


# sha256 of ggml's own output on golden_inputs(): quantize_row_q8_0_ref, quantize_row_q4_0_ref,
# quantize_row_q5_0_ref, quantize_row_q4_K_ref, quantize_row_q5_K_ref and quantize_row_q6_K_ref
# of ggml-quants.c, compiled with gcc -O2 -ffp-contract=off.
GGML_SHA256 = {
    "q8_0": "e7677567bd031711a504fd34f8a6d2c26b926a6eef3e8d1895c658ec6825423e",
    "q4_0": "dfef345b2e4811a63e16bd23d36379c6bdab09cf9108a56d240aa1957c05a4b6",
    "q5_0": "626ce6d56235d4b2278be7ab1e7ac0fade353d1fb922752bd0021ec7a35ff555",
    "q4_k": "2925ce2293507cfd80c0b0b40743113f6a31abe97ad507fecac681093687c828",
    "q5_k": "3a2f66806c810b3a4bed5fe808324511447ee30bbb85e3b227c844e5bcac77fd",
    "q6_k": "6048ce66dad727987dd7274bf2f66a78559cf12b0124a46f71f4cbed39f28c59",
}
# sha256 of the float32 values ggml's dequantize_row_q4_0 / _q5_0 / _q5_K (same build) make of
# those quantized rows: every q4_0 and q5_0 value d * q is exact in float32, and a q5_K value is
# the same float32 operations in the same order ((d * scale) * q - dmin * min), so ours must match.
GGML_DEQUANTIZED_SHA256 = {
    "q4_0": "33fde2711f4675d414f0a534d081effb537b67a305f2f8a1988eb83789a0f8a0",
    "q5_0": "213619dcf635d6b50a58146febcff2d02a802d21cd4656ba8a039d09c3e75711",
    "q5_k": "37e08936aceda236726043e7fcf6f71519eccdfca7187703dc6d05607648fa32",
}


def get_scale_min_k4(j: int, q: np.ndarray):
    """ggml's get_scale_min_k4: the 6-bit scale and min of sub-block j from block_q4_K's and
    block_q5_K's scales[12]."""
    if j < 4:
        return int(q[j]) & 63, int(q[j + 4]) & 63
    return (int(q[j + 4]) & 0xF) | ((int(q[j - 4]) >> 6) << 4), (int(q[j + 4]) >> 4) | ((int(q[j]) >> 6) << 4)


def spec_values(qtype: str, row: np.ndarray) -> np.ndarray:
    """One row of q4_0 / q5_0 / q5_k blocks decoded one value at a time, as ggml-common.h's block
    layouts and ggml-quants.c's dequantize_row_* define them, in float32 (the independent
    reading the vectorised dequantization is checked against)."""
    size = quant.BLOCKS[qtype][0]
    out = []
    for b in range(len(row) // size):
        block = row[b * size:(b + 1) * size]
        if qtype == "q5_k":
            # block_q5_K: d, dmin, scales[12], qh[32], qs[128]; for each 64 values j: u1 = 1 << 2j,
            # u2 = 2 << 2j; y = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1, then the high
            # nibbles with u2, d2, m2
            d, dmin = block[:4].view(np.float16).astype(np.float32)
            scales, qh, qs = block[4:16], block[16:48], block[48:]
            for j in range(4):
                ql = qs[32 * j:32 * j + 32]
                u1, u2 = 1 << (2 * j), 2 << (2 * j)
                sc1, m1 = get_scale_min_k4(2 * j, scales)
                sc2, m2 = get_scale_min_k4(2 * j + 1, scales)
                d1, mn1 = d * np.float32(sc1), dmin * np.float32(m1)
                d2, mn2 = d * np.float32(sc2), dmin * np.float32(m2)
                out += [d1 * np.float32((ql[l] & 0xF) + (16 if qh[l] & u1 else 0)) - mn1 for l in range(32)]
                out += [d2 * np.float32((ql[l] >> 4) + (16 if qh[l] & u2 else 0)) - mn2 for l in range(32)]
            continue
        d = float(block[:2].view(np.float16)[0])
        if qtype == "q4_0":
            qs = block[2:]
            lo = [(qs[j] & 0x0F) - 8 for j in range(16)]
            hi = [(qs[j] >> 4) - 8 for j in range(16)]
        else:
            qh = int.from_bytes(block[2:6].tobytes(), "little")
            qs = block[6:]
            lo = [((qs[j] & 0x0F) | (((qh >> j) & 1) << 4)) - 16 for j in range(16)]
            hi = [((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16 for j in range(16)]
        out += [q * d for q in lo + hi]
    return np.array(out, np.float32)


def llamacpp_library() -> str:
    """node-llama-cpp's prebuilt libllama for this machine, or '' (scripts/bench/llamacpp_quantize.py
    loads it)."""
    arch = {"x86_64": "x64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    found = glob.glob(os.path.join(ROOT, "node_modules", "@node-llama-cpp", f"linux-{arch}", "bins", f"linux-{arch}", "libllama*.so"))
    return found[0] if found else ""


class QuantizerTest(unittest.TestCase):
    def test_bit_identical_to_ggml_reference_quantizers(self):
        x = golden_inputs()
        for qtype, digest in GGML_SHA256.items():
            out = quant.quantize(qtype, x)
            self.assertEqual(out.shape, (16, quant.row_bytes(qtype, 512)), qtype)
            self.assertEqual(hashlib.sha256(out.tobytes()).hexdigest(), digest, qtype)
            if qtype in GGML_DEQUANTIZED_SHA256:
                back = quant.dequantize(qtype, out, 512).numpy()
                self.assertEqual(hashlib.sha256(back.tobytes()).hexdigest(), GGML_DEQUANTIZED_SHA256[qtype], qtype)

    def test_q8_0_block_layout(self):
        x = np.zeros((1, 32), np.float32)
        x[0, :5] = [127, -63.5, 0.5, 1.5, 2.5]
        b = quant.quantize_q8_0(x)[0]
        self.assertEqual(len(b), 34)
        self.assertEqual(b[:2].tobytes(), np.float16(1.0).tobytes())  # d = max |x| / 127, float16 first
        q = b[2:].view(np.int8)
        self.assertEqual(list(q[:5]), [127, -64, 1, 2, 3])            # roundf: halves away from zero
        self.assertTrue((q[5:] == 0).all())

    def test_q4_0_and_q5_0_block_layouts(self):
        # q4_0: d = the value of largest magnitude / -8 (here -8 / -8 = 1), q = MIN(15,
        # (int8_t)(x / d + 8.5)): halves round up, 7.9 clips to 15.
        x = np.zeros((1, 32), np.float32)
        x[0, :7] = [-8, 7, 0.5, -0.5, 1.5, -1.5, 7.9]
        x[0, 16] = 3
        b = quant.quantize_q4_0(x)[0]
        self.assertEqual(len(b), 18)
        self.assertEqual(b[:2].tobytes(), np.float16(1.0).tobytes())
        q = [int(v) & 15 for v in b[2:]] + [int(v) >> 4 for v in b[2:]]   # value j, then j + 16
        self.assertEqual(q[:7], [0, 15, 9, 8, 10, 7, 15])
        self.assertEqual(q[16], 11)
        self.assertEqual(list(quant.dequantize("q4_0", b[None], 32)[0, :7]), [-8, 7, 1, 0, 2, -1, 7])
        # a positive extreme: d = 8 / -8 = -1, and 8 itself comes back exactly
        x[0, 0] = 8
        self.assertEqual(quant.quantize_q4_0(x)[0, :2].tobytes(), np.float16(-1.0).tobytes())
        self.assertEqual(float(quant.dequantize("q4_0", quant.quantize_q4_0(x), 32)[0, 0]), 8.0)
        # q5_0: 15 .. -16 (d = -16 / -16 = 1) are q = 31 .. 0; the fifth bits, set for the
        # first 16 values, fill bits 0-15 of the little-endian qh.
        x = (15 - np.arange(32, dtype=np.float32))[None]
        b = quant.quantize_q5_0(x)[0]
        self.assertEqual(len(b), 22)
        self.assertEqual(b[:2].tobytes(), np.float16(1.0).tobytes())
        self.assertEqual(list(b[2:6]), [0xFF, 0xFF, 0, 0])
        self.assertEqual(list(b[6:]), [(15 - j) | ((15 - j) << 4) for j in range(16)])
        self.assertTrue(np.array_equal(quant.dequantize("q5_0", b[None], 32).numpy(), x))
        # arbitrary bytes (finite scales) decode as the layout defines each value
        rng = np.random.default_rng(3)
        for qtype in ("q4_0", "q5_0"):
            rows = rng.integers(0, 256, (3, quant.row_bytes(qtype, 96)), dtype=np.uint8)
            rows.reshape(3, 3, -1)[:, :, 1] &= 0xBF                       # d finite: |d| < 2
            got = quant.dequantize(qtype, rows, 96).numpy()
            self.assertTrue(np.array_equal(got, np.stack([spec_values(qtype, r) for r in rows])), qtype)
        with self.assertRaisesRegex(quant.QuantError, "multiple of 32"):
            quant.quantize("q5_0", torch.zeros(2, 48))

    def test_q5_k_block_layout(self):
        # Sub-blocks of the 32 levels 0..31, rising in even sub-blocks and falling in odd ones:
        # scale 1 and min 0 fit exactly (d = 1 / 63 as float16, every 6-bit scale 63, no mins),
        # and value l of sub-block i keeps level l (or 31 - l).
        ramp = np.arange(32, dtype=np.float32)
        x = np.concatenate([ramp if i % 2 == 0 else ramp[::-1] for i in range(8)])[None]
        b = quant.quantize_q5_k(x)[0]
        self.assertEqual(len(b), 176)
        d = np.float16(np.float32(1) / np.float32(63))
        self.assertEqual(b[0:4].tobytes(), d.tobytes() + np.float16(0).tobytes())     # d, dmin
        # scales[12]: sub-blocks 0-3's scale and min in the low 6 bits of bytes 0-7, sub-blocks
        # 4-7's low 4 bits in bytes 8-11 and top 2 bits in the top bits of bytes 0-7
        self.assertEqual(list(b[4:16]), [255] * 4 + [0] * 4 + [15] * 4)
        # qh[l]: bit i is the fifth bit of value l of sub-block i (levels 16..31)
        self.assertEqual(list(b[16:48]), [0xAA] * 16 + [0x55] * 16)
        # qs: the low 4 bits, sub-block 2j in the low nibbles of bytes 32j.., 2j + 1 in the high
        self.assertEqual(list(b[48:]), [(l & 15) | (((31 - l) & 15) << 4) for l in range(32)] * 4)
        back = quant.dequantize("q5_k", b[None], 256).numpy()
        self.assertTrue(np.array_equal(back, (np.float32(d) * np.float32(63)) * x))
        # arbitrary bytes (finite d and dmin) decode as the layout defines each value
        rows = np.random.default_rng(4).integers(0, 256, (3, quant.row_bytes("q5_k", 512)), dtype=np.uint8)
        rows.reshape(3, 2, -1)[:, :, [1, 3]] &= 0xBF                     # |d|, |dmin| < 2
        got = quant.dequantize("q5_k", rows, 512).numpy()
        self.assertTrue(np.array_equal(got, np.stack([spec_values("q5_k", r) for r in rows])))
        with self.assertRaisesRegex(quant.QuantError, "multiple of 256"):
            quant.quantize("q5_k", torch.zeros(2, 96))

    def test_dequantize_error_bounds_and_torchscript_forward(self):
        g = torch.Generator().manual_seed(1)
        w = torch.randn(24, 512, generator=g) * 0.05
        for qtype, bound in (("q8_0", 0.01), ("q6_k", 0.03), ("q5_k", 0.06), ("q5_0", 0.06), ("q4_k", 0.12),
                             ("q4_0", 0.12)):
            layer = quant.QuantLinear.of(qtype, w)
            back = layer.dequantize()
            rel = float((back - w).pow(2).mean().sqrt() / w.pow(2).mean().sqrt())
            self.assertLess(rel, bound, qtype)
            scripted = torch.jit.script(layer)
            x = torch.randn(3, 512, generator=g)
            self.assertTrue(torch.allclose(scripted(x), x @ back.T, atol=1e-5), qtype)
            self.assertEqual(scripted.qtype, qtype)
        with self.assertRaisesRegex(quant.QuantError, "multiple of 256"):
            quant.quantize("q4_k", torch.zeros(2, 96))

    def test_q4_k_m_mix_is_llama_cpps(self):
        layers = 16
        more = [i for i in range(layers) if llama.llama_tensor_qtype("q4_k_m", f"layers.{i}.down_proj.weight", layers, False) == "q6_k"]
        self.assertEqual(more, [0, 1, 4, 7, 10, 13, 14, 15])        # use_more_bits(i, 16)
        self.assertEqual(llama.llama_tensor_qtype("q4_k_m", "layers.3.v_proj.weight", layers, False), "q4_k")
        self.assertEqual(llama.llama_tensor_qtype("q4_k_m", "layers.3.q_proj.weight", layers, False), "q4_k")
        self.assertEqual(llama.llama_tensor_qtype("q4_k_m", "lm_head.weight", layers, False), "q6_k")
        self.assertEqual(llama.llama_tensor_qtype("q4_k_m", "embed.weight", layers, False), "q4_k")
        self.assertEqual(llama.llama_tensor_qtype("q4_k_m", "embed.weight", layers, True), "q6_k")
        # llama.cpp's fallback where the input width is not a multiple of 256 (SmolLM's 576):
        # Q4_K -> Q5_0, Q6_K -> Q8_0; float where it is not a multiple of 32 either
        def qtype(name, width, tied=False):
            return llama.llama_tensor_qtype("q4_k_m", name, layers, tied, width)

        self.assertEqual(qtype("layers.3.q_proj.weight", 576), "q5_0")
        self.assertEqual(qtype("layers.0.down_proj.weight", 1536), "q6_k")
        self.assertEqual(qtype("layers.0.down_proj.weight", 1600), "q8_0")
        self.assertEqual(qtype("layers.0.v_proj.weight", 576), "q8_0")
        self.assertEqual(qtype("lm_head.weight", 576), "q8_0")
        self.assertEqual(qtype("embed.weight", 576, True), "q8_0")
        self.assertEqual(qtype("embed.weight", 576), "q5_0")
        self.assertEqual(qtype("layers.3.q_proj.weight", 512), "q4_k")
        self.assertIsNone(qtype("layers.3.q_proj.weight", 100))
        self.assertIsNone(qtype("lm_head.weight", 100))

    def test_q5_k_m_mix_is_llama_cpps(self):
        # LLAMA_FTYPE_MOSTLY_Q5_K_M: Q4_K_M's mix with Q5_K for Q4_K
        layers = 16
        def qtype(name, width=None, tied=False):
            return llama.llama_tensor_qtype("q5_k_m", name, layers, tied, width)

        for name in ("v_proj", "down_proj"):
            more = [i for i in range(layers) if qtype(f"layers.{i}.{name}.weight") == "q6_k"]
            self.assertEqual(more, [0, 1, 4, 7, 10, 13, 14, 15], name)   # use_more_bits(i, 16)
            self.assertEqual(qtype(f"layers.3.{name}.weight"), "q5_k", name)
        for name in ("q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"):
            self.assertEqual(qtype(f"layers.0.{name}.weight"), "q5_k", name)
        self.assertEqual(qtype("lm_head.weight"), "q6_k")
        self.assertEqual(qtype("embed.weight"), "q5_k")
        self.assertEqual(qtype("embed.weight", tied=True), "q6_k")
        # llama.cpp's fallback where the width is not a multiple of 256: Q5_K -> Q5_1 (which
        # quantize_llama refuses), Q6_K -> Q8_0; float where it is not a multiple of 32 either
        self.assertEqual(qtype("layers.3.q_proj.weight", 576), "q5_1")
        self.assertEqual(qtype("embed.weight", 576), "q5_1")
        self.assertEqual(qtype("layers.0.down_proj.weight", 1600), "q8_0")
        self.assertEqual(qtype("lm_head.weight", 576), "q8_0")
        self.assertEqual(qtype("embed.weight", 576, True), "q8_0")
        self.assertEqual(qtype("layers.3.q_proj.weight", 512), "q5_k")
        self.assertIsNone(qtype("layers.3.q_proj.weight", 100))

    def test_q4_0_mix_is_llama_cpps(self):
        # LLAMA_FTYPE_MOSTLY_Q4_0: Q4_0 everywhere but the output head (the embedding table
        # when tied), which gets Q6_K, or Q8_0 when its width is not a multiple of 256
        layers = 16
        def qtype(name, width=None, tied=False):
            return llama.llama_tensor_qtype("q4_0", name, layers, tied, width)

        for name in ("layers.0.down_proj.weight", "layers.1.v_proj.weight", "layers.5.q_proj.weight", "embed.weight"):
            self.assertEqual(qtype(name), "q4_0", name)
            self.assertEqual(qtype(name, 576), "q4_0", name)
            self.assertIsNone(qtype(name, 100), name)
        self.assertEqual(qtype("lm_head.weight"), "q6_k")
        self.assertEqual(qtype("embed.weight", tied=True), "q6_k")
        self.assertEqual(qtype("lm_head.weight", 2048), "q6_k")
        self.assertEqual(qtype("lm_head.weight", 576), "q8_0")
        self.assertEqual(qtype("embed.weight", 960, True), "q8_0")
        self.assertIsNone(qtype("lm_head.weight", 100))
        with self.assertRaisesRegex(ValueError, "q4_1"):
            llama.llama_tensor_qtype("q4_1", "lm_head.weight", layers, False)


class ExportImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        spec = dict(make_hf_fixture.NATIVE_BASE, hidden=256, inter=512, kv=2)
        cls.src = make_hf_fixture.make("wide", cls.tmp.name, spec)
        # widths 64 and 160, no multiples of 256: Q4_K_M's fallbacks Q5_0 and Q8_0 everywhere
        cls.narrow = make_hf_fixture.make("narrow", cls.tmp.name, make_hf_fixture.NATIVE_BASE)
        cls.qwen = make_hf_fixture.make("qwen2", cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_export_records_the_quantization_and_verifies(self):
        cases = [("wide", self.src, "q8_0", {"q8_0"}), ("wide", self.src, "q4_k_m", {"q4_k", "q6_k"}),
                 ("wide", self.src, "q4_0", {"q4_0", "q6_k"}), ("wide", self.src, "q5_k_m", {"q5_k", "q6_k"}),
                 ("narrow", self.narrow, "q4_k_m", {"q5_0", "q8_0"}),
                 ("narrow", self.narrow, "q4_0", {"q4_0", "q8_0"})]
        for tag, src, scheme, qtypes in cases:
            out = self.path(f"{tag}-{scheme}.pt")
            cfg = export_hf.export(src, out, dtype=scheme, quiet=True)
            self.assertEqual((cfg["dtype"], cfg["quantization"]), ("float32", scheme))
            m = torch.jit.load(out)
            types = {n: s.qtype for n, s in m.named_modules() if hasattr(s, "qtype")}
            self.assertEqual(len(types), 2 * 7 + 2, (tag, scheme))    # every matrix, embed and head
            self.assertEqual(set(types.values()), qtypes, (tag, scheme))
            names = {n for n, _ in m.named_parameters()}
            self.assertEqual(names, {f"layers.{i}.{n}.weight" for i in range(2) for n in ("attn_norm", "mlp_norm")} | {"norm.weight"})
        self.assertEqual(types["lm_head"], "q8_0")                    # Q6_K's fallback at width 64
        self.assertEqual(types["embed"], "q4_0")
        # a width that is no multiple of 32 stays float; GPT-2 is refused, naming the option
        cfg = export_hf.export(self.qwen, self.path("qwen-q8.pt"), dtype="q8_0", quiet=True)
        self.assertEqual(cfg["quantization"], "q8_0")
        gpt = make_hf_fixture.make("gpt2", self.tmp.name)
        with self.assertRaisesRegex(export_hf.ExportError, "q8_0 is implemented for the llama family"):
            export_hf.export(gpt, self.path("gpt.pt"), dtype="q8_0", quiet=True)

    def test_q5_k_m_forward_is_near_the_float_models(self):
        # The scripted forward of each export against the float32 export's, 16 prompts of 8 tokens:
        # the mean relative error of the logits is between Q8_0's and Q4_K_M's (this random model,
        # weights drawn at 1.5x, amplifies the weights' error: Q8_0 0.03, Q5_K_M 0.16, Q4_K_M 0.32
        # where this was written)
        idx = torch.randint(0, 259, (16, 8), generator=torch.Generator().manual_seed(0))
        logits = {}
        for dtype in ("float32", "q8_0", "q4_k_m", "q5_k_m"):
            export_hf.export(self.src, self.path(f"near-{dtype}.pt"), dtype=dtype, quiet=True)
            m = torch.jit.load(self.path(f"near-{dtype}.pt"))
            logits[dtype], _ = m(idx, torch.zeros(16, dtype=torch.long), torch.full((16,), 8), torch.zeros(m.cache_shape(16)))
        want = logits["float32"]
        err = {s: float(((logits[s] - want).norm(dim=1) / want.norm(dim=1)).mean()) for s in ("q8_0", "q4_k_m", "q5_k_m")}
        self.assertLess(err["q5_k_m"], 0.25, err)
        self.assertLess(err["q8_0"], err["q5_k_m"], err)
        self.assertLess(err["q5_k_m"], 0.75 * err["q4_k_m"], err)

    def test_q5_k_m_refuses_a_width_llama_cpp_gives_q5_1(self):
        # widths 64 and 160: llama.cpp's Q5_K_M falls back to Q5_1 there, a type with no kernels
        # here; the export names the matrix, its width and the type rather than choosing another
        out = self.path("narrow-q5_k_m.pt")
        with self.assertRaisesRegex(export_hf.ExportError, r"embed\.weight is 64 wide.*Q5_K_M.*Q5_1"):
            export_hf.export(self.narrow, out, dtype="q5_k_m", quiet=True)
        self.assertFalse(os.path.exists(out))

    def round_trip(self, src: str, scheme: str, tag: str):
        """src exported as `scheme`, written as GGUF and imported back: (GGUF tensor types,
        GGUF metadata, import's config, checkpoint, imported checkpoint)."""
        ckpt, out, back = self.path(tag + ".pt"), self.path(tag + ".gguf"), self.path(tag + "-back.pt")
        export_hf.export(src, ckpt, dtype=scheme, quiet=True)
        export_gguf.export(ckpt, out, quiet=True)
        with gguf.GgufFile(out) as f:
            self.assertEqual(f.version, 3)
            types = {n: t.type_name for n, t in f.tensors.items()}
            md = dict(f.metadata)
        cfg = import_gguf.import_gguf(out, back, quiet=True)
        return types, md, cfg, torch.jit.load(ckpt), torch.jit.load(back)

    def assert_same_bytes_and_forward(self, a, b):
        qa = {n: s.qweight for n, s in a.named_modules() if hasattr(s, "qtype")}
        qb = {n: s.qweight for n, s in b.named_modules() if hasattr(s, "qtype")}
        self.assertEqual(set(qa), set(qb))
        for n in qa:                                                  # q/k rows un-permuted back
            self.assertTrue(torch.equal(qa[n], qb[n]), n)
        idx = torch.tensor([[5, 77, 200, 3, 9]])
        la, _ = a(idx, torch.tensor([0]), torch.tensor([5]), torch.zeros(a.cache_shape(1)))
        lb, _ = b(idx, torch.tensor([0]), torch.tensor([5]), torch.zeros(b.cache_shape(1)))
        self.assertTrue(torch.equal(la, lb))

    def test_gguf_round_trip_keeps_every_byte_and_the_forward(self):
        types, md, cfg, a, b = self.round_trip(self.src, "q4_k_m", "rt")
        self.assertEqual(types["blk.1.ffn_down.weight"], "Q6_K")
        self.assertEqual(types["blk.0.ffn_down.weight"], "Q4_K")
        self.assertEqual(md["general.file_type"], 15)
        self.assertEqual((cfg["quantization"], cfg["dtype"], cfg["gguf_architecture"]), ("q4_k_m", "float32", "llama"))
        self.assertEqual(cfg["tokenizer"]["bos_token_id"], 1)
        self.assert_same_bytes_and_forward(a, b)
        with gguf.GgufFile(self.path("rt.gguf")) as f:
            self.assertEqual(f.tensors["output.weight"].shape, (259, 256))  # [vocab, hidden]

    def test_gguf_round_trip_of_q4_0_and_q5_0(self):
        # Q4_0 (llama.cpp's file type 2), Q6_K head
        types, md, cfg, a, b = self.round_trip(self.src, "q4_0", "rt40")
        self.assertEqual(md["general.file_type"], 2)
        self.assertEqual(set(types.values()), {"Q4_0", "Q6_K", "F32"})
        self.assertEqual((types["output.weight"], types["blk.0.attn_q.weight"]), ("Q6_K", "Q4_0"))
        self.assertEqual(cfg["quantization"], "q4_0")
        self.assert_same_bytes_and_forward(a, b)
        # Q4_K_M of widths 64 and 160: the Q5_0 and Q8_0 a real Q4_K_M file of such a model holds
        types, md, cfg, a, b = self.round_trip(self.narrow, "q4_k_m", "rt50")
        self.assertEqual(md["general.file_type"], 15)
        self.assertEqual(set(types.values()), {"Q5_0", "Q8_0", "F32"})
        self.assertEqual((types["blk.0.ffn_down.weight"], types["blk.1.ffn_down.weight"]), ("Q5_0", "Q8_0"))
        self.assertEqual(cfg["quantization"], "q4_k_m")
        self.assert_same_bytes_and_forward(a, b)

    def test_gguf_round_trip_of_q5_k_m(self):
        # Q5_K, with Q6_K for the head and for ffn_down and attn_v of layer 1 (use_more_bits(1, 2))
        types, md, cfg, a, b = self.round_trip(self.src, "q5_k_m", "rt5km")
        self.assertEqual(md["general.file_type"], 17)
        self.assertEqual(set(types.values()), {"Q5_K", "Q6_K", "F32"})
        self.assertEqual((types["blk.0.ffn_down.weight"], types["blk.1.ffn_down.weight"]), ("Q5_K", "Q6_K"))
        self.assertEqual((types["blk.0.attn_v.weight"], types["blk.1.attn_v.weight"]), ("Q5_K", "Q6_K"))
        self.assertEqual((types["token_embd.weight"], types["output.weight"]), ("Q5_K", "Q6_K"))
        self.assertEqual(cfg["quantization"], "q5_k_m")
        self.assert_same_bytes_and_forward(a, b)
        self.assertEqual({s.qtype for _, s in b.named_modules() if hasattr(s, "qtype")}, {"q5_k", "q6_k"})

    @unittest.skipUnless(llamacpp_library(), "node-llama-cpp's prebuilt libllama is not installed")
    def test_llama_cpps_quantizer_makes_the_same_file(self):
        # llama.cpp's own llama_model_quantize (scripts/bench/llamacpp_quantize.py) on the
        # float32 GGUF of the same model: the same type for every tensor, the same bytes
        for tag, src in (("wide", self.src), ("narrow", self.narrow)):
            export_hf.export(src, self.path(tag + "-f32.pt"), dtype="float32", quiet=True)
            export_gguf.export(self.path(tag + "-f32.pt"), self.path(tag + "-f32.gguf"), quiet=True)
            for scheme in ("q4_0", "q4_k_m", "q5_k_m"):
                ours = self.path(f"{tag}-{scheme}-ours.gguf")
                theirs = self.path(f"{tag}-{scheme}-llama.gguf")
                run = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "bench", "llamacpp_quantize.py"),
                                      self.path(tag + "-f32.gguf"), theirs, "--type", scheme, "--threads", "1"],
                                     capture_output=True, text=True)
                self.assertEqual(run.returncode, 0, run.stderr[-2000:])
                if (tag, scheme) == ("narrow", "q5_k_m"):
                    # widths 64 and 160: llama.cpp writes Q5_1 for Q5_K, which the export refuses;
                    # every matrix has the type llama_tensor_qtype says
                    with gguf.GgufFile(theirs) as y:
                        matrices = {n: (t.type_name, t.shape[1]) for n, t in y.tensors.items() if len(t.dims) == 2}
                    self.assertIn("Q5_1", {kind for kind, _ in matrices.values()})
                    for n, (kind, width) in matrices.items():
                        mine = llama.llama_tensor_qtype(scheme, import_gguf._llama_name(n), 2, False, width)
                        self.assertEqual(kind, mine.upper(), n)
                    # and the import refuses the file naming a Q5_1 tensor, writing nothing
                    with self.assertRaisesRegex(import_gguf.ImportError_, r"tensor \S+.*Q5_1"):
                        import_gguf.import_gguf(theirs, self.path("narrow-q5_k_m-imported.pt"), quiet=True)
                    self.assertFalse(os.path.exists(self.path("narrow-q5_k_m-imported.pt")))
                    continue
                export_hf.export(src, self.path(f"{tag}-{scheme}-ours.pt"), dtype=scheme, quiet=True)
                export_gguf.export(self.path(f"{tag}-{scheme}-ours.pt"), ours, quiet=True)
                with gguf.GgufFile(ours) as x, gguf.GgufFile(theirs) as y:
                    self.assertEqual({n: t.type_name for n, t in x.tensors.items()},
                                     {n: t.type_name for n, t in y.tensors.items()}, (tag, scheme))
                    for n in x.tensors:
                        self.assertTrue(np.array_equal(np.asarray(x.data(n)).view(np.uint8),
                                                       np.asarray(y.data(n)).view(np.uint8)), (tag, scheme, n))

    def test_tokenizer_from_metadata(self):
        export_hf.export(self.qwen, self.path("qw.pt"), quiet=True)
        export_gguf.export(self.path("qw.pt"), self.path("qw.gguf"), quiet=True)
        cfg = import_gguf.import_gguf(self.path("qw.gguf"), self.path("qw-back.pt"), quiet=True)
        files = {"tokenizer.json": "", "config.json": ""}
        torch.jit.load(self.path("qw-back.pt"), _extra_files=files)
        tok = json.loads(files["tokenizer.json"])
        with open(os.path.join(self.qwen, "tokenizer.json")) as fh:
            original = json.load(fh)
        self.assertEqual(tok["model"]["merges"], [m if isinstance(m, str) else " ".join(m) for m in original["model"]["merges"]])
        # (export_gguf.py names the ids past the tokenizer's [PADn], user-defined tokens)
        added = {t["content"] for t in tok["added_tokens"] if not t["content"].startswith("[PAD")}
        self.assertEqual(added, {t["content"] for t in original["added_tokens"]})
        self.assertEqual(cfg["dtype"], "float32")
        self.assertIsNone(cfg.get("quantization"))

    def test_what_it_cannot_serve_is_named(self):
        export_hf.export(self.src, self.path("e.pt"), dtype="q8_0", quiet=True)
        export_gguf.export(self.path("e.pt"), self.path("e.gguf"), quiet=True)
        with gguf.GgufFile(self.path("e.gguf")) as f:
            md = dict(f.metadata)
            tensors = []
            for name, info in f.tensors.items():
                data = torch.from_numpy(np.array(f.data(name)))
                tensors.append((name, export_gguf.Quantized(data, "q8_0", info.dims[0]) if info.type_name == "Q8_0" else data))

        def write(name, metadata, items):
            path = self.path(name)
            meta = {k: (("f32[]", [float(x) for x in v]) if isinstance(v, np.ndarray) and v.dtype.kind == "f" else
                        ("i32[]", [int(x) for x in v]) if isinstance(v, np.ndarray) else v) for k, v in metadata.items()}
            export_gguf.write_gguf(path, meta, items)
            return path

        cases = [
            ("arch", {**md, "general.architecture": "falcon"}, tensors, "general.architecture 'falcon'"),
            ("key", {k: v for k, v in md.items() if k != "llama.block_count"}, tensors, "llama.block_count"),
            ("extra", md, tensors + [("blk.0.ffn_gate_exps.weight", torch.zeros(4, 4))], "blk.0.ffn_gate_exps.weight"),
            ("missing", md, [t for t in tensors if t[0] != "blk.1.ffn_up.weight"], "blk.1.ffn_up.weight"),
            ("tok", {**md, "tokenizer.ggml.model": "bert"}, tensors, "tokenizer.ggml.model 'bert'"),
        ]
        for name, metadata, items, pattern in cases:
            with self.assertRaisesRegex(import_gguf.ImportError_, pattern, msg=name):
                import_gguf.import_gguf(write(name + ".gguf", metadata, items), self.path("bad.pt"), quiet=True)
            self.assertFalse(os.path.exists(self.path("bad.pt")))
        # a tensor type it has no kernels for (Q4_1, ggml type 3): named with the tensor
        raw = bytearray(open(self.path("e.gguf"), "rb").read())
        with gguf.GgufFile(self.path("e.gguf")) as f:
            info = f.tensors["blk.0.attn_v.weight"]
        marker = b"blk.0.attn_v.weight"
        at = raw.index(marker) + len(marker) + 4 + 8 * 2             # past n_dims and the dims
        raw[at:at + 4] = (3).to_bytes(4, "little")
        with open(self.path("q41.gguf"), "wb") as fh:
            fh.write(raw)
        with self.assertRaisesRegex((import_gguf.ImportError_, gguf.GgufError), "blk.0.attn_v.weight.*Q4_1|Q4_1.*blk.0.attn_v.weight"):
            import_gguf.import_gguf(self.path("q41.gguf"), self.path("bad.pt"), quiet=True)
        self.assertEqual(info.type_name, "Q8_0")
        with open(self.path("junk.gguf"), "wb") as fh:
            fh.write(b"GGUF\x07\x00\x00\x00")
        with self.assertRaisesRegex(import_gguf.ImportError_, "GGUF version 7"):
            import_gguf.import_gguf(self.path("junk.gguf"), self.path("bad.pt"), quiet=True)


if __name__ == "__main__":
    unittest.main()
