"""quant.py (ggml's quantizers and GGUF layouts, the dequantizing TorchScript modules),
llama.py's Q4_K_M mix, export_hf.py --dtype q8_0|q4_k_m, and GGUF: the reader, export_gguf.py
of a quantized checkpoint and import_gguf.py back, with named errors for what it cannot serve."""

import hashlib
import json
import os
import sys
import tempfile
import unittest

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python")]
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


# sha256 of ggml's own output on golden_inputs(): quantize_row_q8_0_ref, quantize_row_q4_K_ref and
# quantize_row_q6_K_ref of ggml-quants.c, compiled with gcc -O2 -ffp-contract=off.
GGML_SHA256 = {
    "q8_0": "e7677567bd031711a504fd34f8a6d2c26b926a6eef3e8d1895c658ec6825423e",
    "q4_k": "2925ce2293507cfd80c0b0b40743113f6a31abe97ad507fecac681093687c828",
    "q6_k": "6048ce66dad727987dd7274bf2f66a78559cf12b0124a46f71f4cbed39f28c59",
}


class QuantizerTest(unittest.TestCase):
    def test_bit_identical_to_ggml_reference_quantizers(self):
        x = golden_inputs()
        for qtype, digest in GGML_SHA256.items():
            out = quant.quantize(qtype, x)
            self.assertEqual(out.shape, (16, quant.row_bytes(qtype, 512)), qtype)
            self.assertEqual(hashlib.sha256(out.tobytes()).hexdigest(), digest, qtype)

    def test_q8_0_block_layout(self):
        x = np.zeros((1, 32), np.float32)
        x[0, :5] = [127, -63.5, 0.5, 1.5, 2.5]
        b = quant.quantize_q8_0(x)[0]
        self.assertEqual(len(b), 34)
        self.assertEqual(b[:2].tobytes(), np.float16(1.0).tobytes())  # d = max |x| / 127, float16 first
        q = b[2:].view(np.int8)
        self.assertEqual(list(q[:5]), [127, -64, 1, 2, 3])            # roundf: halves away from zero
        self.assertTrue((q[5:] == 0).all())

    def test_dequantize_error_bounds_and_torchscript_forward(self):
        g = torch.Generator().manual_seed(1)
        w = torch.randn(24, 512, generator=g) * 0.05
        for qtype, bound in (("q8_0", 0.01), ("q6_k", 0.03), ("q4_k", 0.12)):
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


class ExportImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        spec = dict(make_hf_fixture.NATIVE_BASE, hidden=256, inter=512, kv=2)
        cls.src = make_hf_fixture.make("wide", cls.tmp.name, spec)
        cls.qwen = make_hf_fixture.make("qwen2", cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_export_records_the_quantization_and_verifies(self):
        for scheme in ("q8_0", "q4_k_m"):
            cfg = export_hf.export(self.src, self.path(scheme + ".pt"), dtype=scheme, quiet=True)
            self.assertEqual((cfg["dtype"], cfg["quantization"]), ("float32", scheme))
            m = torch.jit.load(self.path(scheme + ".pt"))
            types = {n: s.qtype for n, s in m.named_modules() if hasattr(s, "qtype")}
            self.assertEqual(len(types), 2 * 7 + 2)                  # every matrix, embed and head
            self.assertEqual(set(types.values()), {"q8_0"} if scheme == "q8_0" else {"q4_k", "q6_k"})
            names = {n for n, _ in m.named_parameters()}
            self.assertEqual(names, {f"layers.{i}.{n}.weight" for i in range(2) for n in ("attn_norm", "mlp_norm")} | {"norm.weight"})
        # a width that is no multiple of 32 stays float; GPT-2 is refused, naming the option
        cfg = export_hf.export(self.qwen, self.path("qwen-q8.pt"), dtype="q8_0", quiet=True)
        self.assertEqual(cfg["quantization"], "q8_0")
        gpt = make_hf_fixture.make("gpt2", self.tmp.name)
        with self.assertRaisesRegex(export_hf.ExportError, "q8_0 is implemented for the llama family"):
            export_hf.export(gpt, self.path("gpt.pt"), dtype="q8_0", quiet=True)

    def test_gguf_round_trip_keeps_every_byte_and_the_forward(self):
        export_hf.export(self.src, self.path("rt.pt"), dtype="q4_k_m", quiet=True)
        export_gguf.export(self.path("rt.pt"), self.path("rt.gguf"), quiet=True)
        with gguf.GgufFile(self.path("rt.gguf")) as f:
            self.assertEqual(f.version, 3)
            self.assertEqual(f.tensors["blk.1.ffn_down.weight"].type_name, "Q6_K")
            self.assertEqual(f.tensors["blk.0.ffn_down.weight"].type_name, "Q4_K")
            self.assertEqual(f.tensors["output.weight"].shape, (259, 256))
            self.assertEqual(f.metadata["general.file_type"], 15)
        cfg = import_gguf.import_gguf(self.path("rt.gguf"), self.path("back.pt"), quiet=True)
        self.assertEqual((cfg["quantization"], cfg["dtype"], cfg["gguf_architecture"]), ("q4_k_m", "float32", "llama"))
        self.assertEqual(cfg["tokenizer"]["bos_token_id"], 1)
        a, b = torch.jit.load(self.path("rt.pt")), torch.jit.load(self.path("back.pt"))
        qa = {n: s.qweight for n, s in a.named_modules() if hasattr(s, "qtype")}
        qb = {n: s.qweight for n, s in b.named_modules() if hasattr(s, "qtype")}
        self.assertEqual(set(qa), set(qb))
        for n in qa:                                                  # q/k rows un-permuted back
            self.assertTrue(torch.equal(qa[n], qb[n]), n)
        idx = torch.tensor([[5, 77, 200, 3, 9]])
        la, _ = a(idx, torch.tensor([0]), torch.tensor([5]), torch.zeros(a.cache_shape(1)))
        lb, _ = b(idx, torch.tensor([0]), torch.tensor([5]), torch.zeros(b.cache_shape(1)))
        self.assertTrue(torch.equal(la, lb))

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
