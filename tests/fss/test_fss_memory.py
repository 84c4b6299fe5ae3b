"""The server's fused evaluation of 500 keys over 93,386 items with d = 64 stays within 1 GiB
(measured as the peak RSS of a fresh process)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_fused_evaluation_at_yelp_size_peaks_below_one_gib() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "secemb.bench.memory_probe", "500", "93386", "64"],
        check=True, capture_output=True, text=True, timeout=600,
    )
    result = json.loads(out.stdout)
    assert result["peak_rss_mib"] < 1024, result
