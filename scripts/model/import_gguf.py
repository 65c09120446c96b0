"""Import a GGUF file (llama.cpp) as a serving checkpoint.

    /usr/bin/python3 scripts/model/import_gguf.py MODEL.gguf OUT.pt [--context N]

A command over python/torchserve_node/import_gguf.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.import_gguf import main  # noqa: E402

sys.exit(main())
