"""Fake of the 1.0 `mx_driving.patcher`: `PatcherBuilder` builds a `Patcher` context manager.

As in the real 1.0 API, entering a patcher applies its module patches (the real one also sets
`torch.npu.config.allow_internal_format`) and exiting does nothing. `CALLS` records, in order,
what was called, so tests can check that the patcher was entered and exited exactly once and
that `default_patcher_builder` (mmcv/mmdet and global torch patches) was not used.
"""

CALLS: list[str] = []


class Patch:
    def __init__(self, func, options=None, priority=0):
        self.func = func
        self.name = func.__name__
        self.options = options or {}
        self.priority = priority


class Patcher:
    def __init__(self, module_patches, blacklist, allow_internal_format=False):
        self.module_patches = module_patches
        self.blacklist = blacklist

    def apply(self):
        names = [patch.name for patches in self.module_patches.values() for patch in patches]
        CALLS.append(f"apply({','.join(names)})")

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
        self.blacklist.update(patch_names)
        return self

    def build(self, allow_internal_format=False):
        CALLS.append(f"{self.name}.build")
        return Patcher(self.module_patches, self.blacklist, allow_internal_format)


def _global_torch_patch(module, options):
    """Stands for the default builder's torch index / batch_matmul patches."""


default_patcher_builder = PatcherBuilder("default_patcher_builder").add_module_patch(
    "torch", Patch(_global_torch_patch)
)
