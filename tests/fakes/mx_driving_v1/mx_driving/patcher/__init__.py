"""Fake of the 1.0 `mx_driving.patcher`: `PatcherBuilder` builds a `Patcher` context manager.

As in the real 1.0 API, `Patcher` has no `add`; entering a patcher applies its module patches
except the disabled ones (the real one also sets `torch.npu.config.allow_internal_format`), and
exiting does nothing; a patch whose module does not import is skipped, and each applied one is marked
`is_applied`, as in the real one. `default_patcher_builder` holds the default patches by their 1.0 names: the
global torch ones (`index`, `batch_matmul`) and stand-ins for the mmcv / numpy ones. `CALLS`
records, in order, what was called. FAKE_MX_DRIVING_APPLY_ERROR=1 makes apply() raise, as a
patch that meets an incompatible library would.
"""

import importlib.util
import os

CALLS: list[str] = []


class Patch:
    def __init__(self, func, options=None, priority=0):
        self.func = func
        self.name = func.__name__
        self.options = options or {}
        self.priority = priority
        self.is_applied = False


class Patcher:
    def __init__(self, module_patches, blacklist, allow_internal_format=False):
        self.module_patches = module_patches
        self.blacklist = blacklist

    def apply(self):
        if os.environ.get("FAKE_MX_DRIVING_APPLY_ERROR") == "1":
            raise RuntimeError("fake patch failure")
        names = [p.name for patches in self.module_patches.values() for p in patches if p.name not in self.blacklist]
        CALLS.append(f"apply({','.join(names)})")
        for module, patches in self.module_patches.items():
            for patch in patches:
                patch.is_applied = patch.name in names and importlib.util.find_spec(module) is not None

    def __enter__(self):
        CALLS.append("enter")
        self.apply()

    def __exit__(self, exc_type, exc_value, traceback):
        CALLS.append("exit" if exc_type is None else f"exit({exc_type.__name__})")


class PatcherBuilder:
    def __init__(self, name="PatcherBuilder"):
        self.name = name
        self.module_patches = {}
        self.blacklist = set()

    def add_module_patch(self, module_name, *patches):
        self.module_patches.setdefault(module_name, []).extend(patches)
        return self

    def disable_patches(self, *patch_names):
        CALLS.append(f"{self.name}.disable_patches({','.join(patch_names)})")
        self.blacklist.update(patch_names)
        return self

    def build(self, allow_internal_format=False):
        CALLS.append(f"{self.name}.build")
        return Patcher(self.module_patches, self.blacklist, allow_internal_format)


def msda(module, options):
    """Stands for the mmcv MultiScaleDeformableAttention patch."""


def numpy_type(module, options):
    """Stands for the numpy alias patch."""


def index(module, options):
    """Stands for the global torch indexing patch."""


def batch_matmul(module, options):
    """Stands for the global torch.matmul patch."""


default_patcher_builder = (
    PatcherBuilder("default_patcher_builder")
    .add_module_patch("mmcv", Patch(msda))
    .add_module_patch("numpy", Patch(numpy_type))
    .add_module_patch("torch", Patch(index), Patch(batch_matmul))
)
