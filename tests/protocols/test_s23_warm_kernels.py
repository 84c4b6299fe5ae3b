"""Issue 37 (session 23, helper B): ``backends.warm_kernels`` loads every compiled kernel signature a
secure round uses, so that a process's first round pays no numba cache load (``secemb bench startup``
measures the warm-up as that cost).

A fresh process warms the kernels, then trains one epoch of ``secemb train``'s defaults (SecEmb, cuckoo
layout, relay, verified uploads) on the small synthetic data set: no kernel of the DPF, the close or the
hashes gains a signature.  Only the devices' cuckoo placement (``cuckoo_assign``, the data side, not a
server's round) may.  Before session 23 the round added the close's control-bit product, the
point-function check, the payload conversion, the gathered bucket form's product and both SHA-256 row
signatures; session 27 (helper K) adds the close's compiled scatter onto items (``secemb.fss._scatter_kernels``),
helper N the requests' key parsing (``parse_path_fields``: rows of a wider array, several and one).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from secemb.fss import kernels

_RUN = """
import json
import secemb.fss._numba_kernels as k
from secemb.fss import _scatter_kernels, _shani
from secemb.protocols.backends import warm_kernels
from secemb.training import Experiment, run_experiment

warm_kernels()
found = {**{"kernels." + n: d for n, d in vars(k).items() if hasattr(d, "signatures")},
         **{"shani." + n: d for n, d in vars(_shani).items() if hasattr(d, "signatures")},
         **{"scatter." + n: d for n, d in vars(_scatter_kernels).items() if hasattr(d, "signatures")}}
before = {n: len(d.signatures) for n, d in found.items()}
run_experiment(Experiment(dataset="synthetic-mini", protocol="secemb", epochs=1))
added = {n: len(d.signatures) - before[n] for n, d in found.items() if len(d.signatures) != before[n]}
print(json.dumps({"warmed": sum(before.values()), "added": added}))
"""


@pytest.mark.skipif(not kernels.compiled() or not kernels.sha_compiled(), reason="numba kernels are not in use")
def test_a_secure_round_loads_no_kernel_signature_after_warm_up() -> None:
    proc = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["warmed"] > 0
    assert set(got["added"]) <= {"kernels.cuckoo_assign"}, got["added"]
