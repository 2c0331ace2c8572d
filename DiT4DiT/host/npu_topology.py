"""What NPUs this host has: devices, A2 or A3, and HBM use, read from `npu-smi info`.

Standard library only, so the launcher, the doctor and the trainer (which places its side processes) can call it
before CANN is sourced (with torch_npu installed, `import torch` itself fails until then).

`npu-smi info` prints a box-drawn table with one pair of rows per device: an NPU row
`| <npu> <name> | <health> | <power> <temp> <hugepages> |` followed by a chip row
`| <chip> [<phy-id>] | <bus-id> | <aicore> <mem used> / <mem total> [<hbm used> / <hbm total>] |`.
On an Atlas 800T A3 node every NPU (card) has two chips, and each chip is one torch_npu device, so a node
shows 16 devices; an A2 node shows one chip per NPU, 8 in all. The chip name cannot tell A2 from A3
(a 910B3 sits in A2 servers), the chips-per-NPU count can; `--soc` / DIT4DIT_SOC overrides it.

    python -m DiT4DiT.host.npu_topology            # human-readable table
    python -m DiT4DiT.host.npu_topology --summary  # "<visible> <total> <soc>", e.g. "16 16 a3" or "0 0 none"
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass

from DiT4DiT.errors import UsageError, run_main

SOCS = ("a2", "a3")
SOC_ENV = "DIT4DIT_SOC"

_NPU_ROW = re.compile(r"^\s*(\d+)\s+(\S*[A-Za-z]\S*)\s*$")
_CHIP_FIRST_CELL = re.compile(r"^\s*(\d+)(?:\s+(\d+))?\s*$")
_BUS_ID = re.compile(r"^\s*[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s*$")
_USED_TOTAL = re.compile(r"(\d+)\s*/\s*(\d+)")


@dataclass(frozen=True)
class Chip:
    npu: int
    chip: int
    phy_id: int | None
    name: str
    health: str
    hbm_used_mb: int | None
    hbm_total_mb: int | None

    @property
    def hbm_free_mb(self) -> int | None:
        if self.hbm_used_mb is None or self.hbm_total_mb is None:
            return None
        return self.hbm_total_mb - self.hbm_used_mb


@dataclass(frozen=True)
class Topology:
    chips: tuple[Chip, ...]  # every device in table order; the index is the logical device ID
    visible: tuple[Chip, ...]  # what torch_npu will see after ASCEND_RT_VISIBLE_DEVICES
    soc: str  # "a2" or "a3"
    soc_source: str  # "detected" or where the override came from


def parse_npu_smi(text: str) -> list[Chip]:
    """Every device (chip) row of `npu-smi info`, in table order. Process-table rows are not devices."""
    chips: list[Chip] = []
    current: tuple[int, str, str] | None = None  # (npu, name, health) of the last NPU row
    for line in text.splitlines():
        cells = line.strip().strip("|").split("|")
        if len(cells) < 3:
            continue
        npu_row = _NPU_ROW.match(cells[0])
        if npu_row and not _BUS_ID.match(cells[1]) and cells[1].strip():
            current = (int(npu_row.group(1)), npu_row.group(2), cells[1].strip())
            continue
        chip_row = _CHIP_FIRST_CELL.match(cells[0])
        if chip_row and _BUS_ID.match(cells[1]) and current is not None:
            pairs = _USED_TOTAL.findall(cells[2])
            # Training cards report "<ddr used> / <ddr total>  <hbm used> / <hbm total>"; HBM is the last pair.
            used, total = (int(pairs[-1][0]), int(pairs[-1][1])) if len(pairs) >= 2 else (None, None)
            phy = chip_row.group(2)
            chips.append(
                Chip(
                    npu=current[0],
                    chip=int(chip_row.group(1)),
                    phy_id=int(phy) if phy is not None else None,
                    name=current[1],
                    health=current[2],
                    hbm_used_mb=used,
                    hbm_total_mb=total,
                )
            )
            current = None
    return chips


@dataclass(frozen=True)
class NpuProcess:
    npu: int
    chip: int
    pid: int
    name: str
    memory_mb: int | None


def parse_npu_processes(text: str) -> list[NpuProcess]:
    """The process table of `npu-smi info`: `| <npu> <chip> | <pid> | <name> | <memory MB> |` rows."""
    processes = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4:
            continue
        ids, pid = cells[0].split(), cells[1]
        if len(ids) == 2 and all(i.isdigit() for i in ids) and pid.isdigit():
            memory = cells[3] if cells[3].isdigit() else None
            processes.append(NpuProcess(int(ids[0]), int(ids[1]), int(pid), cells[2], int(memory) if memory else None))
    return processes


def detect_soc(chips: list[Chip] | tuple[Chip, ...]) -> str:
    """A3 when some NPU carries two chips (two dies per card), else A2."""
    per_npu = Counter(c.npu for c in chips)
    return "a3" if per_npu and max(per_npu.values()) >= 2 else "a2"


def visible_ids(count: int, env_value: str | None) -> list[int]:
    """Logical device IDs left by ASCEND_RT_VISIBLE_DEVICES.

    Like the runtime: IDs must ascend; parsing stops at the first invalid, out-of-range or non-ascending ID.
    """
    if env_value is None:
        return list(range(count))
    ids: list[int] = []
    for token in env_value.split(","):
        token = token.strip()
        if not token.isdigit():
            break
        value = int(token)
        if value >= count or (ids and value <= ids[-1]):
            break
        ids.append(value)
    return ids


def run_npu_smi() -> str | None:
    """`npu-smi info` output, or None when the tool is missing or fails (no driver, no device)."""
    exe = shutil.which("npu-smi")
    if exe is None:
        return None
    try:
        result = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def soc_override(cli_value: str | None) -> tuple[str | None, str]:
    """The user's A2/A3 choice (command line first, then DIT4DIT_SOC), with where it came from."""
    for value, source in ((cli_value, "--soc"), (os.environ.get(SOC_ENV) or None, SOC_ENV)):
        if value is None:
            continue
        value = value.lower()
        if value not in SOCS:
            raise UsageError(f"{source}={value!r}: expected one of {', '.join(SOCS)}")
        return value, source
    return None, "detected"


def read_topology(soc: str | None = None, text: str | None = None) -> Topology | None:
    """The host's NPU topology, or None when npu-smi is absent or lists no device."""
    text = run_npu_smi() if text is None else text
    chips = parse_npu_smi(text) if text else []
    if not chips:
        return None
    override, source = soc_override(soc)
    ids = visible_ids(len(chips), os.environ.get("ASCEND_RT_VISIBLE_DEVICES"))
    return Topology(
        chips=tuple(chips),
        visible=tuple(chips[i] for i in ids),
        soc=override or detect_soc(chips),
        soc_source=source,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="NPU devices and A2/A3 kind, from `npu-smi info`.")
    parser.add_argument("--soc", choices=SOCS, help=f"override the A2/A3 detection (also: {SOC_ENV})")
    parser.add_argument("--summary", action="store_true", help='print "<visible> <total> <soc>" for scripts')
    args = parser.parse_args(argv)
    return run_main(lambda: show(read_topology(args.soc), args.summary))


def show(topo: Topology | None, summary: bool) -> None:
    if summary:
        print("0 0 none" if topo is None else f"{len(topo.visible)} {len(topo.chips)} {topo.soc}")
        return
    if topo is None:
        print("no NPU found: npu-smi is not on PATH, failed, or lists no device")
        return
    print(f"{len(topo.chips)} devices, {len(topo.visible)} visible, {topo.soc.upper()} ({topo.soc_source})")
    for index, chip in enumerate(topo.chips):
        mark = "visible" if chip in topo.visible else "hidden"
        hbm = f"{chip.hbm_used_mb}/{chip.hbm_total_mb} MB HBM" if chip.hbm_total_mb else "HBM n/a"
        print(f"  device {index:2d}: NPU {chip.npu} chip {chip.chip} {chip.name} {chip.health} {hbm} {mark}")


if __name__ == "__main__":
    raise SystemExit(main())
