"""GPT variants that break the serving interface, for test/fixtures/broken (make_fixture.py).

They live in their own module, imported by make_fixture.py through `_load_relative`, so that
TorchScript records the repo-relative file name `test/model/python/fixture_models.py` in the
archives' debug info. Defined in make_fixture.py itself, the scripted `interface_version`
carried the path the generator was started with (`/work/<checkout>/...` when run by the unit
test), so bad-version.pt differed from checkout to checkout.
"""

import torch

from torchserve_node import gpt


class NoCacheShapeGPT(gpt.GPT):
    def cache_shape(self, batch_size: int):   # not exported: absent from the archive
        return super().cache_shape(batch_size)


class BadVersionGPT(gpt.GPT):
    @torch.jit.export
    def interface_version(self) -> int:
        return 99
