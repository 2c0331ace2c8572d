"""Fake of the 2.0 `mx_driving.patcher`: `Patcher().add(...).disable(...).apply()`.

As in the real 2.0 API (26.2.0.post2 wheel), patches are classes with a `name`; `disable` takes
names or classes; `apply()` installs the enabled ones for the rest of the process, entering a
Patcher applies it and exiting does nothing. `default_patcher` holds the global torch patches
(TensorIndex, BatchMatmul) and stand-ins for the mmcv / numpy ones; the legacy 1.0 names are
exported too. Like the real one, it collects each Patch's atomic patches (`_collect_all_patches()`: (patch,
Patch name) pairs) and marks those whose module imports `is_applied`. `CALLS` records, in order, what was called. FAKE_MX_DRIVING_APPLY_ERROR=1 makes
apply() raise, as a patch that meets an incompatible library would.
"""

import importlib.util
import os

CALLS: list[str] = []


class Patch:
    name = "patch"
    module = ""  # what its atomic patch targets


class AtomicPatch:
    def __init__(self, module):
        self.module = module
        self.is_applied = False


class MultiScaleDeformableAttention(Patch):
    name, module = "multi_scale_deformable_attention", "mmcv"


class NumpyCompat(Patch):
    name, module = "numpy_compat", "numpy"


class TensorIndex(Patch):
    """Stands for the global Tensor.__getitem__ patch."""

    name, module = "tensor_index", "torch"


class BatchMatmul(Patch):
    """Stands for the global torch.matmul patch."""

    name, module = "batch_matmul", "torch"


class Patcher:
    def __init__(self, name="Patcher"):
        self.name = name
        self.patches = []
        self.blacklist = set()
        self.collected = None
        CALLS.append(f"{name}()")

    def add(self, *patches):
        self.patches.extend(patches)
        CALLS.append(f"{self.name}.add({','.join(p.__name__ for p in patches)})")
        return self

    def disable(self, *names):
        names = [n if isinstance(n, str) else n.name for n in names]
        self.blacklist.update(names)
        CALLS.append(f"{self.name}.disable({','.join(names)})")
        return self

    def apply(self):
        if os.environ.get("FAKE_MX_DRIVING_APPLY_ERROR") == "1":
            raise RuntimeError("fake patch failure")
        enabled = [p.__name__ for p in self.patches if p.name not in self.blacklist]
        CALLS.append(f"{self.name}.apply({','.join(enabled)})")
        for atomic, _ in self._collect_all_patches():
            atomic.is_applied = importlib.util.find_spec(atomic.module) is not None
        return self

    def _collect_all_patches(self):
        if self.collected is None:
            self.collected = [(AtomicPatch(p.module), p.name) for p in self.patches if p.name not in self.blacklist]
        return self.collected

    def __enter__(self):
        return self.apply()

    def __exit__(self, exc_type, exc_value, traceback):
        return None


default_patcher = Patcher("default_patcher").add(MultiScaleDeformableAttention, NumpyCompat, TensorIndex, BatchMatmul)
CALLS.clear()  # building default_patcher at import is not a use of it


class PatcherBuilder:
    """The legacy shim: builds a 2.0 Patcher."""

    def build(self, allow_internal_format=False):
        CALLS.append("PatcherBuilder.build")
        return Patcher("legacy")


default_patcher_builder = PatcherBuilder()
