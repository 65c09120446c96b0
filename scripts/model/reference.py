"""Generate from a serving checkpoint with the plain Python reference loop.

    /usr/bin/python3 scripts/model/reference.py CKPT.pt --prompt TEXT [--max-new-tokens N] [--temperature T --top-k K --seed S]

A command over python/torchserve_node/reference.py, which documents it (--help lists the options).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from torchserve_node.reference import main  # noqa: E402

sys.exit(main())
