"""Which network interface the collectives use, and its IPv4 address.

With one machine every process talks over loopback or shared memory and the interface matters little. With
two or more, HCCL and gloo would each pick a card themselves, and one the other node cannot reach fails link
set-up (gloo: "connectFullMesh failed"). So the launcher takes `--net_if` / DIT4DIT_NET_IF, or derives the
interface from the route to the main node (`ip route get MAIN_IP`), and says which it chose.
"""

from __future__ import annotations

import fcntl
import re
import shutil
import socket
import struct
import subprocess
from pathlib import Path

SYS_NET = Path("/sys/class/net")
_SIOCGIFADDR = 0x8915
_ROUTE_DEV = re.compile(r"\bdev\s+(\S+)")


def interfaces(sys_net: Path = SYS_NET) -> list[str]:
    return sorted(p.name for p in sys_net.iterdir()) if sys_net.is_dir() else []


def ipv4_address(name: str) -> str | None:
    """The interface's IPv4 address (the kernel's SIOCGIFADDR), or None when it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def route_interface(address: str) -> tuple[str | None, str]:
    """(the interface `ip route get ADDRESS` names, "") or (None, why there is none)."""
    exe = shutil.which("ip")
    if exe is None:
        return None, "`ip` (iproute2) is not installed"
    try:
        result = subprocess.run([exe, "route", "get", address], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"`ip route get {address}` failed: {err}"
    found = _ROUTE_DEV.search(result.stdout)
    if result.returncode != 0 or not found:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return None, f"`ip route get {address}` names no interface ({lines[-1] if lines else result.returncode})"
    return found.group(1), ""
