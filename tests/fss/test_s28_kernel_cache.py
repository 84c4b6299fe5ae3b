"""numba's on-disk cache of the kernels covers the modules they compile in (session 28,
``secemb/fss/_kernel_cache.py``): a kernel that inlines ``_aesni``'s intrinsics is compiled again
when ``_aesni.py`` changes, not loaded stale from the cache (a stale ``convert_accumulate`` gave
wrong sums in this session until its cache was cleared).  Since session 29 the example kernel that
inlines them is the sketch check's ``sketch_accumulate`` (the point-function check's loop is gone)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from numba.core import caching

from secemb.fss import _kernel_cache, kernels

FSS = Path(_kernel_cache.__file__).parent

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")


def _kernels() -> list:
    from secemb.fss import _numba_kernels, _sketch_kernels

    return [_numba_kernels.convert_accumulate, _numba_kernels.subtrees, _sketch_kernels.sketch_accumulate]


def test_the_kernels_are_cached_through_the_dependency_stamped_locator() -> None:
    for kernel in _kernels():
        locator = kernel._cache._impl._locator
        assert type(locator).__name__.startswith("Secemb"), type(locator)
        assert locator.get_source_stamp()[1] == _kernel_cache.dependency_stamp(locator._py_file)


def test_a_change_to_aesni_alone_changes_the_stamp(tmp_path: Path) -> None:
    for name in ("_sketch_kernels.py", "_aesni.py"):
        shutil.copy(FSS / name, tmp_path / name)
    from secemb.fss._sketch_kernels import sketch_accumulate

    ours = type(sketch_accumulate._cache._impl._locator)
    copy = str(tmp_path / "_sketch_kernels.py")
    locator = ours.from_function(sketch_accumulate.py_func, copy)
    plain = caching.InTreeCacheLocator.from_function(sketch_accumulate.py_func, copy)
    before, plain_before = locator.get_source_stamp(), plain.get_source_stamp()
    with open(tmp_path / "_aesni.py", "a", encoding="utf-8") as f:
        f.write("# an intrinsic changed\n")
    assert locator.get_source_stamp() != before  # ours: compiled again
    assert plain.get_source_stamp() == plain_before  # numba's own stamp alone would load the stale code


def test_other_modules_keep_numbas_own_locators(tmp_path: Path) -> None:
    from secemb.fss._sketch_kernels import sketch_accumulate

    ours = type(sketch_accumulate._cache._impl._locator)
    (tmp_path / "elsewhere.py").write_text("x = 1\n", encoding="utf-8")
    assert ours.from_function(sketch_accumulate.py_func, str(tmp_path / "elsewhere.py")) is None
    shutil.copy(FSS / "_sketch_kernels.py", tmp_path / "_sketch_kernels.py")  # its dependency missing there
    assert ours.from_function(sketch_accumulate.py_func, str(tmp_path / "_sketch_kernels.py")) is None


def test_a_copy_of_the_package_compiles_again_after_aesni_alone_changes(tmp_path: Path) -> None:
    """End to end, in fresh processes over a copy of the package: compiled (a miss), loaded (a
    hit), then -- ``_aesni.py`` alone changed -- compiled again (a miss), not loaded stale.  The
    probe calls the kernel itself on one device's zero leaves (session 37: through ``SketchCheck``
    and ``expand`` it also compiled the SHA-256, SHAKE and expansion kernels in each cold process,
    14 s of CPU a process where the kernel alone takes 3.5 s; the counts are the kernel's)."""
    import os
    import subprocess
    import sys

    shutil.copytree(FSS.parent, tmp_path / "secemb", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    probe = (
        "import numpy as np, secemb\n"
        f"assert secemb.__file__.startswith({str(tmp_path)!r}), secemb.__file__\n"
        "from secemb.fss._sketch_kernels import LANES, sketch_accumulate\n"
        "from secemb.fss.sketch import SKETCH_WORDS\n"
        # SketchCheck.add's arguments for one device's leaves over 32 positions: the leaves, keys, r and r^2
        # read-only (session 37: it passes everything the loop reads read-only)
        "rks, r, r2 = np.zeros((1, 11, 2 * LANES), np.uint64), np.zeros((1, 32), np.uint64), np.zeros((1, 32), "
        "np.uint64)\n"
        "leaves = np.zeros((1, 32, 2), np.uint64)\n"
        "for a in (leaves, rks, r, r2):\n"
        "    a.flags.writeable = False\n"
        "sums = np.zeros((1, SKETCH_WORDS), np.uint64)\n"
        "sketch_accumulate(leaves, 0, 1, 1, rks, r, r2, sums)\n"
        "print(sum(sketch_accumulate.stats.cache_hits.values()), sum(sketch_accumulate.stats.cache_misses.values()))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", probe], env=env, cwd=tmp_path, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.split()[-2] + " " + done.stdout.split()[-1]

    assert run() == "0 1"  # compiled
    assert run() == "1 0"  # loaded from the cache
    with open(tmp_path / "secemb" / "fss" / "_aesni.py", "a", encoding="utf-8") as f:
        f.write("# an intrinsic changed\n")
    assert run() == "0 1"  # compiled again: the cache covers _aesni
