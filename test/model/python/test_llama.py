"""llama.py against hf_reference.py (transformers' definitions) on tiny Hugging Face-layout
models built by make_hf_fixture.py: the cached forward fed in chunks and in mixed batches
equals the plain forward; idle rows write nothing; bfloat16 and float16 agree within stated
tolerances; the reference loop's greedy output equals a cache-free greedy loop and is the
same for a batch as for its rows alone.

Tolerances (relative to max(1, |logit|max)): float32 1e-4 (the same function in another
order); bfloat16 6e-2 and float16 (computed in float32 on the CPU, cache in float16) 1e-2,
against the float64 forward of the rounded weights. Greedy tokens are compared exactly up to
the first step whose top-1/top-2 margin in the reference is below ServingLoopTest.MIN_MARGIN
(float32 1e-3, float16 0.05, bfloat16 1.0 logits), and at least 16 tokens per model must be
compared.
"""

import json
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), "python")]
import make_hf_fixture  # noqa: E402
from torchserve_node import export_hf, hf_reference, reference  # noqa: E402
from torchserve_node.llama import rope_inv_freq  # noqa: E402
from torchserve_node.safetensors_io import load_model_dir  # noqa: E402

torch.set_num_threads(1)
LLAMA_FIXTURES = ("llama-gqa", "llama3-bf16", "qwen2", "mistral")


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max().clamp(min=1.0))


class _Fixtures(unittest.TestCase):
    """Builds and exports every fixture once for the class (about a second)."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.dirs, cls.ckpts = {}, {}
        for name in make_hf_fixture.SPECS:
            d = make_hf_fixture.make(name, cls.tmp.name)
            out = os.path.join(cls.tmp.name, name + ".pt")
            export_hf.export(d, out, quiet=True)
            cls.dirs[name] = d
            cls.ckpts[name] = out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def source(self, name):
        with open(os.path.join(self.dirs[name], "config.json")) as f:
            cfg = json.load(f)
        return cfg, load_model_dir(self.dirs[name])


class CachedForwardTest(_Fixtures):
    @torch.no_grad()
    def check_chunks(self, name, dtype="float32", tol=1e-4):
        cfg, sd = self.source(name)
        ckpt = export_hf.export(self.dirs[name], os.path.join(self.tmp.name, f"{name}-{dtype}.pt"),
                                dtype=dtype, quiet=True)
        m = torch.jit.load(os.path.join(self.tmp.name, f"{name}-{dtype}.pt"))
        tdtype = getattr(torch, dtype)
        rounded = {k: v.to(tdtype) for k, v in sd.items()}
        g = torch.Generator().manual_seed(1)
        seqs = [torch.randint(0, ckpt["vocab_size"], (n,), generator=g) for n in (23, 9, 31)]
        want = [hf_reference.hf_logits(cfg, rounded, s[None], torch.float64)[0] for s in seqs]
        cache = torch.zeros(m.cache_shape(3), dtype=tdtype)
        # Rows advance through their sequences in chunks of different sizes, at different
        # positions in one call; a row that is done idles with length 0.
        chunks = [[5, 1, 1, 7, 9], [4, 0, 2, 1, 2], [10, 3, 1, 1, 16]]
        done = [0, 0, 0]
        worst = 0.0
        for step in range(5):
            lengths = torch.tensor([chunks[b][step] for b in range(3)])
            T = int(lengths.max())
            idx = torch.zeros(3, T, dtype=torch.long)
            for b in range(3):
                n = int(lengths[b])
                idx[b, :n] = seqs[b][done[b]:done[b] + n]
                idx[b, n:] = 7                               # padding must not matter
            logits, out = m(idx, torch.tensor(done), lengths, cache)
            self.assertEqual(out.data_ptr(), cache.data_ptr())   # the same cache, written in place
            self.assertEqual(logits.dtype, torch.float32)
            for b in range(3):
                n = int(lengths[b])
                if n:
                    worst = max(worst, rel_err(logits[b], want[b][done[b] + n - 1]))
                    done[b] += n
        self.assertLessEqual(worst, tol, f"{name} {dtype}")
        return m

    def test_float32_chunks_and_mixed_batches_equal_the_plain_forward(self):
        for name in LLAMA_FIXTURES:
            with self.subTest(name):
                self.check_chunks(name)

    def test_bfloat16_and_float16_agree_with_the_plain_forward_of_the_rounded_weights(self):
        for name in ("llama-gqa", "qwen2", "llama3-bf16"):
            with self.subTest(name):
                self.check_chunks(name, "bfloat16", 6e-2)
                self.check_chunks(name, "float16", 1e-2)

    @torch.no_grad()
    def test_idle_rows_and_padding_write_nothing(self):
        m = torch.jit.load(self.ckpts["llama-gqa"])
        cache = torch.zeros(m.cache_shape(2))
        idx = torch.tensor([[3, 4, 5, 6], [8, 9, 9, 9]])
        m(idx, torch.tensor([0, 0]), torch.tensor([4, 1]), cache)
        snapshot = cache.clone()
        self.assertTrue(bool((cache[:, :, 1, :, 1:] == 0).all()), "padding of row 1 wrote slots")
        m(torch.tensor([[1], [2]]), torch.tensor([4, 1]), torch.tensor([0, 1]), cache)
        self.assertTrue(torch.equal(cache[:, :, 0], snapshot[:, :, 0]), "an idle row wrote its cache")
        self.assertTrue(bool((cache[:, :, 1, :, 1] != 0).any()))

    def test_cache_has_the_checkpoint_dtype_and_kv_heads(self):
        m = torch.jit.load(self.ckpts["llama3-bf16"])
        self.assertEqual(m.cache_shape(3), [2, 2, 3, 1, 256, 16])
        names = dict(m.named_parameters())
        self.assertNotIn("lm_head.weight", names)            # tied: the head is embed.weight
        self.assertEqual(names["embed.weight"].dtype, torch.bfloat16)
        self.assertIn("layers.1.q_proj.weight", names)
        self.assertNotIn("layers.1.q_proj.bias", names)
        qwen = dict(torch.jit.load(self.ckpts["qwen2"]).named_parameters())
        self.assertIn("layers.0.k_proj.bias", qwen)
        self.assertNotIn("layers.0.o_proj.bias", qwen)
        untied = dict(torch.jit.load(self.ckpts["llama-gqa"]).named_parameters())
        self.assertIn("lm_head.weight", untied)


class RopeTest(unittest.TestCase):
    def test_llama3_scaling_divides_long_wavelengths_and_keeps_short_ones(self):
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
        plain = rope_inv_freq(128, 500000.0, None)
        scaled = rope_inv_freq(128, 500000.0, scaling)
        wavelen = 2 * torch.pi / plain
        short, long_ = wavelen < 8192 / 4, wavelen > 8192
        self.assertTrue(torch.equal(scaled[short], plain[short]))
        self.assertTrue(torch.allclose(scaled[long_], plain[long_] / 8))
        mid = ~short & ~long_
        self.assertTrue(bool(mid.any()))
        self.assertTrue(bool(((scaled[mid] < plain[mid]) & (scaled[mid] > plain[mid] / 8)).all()))
        self.assertTrue(torch.equal(scaled, hf_reference.llama3_inv_freq(500000.0, 128, scaling)))


def agreeing_prefix(ids, want, margins, min_margin):
    """Tokens compared exactly up to the first step whose reference margin is small."""
    n = 0
    while n < min(len(ids), len(want)) and margins[n] >= min_margin:
        n += 1
    return ids[:n], want[:n]


class ServingLoopTest(_Fixtures):
    PROMPTS = [[5, 6, 7, 8, 9, 10], [20, 30], list(range(100, 140))]
    # Tokens are compared up to the first step whose reference top-1/top-2 margin is below
    # this (absolute logits): float32 differs from the float64 reference by ~1e-5, float16
    # by its cache rounding (~1e-3), bfloat16 logits are spaced up to 0.125 apart.
    MIN_MARGIN = {"float32": 1e-3, "float16": 0.05, "bfloat16": 1.0}

    def test_reference_greedy_equals_a_cache_free_greedy_loop_alone_and_batched(self):
        for name in make_hf_fixture.SPECS:
            with self.subTest(name):
                ckpt = reference.load(self.ckpts[name])
                cfg, sd = self.source(name)
                dtype = getattr(torch, ckpt.config["dtype"])
                eos = reference.eos_ids(ckpt.tokenizer)
                trace: list = []
                batched = reference.generate(ckpt, self.PROMPTS, 16, trace=trace)
                alone = [reference.generate(ckpt, [p], 16)[0] for p in self.PROMPTS]
                min_margin = self.MIN_MARGIN[ckpt.config["dtype"]]
                # A bfloat16 row depends a little on its batch's shapes: compare up to the
                # first close call (float32 rows are independent to ~1e-6).
                for got, want, tr in zip(batched, alone, trace):
                    self.assertEqual(*agreeing_prefix(got, want, tr["margins"], min_margin))
                if ckpt.config["dtype"] != "bfloat16":
                    self.assertEqual(batched, alone)
                # float32 (and float16 computed in float32): token for token with the
                # transformers-style loop over the rounded weights. bfloat16: a prefix.
                rounded = {k: v.to(dtype) for k, v in sd.items()}
                ref_dtype = torch.bfloat16 if dtype == torch.bfloat16 else torch.float64
                compared = 0
                for p, got in zip(self.PROMPTS, batched):
                    margins: list = []
                    want = hf_reference.greedy_continuation(cfg, rounded, p, 16, eos, ref_dtype,
                                                            margins=margins)
                    got, want = agreeing_prefix(got, want, margins, min_margin)
                    self.assertEqual(got, want, f"{name} prompt {p[:4]}...")
                    compared += len(got)
                self.assertGreaterEqual(compared, 16, f"{name}: too few confident steps")

    def test_several_eos_ids_end_a_row(self):
        ckpt = reference.load(self.ckpts["llama3-bf16"])
        self.assertEqual(reference.eos_ids(ckpt.tokenizer), ckpt.tokenizer["eos_token_ids"])
        self.assertEqual(len(ckpt.tokenizer["eos_token_ids"]), 2)
        free = reference.generate(ckpt, [self.PROMPTS[0]], 12)[0]
        self.assertEqual(len(free), 12)
        # Declaring the 3rd generated token (and another id) end-of-sequence ends the row
        # just before it, whichever position it has in the list.
        for ids in ([free[2], 1], [1, free[2]]):
            ckpt.config["tokenizer"]["eos_token_ids"] = ids
            out = reference.generate(ckpt, [self.PROMPTS[0]], 12)[0]
            self.assertEqual(out, free[:free.index(free[2])])


if __name__ == "__main__":
    unittest.main()
