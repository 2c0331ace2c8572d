"""The NPU network (RoCE ports the collectives between nodes use), per device, from Huawei's `hccn_tool`.

    hccn_tool -i N -link -g        link status: UP | DOWN
    hccn_tool -i N -ip -g          ipaddr:29.0.0.1 / netmask:255.255.255.0   (nothing when no address is set)
    hccn_tool -i N -net_health -g  net health status: Success | Init | Socket fail | Receive timeout | ...

A port that is DOWN, has no address or is not healthy makes a multi-node job fail at link set-up; on one node
the collectives run over HCCS and do not use these ports.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

DRIVER_TOOL = Path("/usr/local/Ascend/driver/tools/hccn_tool")
_FIELD = re.compile(r"^\s*([a-z ]+?)\s*:\s*(\S.*?)\s*$", re.M)


@dataclass(frozen=True)
class Port:
    device: int
    link: str | None  # "UP", "DOWN"; None when the query failed
    ip: str | None
    health: str | None  # "Success" when healthy

    def problems(self) -> list[str]:
        found = []
        if self.link != "UP":
            found.append(f"link {self.link or 'unknown'}")
        if not self.ip:
            found.append("no IP address")
        if self.health != "Success":
            found.append(f"net health {self.health or 'unknown'}")
        return found


def hccn_tool() -> str | None:
    found = shutil.which("hccn_tool")
    return found or (str(DRIVER_TOOL) if DRIVER_TOOL.is_file() else None)


def fields(text: str) -> dict[str, str]:
    """`name: value` / `name:value` lines of hccn_tool's output."""
    return {m.group(1).strip(): m.group(2) for m in _FIELD.finditer(text)}


def query(tool: str, device: int, what: str) -> dict[str, str]:
    try:
        result = subprocess.run([tool, "-i", str(device), f"-{what}", "-g"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return fields(result.stdout) if result.returncode == 0 else {}


def read_port(tool: str, device: int) -> Port:
    return Port(device, query(tool, device, "link").get("link status"), query(tool, device, "ip").get("ipaddr"),
                query(tool, device, "net_health").get("net health status"))
