"""A randomly initialised checkpoint with the demo model's shape, for developing and
smoke-testing the benchmarks before (or without) the trained models/brown-gpt.pt.

    /usr/bin/python3 scripts/bench/random_demo_model.py [--out .cache/bench/random-gpt.pt]

Same architecture as models/brown-gpt.pt (4 layers, d=256, 4 heads, context 512, byte
vocabulary), so step costs match; only the weights (and so the text) differ. Written
through python/torchserve_node/export_gpt.py, which verifies the export and writes the .sha256.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from torchserve_node.export_gpt import export_file  # noqa: E402
from torchserve_node.gpt import GPT, GPTConfig  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, ".cache", "bench", "random-gpt.pt"))
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    cfg = GPTConfig(vocab_size=259, block_size=512, n_layer=4, n_head=4, n_embd=256)
    model = GPT(cfg)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = os.path.join(tmp, "random.train.pt")
        torch.save({"model": model.state_dict(), "config": cfg.to_dict()}, source)
        export_file("trainer", source, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
