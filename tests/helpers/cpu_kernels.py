"""One set of CPU kernels for every test process, so that exact floats (the golden losses) hold on any x86 machine.

torch, MKL and oneDNN each pick their kernels by the CPU's instruction sets: the same tiny run on an AVX-512
machine and on an AVX2 one differs in the last bits. Each library has a switch that caps its choice, read once,
when it loads; with all three at AVX2 an AVX-512 machine reproduces the AVX2 numbers bit for bit. Torch-free: it
must run before torch is imported. A value the user set is kept.
"""

from __future__ import annotations

import os
from pathlib import Path

AVX2_KERNELS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id (GenuineIntel, AuthenticAMD, ...), or "unknown" off Linux.

    MKL's reproducibility mode (MKL_CBWR) promises equal results across one vendor's processors; on another vendor's
    it takes other code paths, so the golden losses are kept per vendor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def has_avx2() -> bool:
    try:
        return any(line.startswith("flags") and " avx2" in line for line in Path("/proc/cpuinfo").read_text().splitlines())
    except OSError:  # not Linux: nothing to cap
        return False


def pin_avx2_kernels() -> None:
    """Cap torch, MKL and oneDNN at AVX2 in this process and the processes it starts (no-op without AVX2)."""
    if has_avx2():
        for name, value in AVX2_KERNELS.items():
            os.environ.setdefault(name, value)
