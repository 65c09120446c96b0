"""Export GPT weights (train_gpt.py, nanoGPT, Hugging Face GPT-2) to a serving checkpoint, then verify it.

    /usr/bin/python3 scripts/model/export_gpt.py SOURCE OUT.pt [--kind auto] [--tokenizer tokenizer.json] ...

A command over python/torchserve_node/export_gpt.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.export_gpt import main  # noqa: E402

sys.exit(main())
