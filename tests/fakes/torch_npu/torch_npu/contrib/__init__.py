"""Fake of `torch_npu.contrib` (see the package docstring)."""
