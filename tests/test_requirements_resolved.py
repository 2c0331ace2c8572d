"""requirements-resolved.json, the resolver's record, still describes the requirement files as they are: every pin
resolved by uv at exactly its version for Python 3.10 and 3.11 on aarch64 and x86_64, admitted by the Python of
each target, with a wheel; and the Ascend file's protobuf/wandb conflict solved. Offline: the record is read, the
resolver (scripts/resolve_requirements.py --write-record, needs the index) wrote it."""

import hashlib
import json
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from DiT4DiT.doctor.requirement_pins import read_pins

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "requirements-resolved.json"
FILES = ("requirements.txt", "requirements-npu.txt")
TARGETS = [(machine, python) for machine in ("aarch64", "x86_64") for python in ("3.10", "3.11")]


def record() -> dict:
    return json.loads(RECORD.read_text())


def staleness(record: dict, requirements: Path) -> str | None:
    """Why the record does not describe this file as it is now, or None."""
    fix = f"regenerate it: {record['regenerate']}"
    entry = record["files"].get(requirements.name)
    if entry is None:
        return f"{RECORD.name} has no record of {requirements.name}: {fix}"
    if entry["sha256"] != hashlib.sha256(requirements.read_bytes()).hexdigest():
        return f"{RECORD.name} was made from another {requirements.name}: {fix}"
    missing = {f"{machine}-py{python}" for machine, python in TARGETS} - entry["targets"].keys()
    return f"{RECORD.name} lacks {requirements.name} for {sorted(missing)}: {fix}" if missing else None


def pin_problems(record: dict, requirements: Path, machine: str, python: str) -> list[str]:
    """Each pin (markers evaluated for the target): resolved at its version, Requires-Python admits the target's
    Python, a wheel for the target; pins the resolver left out are named with the reason in the record."""
    target = record["files"][requirements.name]["targets"][f"{machine}-py{python}"]
    where = f"{requirements.name} on {machine}, Python {python}"
    pins = read_pins(requirements, machine, python)
    problems = [f"{where}: {name} is left out but not pinned" for name in target["left_out"].keys() - pins.keys()]
    for name, version in pins.items():
        left_out = name in target["left_out"]
        chosen = target["resolved"].get(name)
        if not left_out and chosen != version.split("+")[0]:  # a +cpu build is resolved as its PyPI twin
            problems.append(f"{where}: {name}=={version} is pinned, the resolver chose {chosen or 'nothing'}")
        index = target["pins"].get(name, {})
        if index.get("version") != version:
            problems.append(f"{where}: the record has no index metadata for {name}=={version}")
            continue
        if python not in SpecifierSet(index["requires_python"]):
            problems.append(f"{where}: {name}=={version} needs Python {index['requires_python']}")
        if not index["wheel"] and not left_out:
            problems.append(f"{where}: {name}=={version} has no wheel for {target['platform']}")
    return problems


def conflict_problems(record: dict, requirements: Path) -> list[str]:
    """CANN's protobuf 3.20.x and the wandb that accepts it, resolved together on every target."""
    problems = []
    for machine, python in TARGETS:
        pins = read_pins(requirements, machine, python)
        target = record["files"][requirements.name]["targets"][f"{machine}-py{python}"]
        chosen = {name: target["resolved"].get(name) for name in ("protobuf", "wandb")}
        if not pins["protobuf"].startswith("3.20.") or chosen != {name: pins[name] for name in chosen}:
            problems.append(f"{requirements.name} on {machine}, Python {python}: protobuf {pins['protobuf']} and "
                            f"wandb {pins['wandb']} are pinned (CANN: protobuf 3.20.x), the resolver chose {chosen}")
    return problems


@pytest.mark.parametrize("name", FILES)
def test_the_record_was_made_from_the_file_as_it_is(name):
    assert staleness(record(), ROOT / name) is None, staleness(record(), ROOT / name)


@pytest.mark.parametrize("machine, python", TARGETS)
@pytest.mark.parametrize("name", FILES)
def test_every_pin_resolves_at_its_version_for_the_target(name, machine, python):
    assert pin_problems(record(), ROOT / name, machine, python) == []


def test_the_protobuf_wandb_conflict_stays_solved():
    assert conflict_problems(record(), ROOT / "requirements-npu.txt") == []


def test_an_edited_requirement_file_makes_the_record_stale(tmp_path):
    copy = tmp_path / "requirements-npu.txt"
    copy.write_text((ROOT / "requirements-npu.txt").read_text() + "pip==25.0\n")
    assert staleness(record(), copy) == ("requirements-resolved.json was made from another requirements-npu.txt: "
                                         f"regenerate it: {record()['regenerate']}")
    assert "--write-record" in record()["regenerate"]


def test_a_record_without_the_file_or_a_target_is_named(tmp_path):
    other = tmp_path / "requirements-other.txt"
    other.write_text("pip==25.0\n")
    assert staleness(record(), other).startswith("requirements-resolved.json has no record of requirements-other.txt")
    edited = record()
    del edited["files"]["requirements.txt"]["targets"]["x86_64-py3.10"]
    assert staleness(edited, ROOT / "requirements.txt").startswith(
        "requirements-resolved.json lacks requirements.txt for ['x86_64-py3.10']: regenerate it")


def set_in(record: dict, target: str, *keys_and_value) -> dict:
    *keys, last, value = keys_and_value
    node = record["files"]["requirements-npu.txt"]["targets"][target]
    for key in keys:
        node = node[key]
    if value is None:
        del node[last]
    else:
        node[last] = value
    return record


@pytest.mark.parametrize("edit, expected", [
    (("resolved", "scipy", "1.17.1"), "scipy==1.15.3 is pinned, the resolver chose 1.17.1"),
    (("resolved", "setuptools", None), "setuptools==84.2.1 is pinned, the resolver chose nothing"),
    (("pins", "numpy", "requires_python", ">=3.11"), "numpy==2.2.6 needs Python >=3.11"),
    (("pins", "decorator", "wheel", False), "decorator==5.3.1 has no wheel for aarch64-manylinux_2_28"),
    (("pins", "cffi", None), "the record has no index metadata for cffi==2.1.1"),
    (("left_out", "pip", "no reason"), "pip is left out but not pinned"),
])
def test_each_pin_check_names_what_the_record_contradicts(edit, expected):
    edited = set_in(record(), "aarch64-py3.10", *edit)
    assert pin_problems(edited, ROOT / "requirements-npu.txt", "aarch64", "3.10") == [
        f"requirements-npu.txt on aarch64, Python 3.10: {expected}"]


def test_markers_are_evaluated_for_each_target(tmp_path):
    # Python 3.10's scipy pinned at 3.11's release: the record (made for 1.15.3 on 3.10) contradicts it there only.
    text = (ROOT / "requirements-npu.txt").read_text()
    copy = tmp_path / "requirements-npu.txt"
    copy.write_text(text.replace("scipy==1.15.3 ; python_version <", "scipy==1.17.1 ; python_version <"))
    assert copy.read_text() != text
    assert pin_problems(record(), copy, "aarch64", "3.10") == [
        "requirements-npu.txt on aarch64, Python 3.10: scipy==1.17.1 is pinned, the resolver chose 1.15.3",
        "requirements-npu.txt on aarch64, Python 3.10: the record has no index metadata for scipy==1.17.1"]
    assert pin_problems(record(), copy, "aarch64", "3.11") == []


@pytest.mark.parametrize("package, version", [("protobuf", "7.36.2"), ("wandb", "0.31.0")])
def test_the_conflict_check_names_a_protobuf_or_wandb_the_resolver_moved(package, version):
    edited = set_in(record(), "x86_64-py3.11", "resolved", package, version)
    problems = conflict_problems(edited, ROOT / "requirements-npu.txt")
    assert len(problems) == 1 and problems[0].startswith("requirements-npu.txt on x86_64, Python 3.11: protobuf 3.20.3")
    assert f"'{package}': '{version}'" in problems[0]


def test_the_conflict_check_refuses_a_protobuf_cann_does_not_accept(tmp_path):
    copy = tmp_path / "requirements-npu.txt"
    # Pinned and resolved together, but not a protobuf CANN 9.0 accepts.
    copy.write_text((ROOT / "requirements-npu.txt").read_text().replace("protobuf==3.20.3", "protobuf==5.29.0"))
    edited = record()
    for machine, python in TARGETS:
        set_in(edited, f"{machine}-py{python}", "resolved", "protobuf", "5.29.0")
    problems = conflict_problems(edited, copy)
    assert len(problems) == len(TARGETS)
    assert "protobuf 5.29.0 and wandb 0.25.0 are pinned (CANN: protobuf 3.20.x)" in problems[0]
