"""export_hf.py: the safetensors reader, what config.json records (tokenizer, eos list, BOS,
chat template, context, dtype), and a clear error naming the field or tensor for every
model it does not implement."""

import json
import os
import shutil
import struct
import sys
import tempfile
import unittest
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python")]
import make_hf_fixture  # noqa: E402
from torchserve_node import architectures, export_hf  # noqa: E402
from torchserve_node.export_gpt import ExportError  # noqa: E402
from torchserve_node.safetensors_io import SafetensorsError, load_file, load_model_dir, save_file  # noqa: E402

torch.set_num_threads(1)


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.tmp.name, "x.safetensors")

    def tearDown(self):
        self.tmp.cleanup()

    def test_round_trip_keeps_every_bit_of_each_dtype(self):
        g = torch.Generator().manual_seed(0)
        base = torch.randn(3, 5, generator=g) * 100
        tensors = {"f32": base, "bf16": base.bfloat16(), "f16": base.half(),
                   "i64": torch.arange(6).view(2, 3), "empty": torch.zeros(0, 4)}
        save_file(tensors, self.path)
        back = load_file(self.path)
        self.assertEqual(set(back), set(tensors))
        for k, t in tensors.items():
            self.assertEqual(back[k].dtype, t.dtype, k)
            self.assertTrue(torch.equal(back[k], t), k)

    def test_layout_is_the_published_format(self):
        save_file({"w": torch.tensor([1.0, -2.0], dtype=torch.bfloat16)}, self.path)
        with open(self.path, "rb") as f:
            raw = f.read()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + n])
        self.assertEqual(header["w"], {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]})
        self.assertEqual(raw[8 + n:], bytes([0x80, 0x3F, 0x00, 0xC0]))   # 1.0, -2.0 in bf16 LE

    def test_damaged_files_are_named_errors(self):
        save_file({"w": torch.ones(4)}, self.path)
        with open(self.path, "rb") as f:
            raw = f.read()
        with open(self.path, "wb") as f:
            f.write(raw[:-4])
        with self.assertRaisesRegex(SafetensorsError, "'w'"):
            load_file(self.path)
        with open(self.path, "wb") as f:
            f.write(b"\xff" * 16)
        with self.assertRaisesRegex(SafetensorsError, "implausible"):
            load_file(self.path)
        with self.assertRaisesRegex(SafetensorsError, "neither model.safetensors"):
            load_model_dir(self.tmp.name + "/none")


class ExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.src = {n: make_hf_fixture.make(n, cls.tmp.name) for n in make_hf_fixture.SPECS}

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def export(self, name, **kw):
        out = os.path.join(self.tmp.name, name + ".pt")
        return export_hf.export(self.src[name], out, quiet=True, **kw), out

    def copy(self, name, edit_config=None, drop=None):
        """A copy of a fixture with config.json edited and/or a tensor removed."""
        d = os.path.join(self.tmp.name, "edited")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(self.src[name], d)
        if edit_config:
            path = os.path.join(d, "config.json")
            with open(path) as f:
                cfg = json.load(f)
            edit_config(cfg)
            with open(path, "w") as f:
                json.dump(cfg, f)
        if drop:
            sd = load_model_dir(d)
            for k in drop:
                sd.pop(k)
            for f in os.listdir(d):
                if "safetensors" in f:
                    os.remove(os.path.join(d, f))
            save_file(sd, os.path.join(d, "model.safetensors"))
        return d

    def assertExportFails(self, d, pattern, **kw):
        with self.assertRaisesRegex(ExportError, pattern):
            export_hf.export(d, os.path.join(self.tmp.name, "bad.pt"), quiet=True, **kw)
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "bad.pt")))

    def test_every_architecture_of_the_table_exports_to_its_checkpoint_architecture(self):
        # architectures.json is the one list of what the exporter accepts (the native
        # registry's test reads it too): each Hugging Face architecture in it has a fixture
        # here, and its export records the checkpoint architecture the table maps it onto.
        fixture_of = {}
        for name, spec in make_hf_fixture.SPECS.items():
            fixture_of.setdefault(spec["arch"], name)
        self.assertEqual(set(fixture_of), set(architectures.HUGGINGFACE))
        self.assertEqual(set(export_hf.BUILDERS), set(architectures.ARCHITECTURES))
        for hf_arch, name in sorted(fixture_of.items()):
            cfg, _ = self.export(name)
            self.assertEqual((cfg["architecture"], cfg["hf_architecture"]),
                             (architectures.HUGGINGFACE[hf_arch], hf_arch))

    def test_llama3_config_records_tokenizer_eos_list_bos_and_template(self):
        cfg, out = self.export("llama3-bf16")
        self.assertEqual(cfg["architecture"], "llama")
        self.assertEqual(cfg["dtype"], "bfloat16")                  # the model's torch_dtype
        self.assertEqual(cfg["rope_scaling"]["rope_type"], "llama3")
        self.assertEqual(cfg["rope_theta"], 500000.0)
        self.assertEqual((cfg["n_head"], cfg["n_kv_head"]), (4, 1))
        self.assertTrue(cfg["tie_word_embeddings"])
        self.assertEqual(cfg["model_name"], "llama3-bf16")
        tok = cfg["tokenizer"]
        with open(os.path.join(self.src["llama3-bf16"], "tokenizer.json")) as f:
            ids = {t["content"]: t["id"] for t in json.load(f)["added_tokens"]}
        self.assertEqual(tok["eos_token_ids"], [ids["<|end_of_text|>"], ids["<|eot_id|>"]])
        self.assertEqual(tok["eos_token_id"], ids["<|end_of_text|>"])
        # No add_bos_token in tokenizer_config: the post-processor's template adds BOS.
        self.assertEqual((tok["bos_token_id"], tok["add_bos"]), (ids["<|begin_of_text|>"], True))
        self.assertIn("<|start_header_id|>", cfg["chat_template"])
        with zipfile.ZipFile(out) as z:
            names = {n.split("/", 1)[1] for n in z.namelist()}
            self.assertTrue({"extra/config.json", "extra/tokenizer.json",
                             "extra/tokenizer_config.json"} <= names)
        with open(out + ".sha256") as f:
            self.assertTrue(f.read().endswith("  llama3-bf16.pt\n"))

    def test_qwen2_and_spm_tokenizer_entries(self):
        cfg, _ = self.export("qwen2")
        self.assertTrue(cfg["qkv_bias"])
        self.assertEqual(cfg["tokenizer"]["bos_token_id"], None)
        self.assertFalse(cfg["tokenizer"]["add_bos"])
        self.assertEqual(len(cfg["tokenizer"]["eos_token_ids"]), 2)
        self.assertIsNotNone(cfg["tokenizer"]["pad_token_id"])
        cfg, _ = self.export("llama-gqa")
        self.assertEqual(cfg["tokenizer"], {"kind": "huggingface", "file": "tokenizer.json",
                                            "bos_token_id": 1, "eos_token_id": 2,
                                            "eos_token_ids": [2], "pad_token_id": None,
                                            "add_bos": True})
        self.assertFalse(cfg["qkv_bias"])
        self.assertFalse(cfg["tie_word_embeddings"])

    def test_dtype_and_context_options(self):
        cfg, out = self.export("llama-gqa", dtype="bfloat16", context=32)
        self.assertEqual((cfg["dtype"], cfg["block_size"]), ("bfloat16", 32))
        m = torch.jit.load(out)
        self.assertEqual(m.cache_shape(1)[4], 32)
        self.assertEqual(next(m.parameters()).dtype, torch.bfloat16)
        cfg, _ = self.export("mistral")
        self.assertEqual(cfg["dtype"], "float16")
        cfg, _ = self.export("gpt2", context=64)
        self.assertEqual((cfg["architecture"], cfg["block_size"]), ("gpt", 64))
        self.assertExportFails(self.src["llama-gqa"], "--context 999", context=999)

    def test_load_check_reference_is_the_float32_forward_on_the_probe(self):
        cfg, out = self.export("llama-gqa", dtype="bfloat16", context=32)
        files = {"load_check.bin": ""}
        m = torch.jit.load(out, _extra_files=files)
        # Widened for the probe, then put back: the export keeps every 16-bit parameter as it was.
        self.assertTrue(all(p.dtype == torch.bfloat16 for p in m.parameters()))
        blob = bytes(files["load_check.bin"])
        self.assertEqual(blob[:8], b"TSNLCHK1")
        first, second, rows, vocab = struct.unpack("<4q", blob[8:40])
        self.assertEqual((first, second, rows, vocab), (4, 2, 4, cfg["vocab_size"]))
        split = 40 + 2 * (first + 1) * 8
        tokens = torch.tensor(struct.unpack(f"<{2 * (first + 1)}q", blob[40:split])).view(2, first + 1)
        self.assertEqual(tokens.flatten().tolist(), [(i * 37 + 11) % 200 for i in range(2 * (first + 1))])
        logits = torch.frombuffer(bytearray(blob[split:]), dtype=torch.float32).view(4, vocab)
        m = m.float()
        lengths = torch.tensor([first, second, first + 1, second + 1])
        want, _ = m(torch.cat([tokens, tokens]), torch.zeros(4, dtype=torch.long), lengths, torch.zeros(m.cache_shape(4)))
        self.assertTrue(torch.allclose(logits, want, rtol=1e-4, atol=1e-4))

    def test_unsupported_models_are_errors_naming_the_field(self):
        def set_(k, v):
            return lambda c: c.__setitem__(k, v)
        cases = [
            ("llama-gqa", set_("architectures", ["FalconForCausalLM"]), "architectures 'FalconForCausalLM'"),
            ("llama-gqa", set_("rope_scaling", {"rope_type": "yarn", "factor": 4.0}), "rope_scaling type 'yarn'"),
            ("llama-gqa", set_("rope_scaling", {"type": "linear", "factor": 2.0}), "rope_scaling type 'linear'"),
            ("mistral", set_("sliding_window", 64), "sliding_window 64"),
            ("qwen2", lambda c: c.update(use_sliding_window=True, sliding_window=16), "use_sliding_window"),
            ("llama-gqa", set_("num_local_experts", 8), "num_local_experts"),
            ("llama-gqa", set_("hidden_act", "gelu"), "hidden_act 'gelu'"),
            ("llama-gqa", set_("num_key_value_heads", 3), "num_key_value_heads"),
            ("llama-gqa", set_("intermediate_size", 100), r"gate_proj.weight' has shape \[96, 64\], expected \[100, 64\]"),
            ("llama-gqa", set_("num_hidden_layers", 1), "more layers"),
            ("llama-gqa", lambda c: c.pop("rms_norm_eps"), "'rms_norm_eps' is missing"),
            ("llama-gqa", set_("torch_dtype", "float8"), "torch_dtype 'float8'"),
        ]
        for name, edit, pattern in cases:
            with self.subTest(pattern):
                self.assertExportFails(self.copy(name, edit), pattern)
        # The Mistral window is fine when the context stays inside it.
        d = self.copy("mistral", set_("sliding_window", 64))
        cfg = export_hf.export(d, os.path.join(self.tmp.name, "w.pt"), context=64, quiet=True)
        self.assertEqual(cfg["block_size"], 64)

    def test_missing_tensors_are_named(self):
        self.assertExportFails(self.copy("llama-gqa", drop=["lm_head.weight"]), "missing tensor 'lm_head.weight'")
        self.assertExportFails(self.copy("qwen2", drop=["model.layers.1.self_attn.v_proj.bias"]),
                               "missing tensor 'model.layers.1.self_attn.v_proj.bias'")
        d = self.copy("llama-gqa")
        os.remove(os.path.join(d, "tokenizer.json"))
        self.assertExportFails(d, "tokenizer.json is missing")
        d = self.copy("llama-gqa")
        os.remove(os.path.join(d, "model-00002-of-00002.safetensors"))
        self.assertExportFails(d, "model-00002-of-00002.safetensors, which is missing")

    def test_chat_template_file_and_eos_sources(self):
        d = self.copy("qwen2")
        with open(os.path.join(d, "chat_template.jinja"), "w") as f:
            f.write("{{ 'from the jinja file' }}")
        os.remove(os.path.join(d, "generation_config.json"))
        cfg = export_hf.export(d, os.path.join(self.tmp.name, "tpl.pt"), quiet=True)
        self.assertEqual(cfg["chat_template"], "{{ 'from the jinja file' }}")
        # Without generation_config.json: config.json's eos, then tokenizer_config's eos_token.
        with open(os.path.join(d, "config.json")) as f:
            self.assertEqual(cfg["tokenizer"]["eos_token_ids"], [json.load(f)["eos_token_id"]])

    def test_fixtures_are_deterministic(self):
        with tempfile.TemporaryDirectory() as other:
            for name, path in self.src.items():
                again = make_hf_fixture.make(name, other)
                self.assertEqual(sorted(os.listdir(path)), sorted(os.listdir(again)))
                for f in os.listdir(path):
                    with open(os.path.join(path, f), "rb") as x, open(os.path.join(again, f), "rb") as y:
                        self.assertEqual(x.read(), y.read(), f"{name}/{f}")

    def test_command_line(self):
        out = os.path.join(self.tmp.name, "cli.pt")
        self.assertEqual(export_hf.main([self.src["qwen2"], out, "--dtype", "bfloat16"]), 0)
        self.assertTrue(os.path.exists(out + ".sha256"))
        self.assertEqual(export_hf.main([self.tmp.name + "/nothing", out]), 1)


if __name__ == "__main__":
    unittest.main()
