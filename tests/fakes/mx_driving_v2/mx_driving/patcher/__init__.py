"""Fake of the 2.0 `mx_driving.patcher`: `Patcher().add(...).apply()`.

As in the real 2.0 API, `apply()` installs the added patch classes for the rest of the process,
entering a Patcher applies it and exiting does nothing; `default_patcher` (global torch.matmul and
Tensor.__getitem__ patches) and the legacy 1.0 names are exported too. `CALLS` records, in order,
what was called, so tests can check that one empty Patcher was applied once and nothing else.
"""

CALLS: list[str] = []


class Patcher:
    def __init__(self, name="Patcher"):
        self.name = name
        self.patches = []
        CALLS.append(f"{name}()")

    def add(self, *patches):
        self.patches.extend(patches)
        CALLS.append(f"{self.name}.add({','.join(p.__name__ for p in patches)})")
        return self

    def apply(self):
        CALLS.append(f"{self.name}.apply({','.join(p.__name__ for p in self.patches)})")

    def __enter__(self):
        self.apply()
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        return None


class TensorIndex:
    """Stands for the global Tensor.__getitem__ patch of default_patcher."""


class BatchMatmul:
    """Stands for the global torch.matmul patch of default_patcher."""


default_patcher = Patcher("default_patcher").add(TensorIndex, BatchMatmul)
CALLS.clear()  # building default_patcher at import is not a use of it


class PatcherBuilder:
    """The legacy shim: builds a 2.0 Patcher."""

    def build(self, allow_internal_format=False):
        CALLS.append("PatcherBuilder.build")
        return Patcher("legacy")


default_patcher_builder = PatcherBuilder()
