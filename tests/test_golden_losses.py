"""Numeric drift: the first 20 losses of the tiny run equal, bit for bit, the ones in tests/golden/tiny_losses.json."""

from helpers.golden_losses import COMMAND, GOLDEN, STEPS, differences, losses, read


def test_the_first_losses_of_the_tiny_run_equal_the_golden_file(tiny_run):
    fresh = losses(tiny_run)
    assert len(fresh) == STEPS
    found = differences(fresh, read())
    assert not found, (f"the tiny run's losses moved from {GOLDEN.name}:\n" + "\n".join(found)
                       + f"\nif the change is meant to move them: {COMMAND}, and commit the file")
