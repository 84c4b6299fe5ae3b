"""secemb.fss._projection_kernels.sign_products with :data:`~secemb.fss._projection_kernels.SIGN_ROWS` rows a
pass (session 29, helper P): four where AVX-512 gives 32 vector registers, two otherwise, 16 entries a pass
of its loop.  Against Python integers at lengths around the 16-entry pass, row counts that leave a last pass
of one to three rows, 1 to 9 devices in any order into any output rows; and in a fresh process that hides
AVX-512 (two rows a pass, compiled into its own cache)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.compiled(), reason="needs the compiled kernels (numba)")


def _signs_here() -> bool:
    from secemb.fss._projection_kernels import SIGNS

    return SIGNS


needs_signs = pytest.mark.skipif(not kernels.compiled() or not _signs_here(), reason="needs AVX2")


def _case(length: int, rows: int, devices: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Test data (not secrets): words ``x`` uint32 (devices, length) with a row of ``2^32 - 1`` (every sum
    wraps), ternary rows ``t`` int8 (rows, 4 ceil(length / 4)) with a row of -1, ``at`` a permutation of the
    devices and ``to`` distinct output rows among ``devices + 2``."""
    gen = np.random.default_rng(length * 1000 + rows * 10 + devices)
    x = gen.integers(0, 2**32, (devices, length), dtype=np.uint64).astype(np.uint32)
    x[0] = 2**32 - 1
    t = gen.integers(-1, 2, (rows, 4 * -(-length // 4))).astype(np.int8)
    t[-1, :length] = -1
    return x, t, gen.permutation(devices), gen.permutation(devices + 2)[:devices]


def _python(t: np.ndarray, x: np.ndarray, at: np.ndarray) -> list[list[int]]:
    """out[m, i] = sum_j t[i, j] x[at[m], j] mod 2^32, in Python ints."""
    length = x.shape[1]
    return [[sum(int(e) * int(v) for e, v in zip(row[:length].tolist(), x[d].tolist(), strict=True)) % 2**32
             for row in t] for d in at.tolist()]


def test_four_rows_a_pass_where_avx512_holds_the_sums() -> None:
    from secemb.fss._projection_kernels import SIGN_ROWS

    assert SIGN_ROWS == (4 if kernels.host_cpu_features().get("avx512vl") else 2)


@needs_signs
@pytest.mark.parametrize("length", [1, 15, 16, 17, 31, 47, 48, 49])
@pytest.mark.parametrize("rows", [1, 4, 6, 7, 9, 40])
@pytest.mark.parametrize("devices", [1, 5, 9])
def test_sign_products_match_python_ints(length: int, rows: int, devices: int) -> None:
    from secemb.fss._projection_kernels import sign_products

    x, t, at, to = _case(length, rows, devices)
    out = np.full((devices + 2, rows), 7, np.uint32)
    sign_products(t, x, at, out, to)
    assert out[to].tolist() == _python(t, x, at)
    untouched = np.setdiff1d(np.arange(devices + 2), to)
    assert (out[untouched] == 7).all()


_WITHOUT_AVX512 = """
import json, sys
import numpy as np
from secemb.fss import kernels
features = kernels.host_cpu_features()
kernels.host_cpu_features = lambda: {**features, "avx512vl": False}
from secemb.fss import _projection_kernels as pk
assert pk.SIGN_ROWS == 2
x = np.array(json.loads(sys.argv[1]), np.uint32)
t = np.array(json.loads(sys.argv[2]), np.int8)
at, to = (np.array(json.loads(a), np.intp) for a in sys.argv[3:5])
out = np.full((x.shape[0] + 2, t.shape[0]), 7, np.uint32)
pk.sign_products(t, x, at, out, to)
print(json.dumps(out.tolist()))
"""


@needs_signs
def test_two_rows_a_pass_without_avx512(tmp_path: os.PathLike[str]) -> None:
    """In a fresh process that hides AVX-512 (its own numba cache: the kernel is compiled for two rows)."""
    x, t, at, to = _case(49, 7, 5)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "SECEMB_FSS_KERNELS": "numba"}
    args = [json.dumps(a.tolist()) for a in (x, t, at, to)]
    done = subprocess.run([sys.executable, "-c", _WITHOUT_AVX512, *args], env=env, capture_output=True, text=True,
                          timeout=600, check=True)
    out = np.array(json.loads(done.stdout), np.uint32)
    assert out[to].tolist() == _python(t, x, at)
    assert (out[np.setdiff1d(np.arange(7), to)] == 7).all()
