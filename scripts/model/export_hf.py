"""Export a Hugging Face model directory (safetensors) to a serving checkpoint, then verify it.

    /usr/bin/python3 scripts/model/export_hf.py HF_DIR OUT.pt [--dtype float32|bfloat16|float16|q8_0|q4_0|q4_k_m|q5_k_m] [--context N]

A command over python/torchserve_node/export_hf.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.export_hf import main  # noqa: E402

sys.exit(main())
