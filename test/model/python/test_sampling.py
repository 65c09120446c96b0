"""Unit tests of reference.py's sampling controls and of the committed sampling goldens
(make_sampling_golden.py): run by `npm test` through test/model/python.test.ts."""

import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [HERE, os.path.join(ROOT, "python")]

import torch  # noqa: E402
import make_sampling_golden  # noqa: E402
from torchserve_node import export_gpt, reference  # noqa: E402
from torchserve_node.reference import SamplingSettings  # noqa: E402


class SamplingControlsTest(unittest.TestCase):
    def test_penalties_by_their_definitions(self):
        logits = torch.tensor([2.0, -1.0, 0.5, 3.0])
        s = SamplingSettings(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
        got = reference.penalise(logits, s, prompt=[0], generated=[1, 1, 3])
        # token 0: prompt only -> 2/2; token 1: 2 generated -> -1*2 - (2*0.5 + 0.25);
        # token 2: untouched; token 3: 1 generated -> 3/2 - (0.5 + 0.25).
        torch.testing.assert_close(got, torch.tensor([1.0, -3.25, 0.5, 0.75]))

    def test_filters_at_their_limits_keep_the_most_likely(self):
        logits = torch.tensor([0.1, 2.0, 1.9, -1.0])
        for s in (SamplingSettings(temperature=1.0, top_p=1e-9), SamplingSettings(temperature=1.0, min_p=1.0),
                  SamplingSettings(temperature=1.0, top_k=1)):
            probs = reference.filtered_probs(logits, s)
            self.assertEqual(torch.nonzero(probs).flatten().tolist(), [1], s)
            self.assertAlmostEqual(float(probs.sum()), 1.0, places=9)

    def test_top_p_keeps_the_smallest_set_reaching_it(self):
        logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
        probs = reference.filtered_probs(logits, SamplingSettings(temperature=1.0, top_p=0.7))
        self.assertEqual(torch.nonzero(probs).flatten().tolist(), [0, 1])
        torch.testing.assert_close(probs[:2], torch.tensor([0.625, 0.375], dtype=torch.float64))

    def test_committed_goldens_are_current(self):
        committed_path = os.path.join(ROOT, "test", "fixtures", "tiny-gpt.sampling.golden.json")
        with open(committed_path, encoding="utf-8") as f:
            committed = json.load(f)
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "golden.json")
            make_sampling_golden.main(["--out", out])
            with open(out, encoding="utf-8") as f:
                fresh = json.load(f)
        tol = committed["float_tolerance"]
        self.assertEqual([c["output_ids"] for c in fresh["penalised"]], [c["output_ids"] for c in committed["penalised"]])
        self.assertEqual([c["kept_ids"] for c in fresh["filters"]], [c["kept_ids"] for c in committed["filters"]])
        for a, b in zip(fresh["logprobs"], committed["logprobs"]):
            self.assertEqual(a["output_ids"], b["output_ids"])
            for x, y in zip(a["entries"], b["entries"]):
                self.assertAlmostEqual(x["logprob"], y["logprob"], delta=tol)
                self.assertEqual([v for v, _ in x["top"]], [v for v, _ in y["top"]])

    def test_export_rejects_a_tokenizer_config_that_is_not_an_object(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "tokenizer_config.json")
            with open(path, "w", encoding="utf-8") as f:
                f.write("[1, 2]")
            with self.assertRaisesRegex(export_gpt.ExportError, "JSON object"):
                export_gpt.read_tokenizer_config(path)


if __name__ == "__main__":
    unittest.main()
