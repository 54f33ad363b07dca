"""README command 2 runs the tests without the ``distributed`` marker and CI runs the marked ones in a step
of their own (``-m distributed``): a test that starts a torchrun job must carry the marker, and one that
does not fails at the launch (``tests/conftest.py``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

TORCHRUN_HELP = [sys.executable, "-m", "torch.distributed.run", "--help"]


def test_an_unmarked_test_cannot_start_torchrun():
    with pytest.raises(RuntimeError, match="starts a torchrun job: mark it @pytest.mark.distributed"):
        subprocess.run(TORCHRUN_HELP, capture_output=True, timeout=120)
    # other processes start as usual
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"


@pytest.mark.distributed
def test_a_marked_test_starts_torchrun():
    result = subprocess.run(TORCHRUN_HELP, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "nproc" in result.stdout
