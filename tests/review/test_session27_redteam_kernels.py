"""Session 27 red team (helper P): today's compiled kernels and the inputs that reach them.

Attacked: helper E's ``ring_matmul`` (``out=`` of any strides; the table's rows read through the
cuckoo gather index unchecked, that index checked in ``[-1, N)`` when :meth:`LimbMatrix.gather
<secemb.fss.linalg.LimbMatrix.gather>` makes the operand), ``convert_add`` and
``relay_masks_into``; helper F's ``sign_products`` and ``affine_vector``; helper K's
``scatter_rows`` behind :meth:`CuckooLayout.scatter <secemb.fss.cuckoo.CuckooLayout.scatter>`
(``out=``); helper B's kept buffers (a SecEmb server role keeps its close buffer and its last
round's running aggregate, the next round's first fold target).

Traced: every argument of those kernels that a device, the peer server or a relay can influence
reaches them through parsers that fix its shape (a request's key header against the round, the
relay's forwards digest-checked, seeds of 16 bytes, uploads of fixed size); the indices the
kernels read unchecked (the gather index, ``cols``, the layout's occurrences) are made by the
server from the round's public layout.  No wire input was found that moves a kernel outside its
arrays: the wire tests below are regressions (a fresh interpreter on the compiled kernels, so a
memory error is the child's death, not pytest's).  Neither was a way for a round's values to
reach the next round through the kept buffers: a kept role gives a new role's shares byte for
byte after an aborted round, a refused or failing evaluation, alternating closes, a change of
shape and back, on three threads.

Found (hazmat layer: a caller's own arguments, not reachable from bytes; each ``xfail(strict)``
with its id; the rule of docs/security.md "Compiled kernels and untrusted input" since session 24
is that an argument aliasing an output, or changed after its check, cannot move a kernel outside
its arrays):

* S27-P1 (low): ``ring_matmul``'s ``out`` may share memory with the gather index (only ``a`` and
  the rows are checked): the kernel writes products over the index it reads next, then reads the
  rows at those products -- a segmentation fault.
* S27-P2 (low): the same with ``cols``.
* S27-P3 (low): :class:`LimbMatrix` keeps the caller's index array (``astype(copy=False)``): changed
  after the check, the compiled product reads rows through the changed index -- a segmentation
  fault (the reference raises ``IndexError``).
* S27-P4 (low): :meth:`CuckooLayout.scatter` takes an ``out`` over the layout's own (writeable,
  cached) ``occurrences``: the first scatter writes sums over the indices, the next one reads the
  bucket form through them -- a segmentation fault (the reference: ``IndexError`` on both, the
  layout corrupted for the process).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from secemb.errors import ProtocolError
from secemb.fss import kernels
from secemb.fss.convert import convert_add
from secemb.fss.cuckoo import CuckooLayout
from secemb.fss.linalg import LimbMatrix, ring_matmul
from secemb.fss.projections import project_affine, project_each
from secemb.protocols.backends import Backend, ThreadBackend
from secemb.protocols.secemb import SecEmbProtocol
from secemb.protocols.secemb import server as server_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
from test_s27_close_buffers import MP, W, _pair, _retrieve, _round, _upload, _users  # noqa: E402
from test_session20_kernel_inputs import _run  # noqa: E402

COMPILED = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels need numba and AES-NI")
BACKENDS = ["numpy", pytest.param("numba", marks=COMPILED)]


def _verdict(lines: list[str]) -> str:
    """The one verdict line of a child (``REFUSED ...`` or ``ACCEPTED ...``)."""
    verdicts = [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED"))]
    assert len(verdicts) == 1, lines
    return verdicts[0]


# -- S27-P1..P4: aliasing and indices changed after their check ------------------------------------

#: a product whose every row reads ``rows[0]`` (each entry ``2^40``) through a gather index of
#: zeros, ``a`` all ones: each word of the product is ``M 2^40``; ``buf`` holds what the attacks alias
PRODUCT = """
from secemb.fss.linalg import LimbMatrix, ring_matmul
G, K, M, D = 2, 8, 4, 4
rows = np.full((16, D), 1 << 40, np.uint64)
a = np.ones((G, K, M), np.uint64)
buf = np.zeros(G * K * D, np.int64)

def right(got):
    print("RIGHT" if np.array_equal(got, np.full((G, K, D), M << 40, np.uint64)) else "WRONG")
"""


def _refused_or_right(lines: list[str]) -> None:
    """A fixed call either refuses the aliasing arguments or computes the product the index
    named when it was checked."""
    verdict = _verdict(lines)
    assert verdict.endswith("InvalidParameters") or (verdict.startswith("ACCEPTED") and "RIGHT" in lines), lines


def _p1_p2(backend: str, finding: str) -> pytest.param:
    marks = [] if backend == "numpy" else [COMPILED, pytest.mark.xfail(strict=True, reason=finding)]
    return pytest.param(backend, marks=marks)


@pytest.mark.parametrize("backend", [_p1_p2("numpy", ""), _p1_p2(
    "numba", "S27-P1 (low): ring_matmul's out may share memory with the gather index; the kernel writes products "
    "over the index, then reads rows at them: SIGSEGV. Fix: refuse out sharing memory with the index and cols, or "
    "copy both before the kernel")])
def test_s27_p1_product_into_its_own_gather_index(backend: str) -> None:
    lines = _run(PRODUCT + """
index = buf[: G * M].reshape(G, M)
op = LimbMatrix(rows, 64).gather(index)
out = buf.view(np.uint64).reshape(G, K, D)  # the product's destination: the index's memory
refused("out over the gather index", lambda: right(ring_matmul(a, op, 64, out=out)), InvalidParameters)
""", backend)
    _refused_or_right(lines)


@pytest.mark.parametrize("backend", [_p1_p2("numpy", ""), _p1_p2(
    "numba", "S27-P2 (low): ring_matmul's out may share memory with cols; the kernel reads cols[g] after writing "
    "the previous group's rows over it, then index[g, j] for j past M: SIGSEGV. Fix: as S27-P1")])
def test_s27_p2_product_into_its_own_cols(backend: str) -> None:
    lines = _run(PRODUCT + """
cols = buf[:G]
cols[:] = M
op = LimbMatrix(rows, 64).gather(np.zeros((G, M), np.int64))
out = buf.view(np.uint64).reshape(G, K, D)  # the product's destination: cols' memory
refused("out over cols", lambda: right(ring_matmul(a, op, 64, cols=cols, out=out)), InvalidParameters)
""", backend)
    _refused_or_right(lines)


@COMPILED
@pytest.mark.xfail(strict=True, reason="S27-P3 (low): LimbMatrix keeps the caller's int64 index (astype copy=False); "
                   "changed after gather's check, the compiled product reads rows through it: SIGSEGV (the reference "
                   "raises IndexError). Fix: copy the index in LimbMatrix (and mark it read-only)")
def test_s27_p3_gather_index_changed_after_its_check() -> None:
    lines = _run(PRODUCT + """
index = np.zeros((G, M), np.int64)
op = LimbMatrix(rows, 64).gather(index)  # checked here: in [-1, 16)
index[:] = 1 << 40  # the caller's array, changed afterwards
refused("an index changed after its check", lambda: right(ring_matmul(a, op, 64)), InvalidParameters)
""")
    _refused_or_right(lines)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.xfail(strict=True, reason="S27-P4 (low): CuckooLayout.scatter takes out over the layout's own writeable "
                   "cached occurrences: the compiled scatter writes sums over them, the next scatter reads through "
                   "them: SIGSEGV (the reference: IndexError, the layout corrupted for the process). Fix: make the "
                   "layout's cached index arrays (occurrences, gather_index, indptr, candidates) read-only")
def test_s27_p4_scatter_into_the_layouts_own_occurrences(backend: str) -> None:
    lines = _run("""
from secemb.fss.cuckoo import CuckooLayout
lay = CuckooLayout(20, 8)
bf = np.full((lay.num_buckets, lay.bucket_size, 3), 1 << 40, np.uint64)
refused("out over the layout's occurrences", lambda: lay.scatter(bf, out=lay.occurrences.view(np.uint64)),
        InvalidParameters)
got = lay.scatter(bf)
kernels.BACKEND = "numpy"
print("INTACT", bool(np.array_equal(got, CuckooLayout(20, 8).scatter(bf))))
""", backend)
    assert _verdict(lines).endswith("InvalidParameters") and "INTACT True" in lines, lines
