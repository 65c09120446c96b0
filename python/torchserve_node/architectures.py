"""The architecture table (architectures.json), shared by the exporters and the tests of the
native runtime's registry: one place says which architectures the checkpoint format has,
which Hugging Face architectures map onto each, and which have a native CPU runtime."""

import json
import os
from typing import Dict, List

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "architectures.json"),
          encoding="utf-8") as _f:
    ARCHITECTURES: Dict[str, dict] = json.load(_f)["architectures"]

# Hugging Face architecture (config.json "architectures"[0]) -> checkpoint architecture.
HUGGINGFACE: Dict[str, str] = {hf: name for name, entry in ARCHITECTURES.items()
                               for hf in entry["huggingface"]}

# Checkpoint architectures the addon runs natively on the CPU.
NATIVE: List[str] = sorted(name for name, entry in ARCHITECTURES.items() if entry["native"])
