"""Numeric drift: the first 20 losses of the tiny run equal, bit for bit, the ones in tests/golden/tiny_losses.json."""

import pytest

from helpers.golden_losses import COMMAND, GOLDEN, STEPS, differences, losses, read


def test_the_first_losses_of_the_tiny_run_equal_the_golden_file(tiny_run):
    fresh = losses(tiny_run)
    assert len(fresh) == STEPS
    found = differences(fresh, read())
    assert not found, (f"the tiny run's losses moved from {GOLDEN.name}:\n" + "\n".join(found)
                       + f"\nif the change is meant to move them: {COMMAND}, and commit the file")


def test_the_suite_runs_the_kernels_the_golden_file_was_written_with():
    """conftest caps torch, MKL and oneDNN at AVX2 before torch loads: an AVX-512 machine then reproduces the file."""
    import torch
    from helpers.cpu_kernels import has_avx2

    if not has_avx2():
        pytest.skip("no AVX2 on this CPU: the golden file's kernels cannot run here")
    assert torch.backends.cpu.get_cpu_capability() == read()["cpu_capability"] == "AVX2"


def test_a_cpu_vendor_the_file_has_no_losses_for_is_told_how_to_add_them():
    from helpers.cpu_kernels import cpu_vendor

    golden = read()
    others = {vendor: steps for vendor, steps in golden["losses"].items() if vendor != cpu_vendor()}
    found = differences(golden["losses"][cpu_vendor()], {**golden, "losses": others})
    assert len(found) == 1 and f"none for {cpu_vendor()}" in found[0] and COMMAND in found[0]
