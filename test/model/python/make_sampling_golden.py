"""Goldens of the sampling controls on the committed tiny fixture (one command):

    /usr/bin/python3 test/model/python/make_sampling_golden.py [--out test/fixtures/tiny-gpt.sampling.golden.json]

Reads test/fixtures/tiny-gpt.pt (written by make_fixture.py) and writes, from reference.py:
  penalised   greedy continuations under repetition/presence/frequency penalties (exact
              token goldens: every case's smallest top-1 minus top-2 penalised logit is at
              least MARGIN, far above cross-CPU float differences)
  logprobs    raw log-probabilities of a greedy continuation and its top alternatives
              (compared within FLOAT_TOLERANCE)
  filters     the tokens top-k, top-p and min-p keep at the first step, with settings
              placed midway between two kept-set sizes (no token near a threshold): any
              token an engine samples under them must be in the set. Sampled tokens are
              not compared, since the engines' random streams differ from torch's.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
from torchserve_node import reference  # noqa: E402
from torchserve_node.reference import SamplingSettings  # noqa: E402

FLOAT_TOLERANCE = 1e-4
MARGIN = 10 * FLOAT_TOLERANCE
MAX_NEW = 20

PENALISED = [
    ("repetition", "aaaa", dict(repetition_penalty=1.8)),
    ("frequency", "Hello there", dict(frequency_penalty=1.5)),
    ("presence", "aaaa", dict(presence_penalty=1.5)),
    ("combined", "Hello there", dict(repetition_penalty=1.3, frequency_penalty=0.7, presence_penalty=0.4)),
    ("negative", "The ", dict(frequency_penalty=-0.5, presence_penalty=-0.5)),
    ("strong-repetition", "xyz xyz", dict(repetition_penalty=3.0)),
]
FILTER_PROMPTS = ["Hello", "The ", "q"]


def penalised_cases(ckpt):
    cases = []
    for name, prompt, settings in PENALISED:
        ids = ckpt.encode(prompt)
        trace = []
        out = reference.generate(ckpt, [ids], MAX_NEW, trace=trace, sampling=SamplingSettings(**settings))[0]
        margin = trace[0]["min_margin"]
        if margin < MARGIN:
            print(f"  skipped {name}: margin {margin:.2e} < {MARGIN:.0e}", file=sys.stderr)
            continue
        cases.append({"name": name, "prompt": prompt, "settings": settings, "max_new_tokens": MAX_NEW,
                      "output_ids": out, "min_margin": round(margin, 6)})
    if len(cases) < 4:
        raise SystemExit("fewer than 4 penalised cases have a safe margin")
    return cases


def logprob_cases(ckpt):
    cases = []
    for prompt in ["Hello", "héllo"]:
        entries, trace = [], []
        out = reference.generate(ckpt, [ckpt.encode(prompt)], 8, trace=trace, logprobs=entries,
                                 sampling=SamplingSettings(logprobs=5))[0]
        if trace[0]["min_margin"] < MARGIN:
            raise SystemExit(f"logprobs case {prompt!r}: greedy margin too small")
        cases.append({"prompt": prompt, "top": 5, "output_ids": out,
                      "entries": [{"token": e["token"], "logprob": round(e["logprob"], 6),
                                   "top": [[v, round(lp, 6)] for v, lp in e["top"]]} for e in entries[0]]})
    return cases


@torch.no_grad()
def filter_cases(ckpt):
    """For each prompt: the first step's distribution; top_k/top_p/min_p set midway so
    exactly 3 tokens are kept, and the kept ids."""
    cases = []
    for prompt in FILTER_PROMPTS:
        first = []
        reference.generate(ckpt, [ckpt.encode(prompt)], 1, first_logits=first)
        logits = first[0]
        probs = torch.softmax(logits.double(), dim=-1)
        order = sorted(range(probs.numel()), key=lambda v: (-float(probs[v]), v))
        p = [float(probs[v]) for v in order]
        cum = [sum(p[:i + 1]) for i in range(len(p))]
        kept = sorted(order[:3])
        # top_p midway between the cumulative mass of 2 and of 3 tokens keeps 3; min_p midway
        # between the 3rd's and the 4th's ratio to the first keeps 3.
        for name, settings, gap in [
            ("top_k", dict(top_k=3), float(logits[order[2]] - logits[order[3]])),
            ("top_p", dict(top_p=(cum[1] + cum[2]) / 2), (cum[2] - cum[1]) / 2),
            ("min_p", dict(min_p=(p[2] + p[3]) / 2 / p[0]), (p[2] - p[3]) / 2 / p[0]),
        ]:
            s = SamplingSettings(temperature=1.0, **settings)
            got = sorted(int(v) for v in torch.nonzero(reference.filtered_probs(logits, s)).flatten())
            assert got == kept, (prompt, name, got, kept)
            if gap < MARGIN:
                print(f"  skipped {name} on {prompt!r}: gap {gap:.2e}", file=sys.stderr)
                continue
            cases.append({"prompt": prompt, "filter": name, "settings": {**settings, "temperature": 1.0},
                          "kept_ids": kept, "gap": round(gap, 6)})
    return cases


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "test", "fixtures", "tiny-gpt.sampling.golden.json"))
    args = ap.parse_args(argv)
    ckpt = reference.load(os.path.join(ROOT, "test", "fixtures", "tiny-gpt.pt"))
    golden = {
        "about": "Sampling-control goldens from python/torchserve_node/reference.py on tiny-gpt.pt "
                 "(regenerate with test/model/python/make_sampling_golden.py). Tokens compare exactly "
                 "(every margin >= 10x float_tolerance); log-probabilities within float_tolerance.",
        "float_tolerance": FLOAT_TOLERANCE,
        "penalised": penalised_cases(ckpt),
        "logprobs": logprob_cases(ckpt),
        "filters": filter_cases(ckpt),
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(golden, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}: {len(golden['penalised'])} penalised, {len(golden['logprobs'])} logprobs, "
          f"{len(golden['filters'])} filter cases")


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
