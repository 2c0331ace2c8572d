"""launch/network.py: the interfaces this host has, an interface's IPv4 address, and the one the route to the main
node takes."""

from __future__ import annotations

from DiT4DiT.launch.network import interfaces, ipv4_address, route_interface


def test_interfaces_are_the_sys_class_net_entries_in_order(tmp_path):
    for name in ("eth1", "eth0", "lo"):
        (tmp_path / name).mkdir()
    assert interfaces(tmp_path) == ["eth0", "eth1", "lo"]
    assert interfaces(tmp_path / "missing") == []


def test_loopback_has_its_address_and_an_unknown_interface_none():
    assert ipv4_address("lo") == "127.0.0.1"
    assert ipv4_address("no-such-if0") is None


def test_the_route_to_loopback_goes_through_lo_or_says_why_not():
    name, why = route_interface("127.0.0.1")
    assert (name, why) == ("lo", "") or (name is None and why)
