"""Mean KL divergence, top-1 and greedy agreement of quantized weights against the float model.

    /usr/bin/python3 scripts/model/quant_accuracy.py CKPT.pt [--schemes q8_0,q4_0,q4_k_m,q5_k_m] [--prompts 8]

A command over python/torchserve_node/quant_accuracy.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.quant_accuracy import main  # noqa: E402

sys.exit(main())
