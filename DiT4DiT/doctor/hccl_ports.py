"""Whether HCCL's host ports are kept out of the kernel's ephemeral ports.

HCCL communicators built from root info listen on host ports from HCCL_IF_BASE_PORT (default 60000) upwards; CANN
asks for 60000-60031 to be reserved (CANN 9.0 environment-variable reference, envref_07_0074), because Linux's
ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by default) overlaps them: any outgoing connection (a
data loader's, an upload, a mount) may hold one of them when a communicator starts, and the job fails at start-up
now and then. `sysctl -w net.ipv4.ip_local_reserved_ports=60000-60031` reserves them (until reboot; a line in
/etc/sysctl.conf keeps it).
"""

from __future__ import annotations

from pathlib import Path

SYSCTL = Path("/proc/sys/net/ipv4")
HCCL_PORTS = 32  # 60000-60031, the range CANN asks to reserve
DEFAULT_BASE = 60000


def reserved_ranges(text: str) -> list[tuple[int, int]]:
    """ip_local_reserved_ports: "60000-60031,8080" -> [(60000, 60031), (8080, 8080)]."""
    ranges = []
    for item in text.strip().split(","):
        low, _, high = item.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            ranges.append((int(low), int(high or low)))
    return ranges


def exposed_ports(base: int, reserved: str, ephemeral: str) -> list[int]:
    """HCCL's ports (base .. base + 31) the kernel may hand out: inside ip_local_port_range ("low<tab>high") and
    not in ip_local_reserved_ports."""
    low, high = (int(v) for v in ephemeral.split())
    kept = reserved_ranges(reserved)
    return [port for port in range(base, base + HCCL_PORTS)
            if low <= port <= high and not any(first <= port <= last for first, last in kept)]


def port_check(env: dict[str, str], sysctl: Path = SYSCTL) -> tuple[str, str, str]:
    """(status, detail, fix) for the doctor: WARN with the sysctl line when some of HCCL's ports are exposed."""
    value = env.get("HCCL_IF_BASE_PORT", str(DEFAULT_BASE))
    base = int(value) if value.isdigit() else DEFAULT_BASE
    span = f"{base}-{base + HCCL_PORTS - 1}"
    try:
        reserved = (sysctl / "ip_local_reserved_ports").read_text()
        ephemeral = (sysctl / "ip_local_port_range").read_text()
    except OSError as error:
        return "SKIP", f"cannot read {sysctl}'s port settings ({error.strerror})", ""
    exposed = exposed_ports(base, reserved, ephemeral)
    ephemeral_span = "-".join(ephemeral.split())
    if not exposed:
        return "PASS", f"HCCL's host ports {span} are reserved or outside the ephemeral range ({ephemeral_span})", ""
    return ("WARN", f"{len(exposed)} of HCCL's host ports {span} are in the ephemeral range ({ephemeral_span}) and "
            "not reserved: an outgoing connection may take one as a communicator starts (a sporadic start-up failure)",
            f"sysctl -w net.ipv4.ip_local_reserved_ports={span} (as root; add it to /etc/sysctl.conf to keep it)")
