"""Python-side tests of the model tooling.

    /usr/bin/python3 -m unittest discover -s test/model/python -p 'test_*.py'
"""

import filecmp
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [os.path.join(ROOT, "python"), os.path.join(ROOT, "scripts", "model")]
import brown  # noqa: E402
from torchserve_node import export_gpt, reference  # noqa: E402
from torchserve_node.gpt import GPT, GPTConfig  # noqa: E402

torch.set_num_threads(1)
TINY = GPTConfig(vocab_size=259, block_size=32, n_layer=2, n_head=2, n_embd=16)


def tiny_model(seed=0, cfg=TINY):
    torch.manual_seed(seed)
    m = GPT(cfg)
    with torch.no_grad():   # larger than training init, so attention and positions matter
        for name, p in m.named_parameters():
            p.copy_(torch.randn(p.shape) * (0.3 if p.dim() > 1 else 0.1)
                    + (1.0 if name.endswith("ln_1.weight") or name.endswith("ln_2.weight")
                       or name == "ln_f.weight" else 0.0))
    return m.eval()


def export_tiny(model, path):
    config = export_gpt.build_config(TINY, "gpt", dict(export_gpt.BYTE_TOKENIZER))
    export_gpt.save_module(model, path, config)
    return reference.load(path)


# --------------------------------------------------- independent numpy implementation

def np_gpt2_logits(sd, prefix, n_head, conv1d, gelu, ids):
    """Causal GPT forward in float64 numpy, one position and head at a time."""
    g = {k: v.detach().double().numpy() for k, v in sd.items() if isinstance(v, torch.Tensor)}

    def lin(x, key):
        w = g[key + ".weight"]
        y = x @ (w if conv1d else w.T)
        return y + g[key + ".bias"] if key + ".bias" in g else y

    def ln(x, key):
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        y = (x - mu) / np.sqrt(var + 1e-5) * g[key + ".weight"]
        return y + g[key + ".bias"] if key + ".bias" in g else y

    def act(x):
        if gelu == "tanh":
            return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))

    T = len(ids)
    x = g[prefix + "wte.weight"][ids] + g[prefix + "wpe.weight"][:T]
    D = x.shape[1]
    hd = D // n_head
    i = 0
    while f"{prefix}h.{i}.ln_1.weight" in g:
        p = f"{prefix}h.{i}."
        qkv = lin(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:]
        y = np.zeros_like(x)
        for h in range(n_head):
            s = slice(h * hd, (h + 1) * hd)
            for t in range(T):
                a = k[:t + 1, s] @ q[t, s] / math.sqrt(hd)
                a = np.exp(a - a.max())
                y[t, s] = (a / a.sum()) @ v[:t + 1, s]
        x = x + lin(y, p + "attn.c_proj")
        x = x + lin(act(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
        i += 1
    return ln(x, prefix + "ln_f") @ g[prefix + "wte.weight"].T


def random_gpt2_layout(cfg: GPTConfig, conv1d: bool, prefix: str, seed: int, buffers=True):
    """A random state dict in nanoGPT (nn.Linear) or HF GPT-2 (Conv1D [in, out]) layout."""
    g = torch.Generator().manual_seed(seed)
    D, V, C = cfg.n_embd, cfg.vocab_size, cfg.block_size

    def r(*shape, scale=0.3):
        return torch.randn(*shape, generator=g) * scale
    sd = {prefix + "wte.weight": r(V, D), prefix + "wpe.weight": r(C, D)}
    for i in range(cfg.n_layer):
        p = f"{prefix}h.{i}."
        for ln in ("ln_1", "ln_2"):
            sd[p + ln + ".weight"] = 1 + r(D, scale=0.1)
            if cfg.bias:
                sd[p + ln + ".bias"] = r(D, scale=0.1)
        for name, (o, n) in {"attn.c_attn": (3 * D, D), "attn.c_proj": (D, D),
                             "mlp.c_fc": (4 * D, D), "mlp.c_proj": (D, 4 * D)}.items():
            w = r(o, n)
            sd[p + name + ".weight"] = w.t().contiguous() if conv1d else w
            if cfg.bias:
                sd[p + name + ".bias"] = r(o, scale=0.1)
        if buffers:
            sd[p + "attn.bias"] = torch.ones(1, 1, C, C).tril()
            if conv1d:
                sd[p + "attn.masked_bias"] = torch.tensor(-1e4)
    sd[prefix + "ln_f.weight"] = 1 + r(D, scale=0.1)
    if cfg.bias:
        sd[prefix + "ln_f.bias"] = r(D, scale=0.1)
    sd["lm_head.weight"] = sd[prefix + "wte.weight"]
    return sd


@torch.no_grad()
def prefill_logits(ckpt, ids):
    m = ckpt.module
    cache = torch.zeros(m.cache_shape(1))
    logits, _ = m(torch.tensor([ids]), torch.tensor([0]), torch.tensor([len(ids)]), cache)
    return logits[0].double().numpy()


# -------------------------------------------------------------------------- tests

class CachedForwardTest(unittest.TestCase):
    def test_cached_steps_match_training_forward(self):
        model = tiny_model(1)
        for mod in (model, torch.jit.script(model)):
            ids = torch.randint(0, 259, (2, 20), generator=torch.Generator().manual_seed(2))
            with torch.no_grad():
                full = model.training_logits(ids)
                cache = torch.zeros(model.cache_shape(2))
                # Row 0: prefill 7, decode 1, chunk of 3, decode 1. Row 1: prefill 4, then
                # 1-token steps: rows at different positions, padding in every call.
                feeds = [([0, 7], [0, 4]), ([7, 1], [4, 1]), ([8, 3], [5, 1]), ([11, 1], [6, 1])]
                for (p0, n0), (p1, n1) in feeds:
                    T = max(n0, n1)
                    idx = torch.full((2, T), 258, dtype=torch.long)
                    idx[0, :n0] = ids[0, p0:p0 + n0]
                    idx[1, :n1] = ids[1, p1:p1 + n1]
                    logits, cache = mod(idx, torch.tensor([p0, p1]), torch.tensor([n0, n1]), cache)
                    want = torch.stack([full[0, p0 + n0 - 1], full[1, p1 + n1 - 1]])
                    torch.testing.assert_close(logits, want, atol=1e-5, rtol=1e-5)

    def test_idle_row_keeps_its_cache(self):
        model = tiny_model(3)
        cache = torch.zeros(model.cache_shape(2))
        idx = torch.randint(0, 256, (2, 5))
        with torch.no_grad():
            _, cache = model(idx, torch.tensor([0, 0]), torch.tensor([5, 3]), cache)
            before = cache[:, :, 1].clone()
            logits, cache = model(idx[:, :1], torch.tensor([5, 3]), torch.tensor([1, 0]), cache)
        self.assertTrue(torch.equal(cache[:, :, 1], before))
        self.assertTrue(torch.isfinite(logits).all())


def naive_policy(model, prompt, max_new, C, eos=257):
    """The serving policy with no cache: recompute the window from scratch every step."""
    reserve = min(max_new, C // 2)
    window = list(prompt[-(C - reserve):])
    history, out = list(window), []
    while len(out) < max_new:
        with torch.no_grad():
            logits = model.training_logits(torch.tensor([window]))[0, -1]
        t = int(torch.argmax(logits))
        if t == eos:
            break
        out.append(t)
        history.append(t)
        window = history[-(C // 2):] if len(window) == C else window + [t]
    return out


class ReferenceGeneratorTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.model = tiny_model(4)
        cls.ckpt = export_tiny(cls.model, os.path.join(cls.tmp.name, "t.pt"))

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_policy_matches_cacheless_recomputation(self):
        C = TINY.block_size
        cases = [(list(b"abc"), 5), (list(b"x" * 50), 4), (list(b"hello"), 70),
                 (list(b"y" * 40), 30), ([7], 1)]
        for prompt, m in cases:
            trace = []
            got = reference.generate(self.ckpt, [prompt], [m], trace=trace)[0]
            self.assertEqual(got, naive_policy(self.model, prompt, m, C), (prompt, m))
        # 5 + 70 tokens through a 32-token context must have slid at least twice.
        trace = []
        reference.generate(self.ckpt, [list(b"hello")], [70], trace=trace)
        self.assertGreaterEqual(trace[0]["reprefills"], 2)

    def test_mixed_batch_equals_single_rows(self):
        prompts = [list(b"a"), list("héllo wörld ☃ 😀".encode()), list(b"z" * 45), list(b"q")]
        maxes = [3, 12, 8, 60]
        single = [reference.generate(self.ckpt, [p], [m])[0] for p, m in zip(prompts, maxes)]
        self.assertEqual(reference.generate(self.ckpt, prompts, maxes), single)

    def test_truncation_and_ties(self):
        self.assertEqual(reference.truncate_prompt(list(range(100)), 10, 64), list(range(46, 100)))
        self.assertEqual(reference.truncate_prompt(list(range(100)), 500, 64), list(range(68, 100)))
        self.assertEqual(reference.greedy(torch.tensor([[1.0, 3.0, 3.0, 0.0]])).tolist(), [1])

    def test_eos_stops_and_is_not_output(self):
        model = tiny_model(4)
        with torch.no_grad():   # ln_f outputs a constant vector that the eos row matches
            model.ln_f.weight.zero_()
            model.ln_f.bias.fill_(1.0)
            model.wte.weight[257] = 10.0
        with tempfile.TemporaryDirectory() as d:
            ckpt = export_tiny(model, os.path.join(d, "e.pt"))
            trace = []
            out = reference.generate(ckpt, [list(b"abc"), [1]], [10, 3], trace=trace)
        self.assertEqual(out, [[], []])
        self.assertTrue(all(t["stopped_on_eos"] for t in trace))


class ExportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def _check_against_numpy(self, out, sd, prefix, n_head, conv1d, gelu):
        ckpt = reference.load(out)
        ids = [5, 17, 250, 3, 3, 99, 0, 42, 7]
        want = np_gpt2_logits(sd, prefix, n_head, conv1d, gelu, ids)[-1]
        got = prefill_logits(ckpt, ids)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        with open(out + ".sha256") as f:
            digest, name = f.read().split()
        self.assertEqual(name, os.path.basename(out))
        return ckpt

    def test_nanogpt_round_trip(self):
        for bias in (True, False):
            cfg = GPTConfig(vocab_size=259, block_size=24, n_layer=2, n_head=2, n_embd=16,
                            bias=bias)
            sd = random_gpt2_layout(cfg, conv1d=False, prefix="transformer.", seed=5)
            ckpt_path = os.path.join(self.dir, f"ckpt{bias}.pt")
            args = dict(n_layer=2, n_head=2, n_embd=16, block_size=24, bias=bias,
                        vocab_size=259, dropout=0.0)
            torch.save({"model": {"_orig_mod." + k: v for k, v in sd.items()},
                        "model_args": args, "iter_num": 0}, ckpt_path)
            out = os.path.join(self.dir, f"nano{bias}.pt")
            config = export_gpt.export_file("auto", ckpt_path, out, quiet=True)
            self.assertEqual(config["gelu"], "none")
            self.assertEqual(config["bias"], bias)
            self._check_against_numpy(out, sd, "transformer.", 2, False, "none")

    def test_hf_gpt2_round_trip_with_tokenizer(self):
        cfg = GPTConfig(vocab_size=297, block_size=20, n_layer=2, n_head=4, n_embd=16)
        sd = random_gpt2_layout(cfg, conv1d=True, prefix="transformer.", seed=6)
        src = os.path.join(self.dir, "pytorch_model.bin")
        torch.save(sd, src)
        tok = os.path.join(ROOT, "test", "fixtures", "tiny-bpe.tokenizer.json")
        out = os.path.join(self.dir, "hf.pt")
        config = export_gpt.export_file("auto", src, out, tokenizer_path=tok, n_head=4, quiet=True)
        self.assertEqual(config["gelu"], "tanh")
        self.assertEqual(config["tokenizer"], {"kind": "huggingface", "file": "tokenizer.json",
                                               "eos_token_id": 296, "bos_token_id": None,
                                               "pad_token_id": None, "add_bos": False})
        ckpt = self._check_against_numpy(out, sd, "transformer.", 4, True, "tanh")
        with open(tok, encoding="utf-8") as f:
            self.assertEqual(ckpt.tokenizer_json, f.read())
        # Without the transformer. prefix (GPT2Model) and without lm_head, too.
        bare = {k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")}
        torch.save(bare, src)
        export_gpt.export_file("hf-gpt2", src, out, tokenizer_path=tok, n_head=4, quiet=True)
        self._check_against_numpy(out, bare, "", 4, True, "tanh")

    def test_clear_errors(self):
        cfg = GPTConfig(vocab_size=259, block_size=20, n_layer=2, n_head=2, n_embd=16)
        sd = random_gpt2_layout(cfg, conv1d=True, prefix="transformer.", seed=7)
        src = os.path.join(self.dir, "pytorch_model.bin")
        out = os.path.join(self.dir, "x.pt")

        def fails(state, pattern, **kw):
            torch.save(state, src)
            with self.assertRaisesRegex(export_gpt.ExportError, pattern):
                export_gpt.export_file("hf-gpt2", src, out, quiet=True, **kw)
            self.assertFalse(os.path.exists(out + ".sha256"))

        broken = dict(sd)
        del broken["transformer.h.1.mlp.c_fc.bias"]
        fails(broken, r"missing key 'transformer\.h\.1\.mlp\.c_fc\.bias'", n_head=2)
        broken = dict(sd)
        broken["transformer.h.0.attn.c_proj.weight"] = torch.zeros(16, 17)
        fails(broken, r"shape mismatch for 'transformer\.h\.0\.attn\.c_proj\.weight'", n_head=2)
        broken = dict(sd)
        broken["lm_head.weight"] = torch.zeros(259, 16)
        fails(broken, "untied", n_head=2)
        fails(sd, "--n-head")
        cfg2 = GPTConfig(vocab_size=300, block_size=20, n_layer=2, n_head=2, n_embd=16)
        fails(random_gpt2_layout(cfg2, True, "transformer.", 8), "byte tokenizer needs 259",
              n_head=2)


def assert_close_json(test, fresh, committed, tolerance, where="golden"):
    """Structural equality, floats within `tolerance`: BLAS kernels differ by CPU (OpenBLAS
    picks SkylakeX, Haswell, Zen, ... at run time), so logits agree to ~1e-6, not bit for bit."""
    if isinstance(committed, float) or isinstance(fresh, float):
        test.assertIsInstance(fresh, (int, float), where)
        test.assertLessEqual(abs(fresh - committed), tolerance, where)
    elif isinstance(committed, dict):
        test.assertIsInstance(fresh, dict, where)
        test.assertEqual(sorted(fresh), sorted(committed), where)
        for key in committed:
            assert_close_json(test, fresh[key], committed[key], tolerance, f"{where}.{key}")
    elif isinstance(committed, list):
        test.assertIsInstance(fresh, list, where)
        test.assertEqual(len(fresh), len(committed), where)
        for i, (a, b) in enumerate(zip(fresh, committed)):
            assert_close_json(test, a, b, tolerance, f"{where}[{i}]")
    else:
        test.assertEqual(fresh, committed, where)


class FixtureTest(unittest.TestCase):
    def _generate(self, out_dir):
        subprocess.run([sys.executable, os.path.join(HERE, "make_fixture.py"),
                        "--out-dir", out_dir], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)

    @staticmethod
    def _files(root):
        found = []
        for sub in ("", "broken"):
            for n in sorted(os.listdir(os.path.join(root, sub))):
                if os.path.isfile(os.path.join(root, sub, n)):
                    found.append(os.path.join(sub, n))
        return found

    def test_generator_is_deterministic_and_fixtures_are_current(self):
        fixtures = os.path.join(ROOT, "test", "fixtures")
        golden_name = "tiny-gpt.golden.json"
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            self._generate(a)
            self._generate(b)
            names = self._files(a)
            # On one machine the generator is deterministic to the bit, goldens included.
            match, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
            self.assertEqual((mismatch, errors), ([], []), "two make_fixture.py runs differ")
            # Checkpoints, tokenizer files and checksums hold seeded weights and no computed
            # values, so they match the committed ones to the bit on any CPU.
            binary = [n for n in names if n != golden_name]
            match, mismatch, errors = filecmp.cmpfiles(a, fixtures, binary, shallow=False)
            self.assertEqual((mismatch, errors), ([], []),
                             "fixtures differ from a fresh make_fixture.py run")
            # The goldens hold computed logits: equal within the tolerance they state, token
            # ids exactly (make_fixture.py refuses cases whose greedy margin is not well
            # above that tolerance).
            with open(os.path.join(a, golden_name), encoding="utf-8") as f:
                fresh = json.load(f)
            with open(os.path.join(fixtures, golden_name), encoding="utf-8") as f:
                committed = json.load(f)
            tolerance = committed["float_tolerance"]
            for entry in committed["checkpoints"].values():
                for case in entry["cases"]:
                    self.assertGreaterEqual(case["min_margin"], 10 * tolerance, case["name"])
            assert_close_json(self, fresh, committed, tolerance)
            # TorchScript debug info (deflated *.debug_pkl members) records source file
            # names: an absolute path would tie the archives to the generating checkout.
            for n in names:
                path = os.path.join(a, n)
                if not zipfile.is_zipfile(path):
                    continue
                with zipfile.ZipFile(path) as z:
                    for member in z.namelist():
                        if "/data/" in member:  # tensors (corrupt.pt fails their CRC)
                            continue
                        self.assertFalse(ROOT.encode() in z.read(member),
                                         f"{n}:{member} embeds {ROOT}")

    def test_golden_file_shape(self):
        with open(os.path.join(ROOT, "test", "fixtures", "tiny-gpt.golden.json"), encoding="utf-8") as f:
            golden = json.load(f)
        tiny = golden["checkpoints"]["tiny-gpt.pt"]
        names = {c["name"] for c in tiny["cases"]}
        self.assertTrue({"ascii", "utf8", "one-token", "longer-than-context", "slides"} <= names)
        self.assertTrue(any(c["reprefills"] > 0 for c in tiny["cases"]))
        eos = golden["checkpoints"]["tiny-gpt-eos.pt"]["cases"]
        self.assertTrue(any(c["stopped_on_eos"] for c in eos))
        for c in tiny["cases"]:
            if c["prompt"] is not None:
                self.assertEqual(c["prompt_ids"], list(c["prompt"].encode("utf-8")))


class BrownTest(unittest.TestCase):
    def test_detokenize(self):
        line = ("``/`` Only/rb a/at handful/nn ''/'' ,/, the/at jury/nn said/vbd ;/. ;/. "
                "(/( (/( Bill/np )/) Shea/np of/in Atlanta/np Jr./np ./.")
        words = [brown.split_token(t)[0] for t in line.split()]
        self.assertEqual(brown.detokenize(words),
                         '"Only a handful", the jury said; (Bill) Shea of Atlanta Jr.')
        self.assertEqual(brown.split_token("1/2/cd"), ("1/2", "cd"))


if __name__ == "__main__":
    unittest.main()
