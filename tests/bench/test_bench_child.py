"""secemb.bench.child.run_child: a measured child's CPU time (user + system) and output."""

from __future__ import annotations

import subprocess
import sys

import pytest

from secemb.bench.child import run_child

#: a child that uses at least 0.3 s of its own CPU (its process clock), then prints and exits 3
_SPIN = "import time\nwhile time.process_time() < 0.3:\n    pass\nprint('spun')\nraise SystemExit(3)"


def test_a_child_s_cpu_time_output_and_status_are_its_own() -> None:
    got = run_child([sys.executable, "-c", _SPIN])
    assert got.returncode == 3 and got.stdout.strip() == "spun"
    # at least the 0.3 s it spun (plus its interpreter's start-up), not this process's CPU
    assert 0.3 <= got.cpu_s < 30 and got.wall_s > 0
    quiet = run_child([sys.executable, "-c", _SPIN], keep_stdout=False)
    assert quiet.stdout == "" and quiet.cpu_s >= 0.3


def test_a_child_s_error_output_is_kept_and_a_timeout_raises() -> None:
    got = run_child([sys.executable, "-c", "import sys; sys.exit('no such dataset')"])
    assert got.returncode == 1 and got.stderr.strip() == "no such dataset"
    with pytest.raises(subprocess.TimeoutExpired):
        run_child([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
