"""Write a serving checkpoint's weights as GGUF, llama.cpp's format.

    /usr/bin/python3 scripts/model/export_gguf.py CKPT.pt OUT.gguf [--dtype f32|f16] [--vocabulary tokenizer|ids]

A command over python/torchserve_node/export_gguf.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.export_gguf import main  # noqa: E402

sys.exit(main())
