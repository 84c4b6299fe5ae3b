"""One compilation of a cold kernel per machine at a time (session 35, helper C,
``secemb/fss/_kernel_cache.py``'s :func:`~secemb.fss._kernel_cache.compile_locked`).

A fresh checkout has no compiled kernels: every process that needed a kernel compiled it, so two
servers started together, or two test workers, each spent the same seconds of CPU on the same code
(two processes of ``warm_kernels()`` on a cold cache: 64 s of CPU each here).  With the lock one
compiles and saves it, the other waits and loads it from the cache; a holder that dies releases it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from secemb.fss import _kernel_cache, kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="numba or AES-NI missing")

#: a process that compiles ``scatter_rows`` for one signature once ``go`` exists, and prints its cache counts
_COMPILE = """
import json, os, sys, time
import numpy as np
from secemb.fss import kernels
from secemb.fss._scatter_kernels import scatter_rows
go = sys.argv[1]
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
scatter_rows(np.zeros((4, 3), np.uint32), np.zeros((2, 3), np.int64), np.zeros((2, 3), np.uint32))
s = scatter_rows.stats
print(json.dumps({"misses": sum(s.cache_misses.values()), "hits": sum(s.cache_hits.values())}))
"""

#: a process that takes the lock of a fake cache index ``argv[1]`` and waits to be killed
_HOLD = """
import sys, time
from types import SimpleNamespace
from secemb.fss._kernel_cache import compile_locked
with compile_locked(SimpleNamespace(_cache_file=SimpleNamespace(_index_path=sys.argv[1]))):
    print("held", flush=True)
    time.sleep(120)
"""


def _cache(path: Path) -> SimpleNamespace:
    """A stand-in for a dispatcher's on-disk cache whose index is ``path``."""
    return SimpleNamespace(_cache_file=SimpleNamespace(_index_path=str(path)))


def test_two_processes_compile_a_cold_kernel_once(tmp_path: Path) -> None:
    """Two processes call the same kernel at the same instant on an empty cache (``NUMBA_CACHE_DIR``):
    exactly one compiles it, the other loads the code the first saved.  Without the lock both
    compile (two misses)."""
    go = tmp_path / "go"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "SECEMB_FSS_KERNELS": "numba"}
    procs = [subprocess.Popen([sys.executable, "-c", _COMPILE, str(go)], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        go.touch()  # both are past their imports, polling: they reach the kernel together
        counts = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs)
    assert sorted(c["misses"] for c in counts) == [0, 1], counts
    assert sorted(c["hits"] for c in counts) == [0, 1], counts


def test_a_held_lock_makes_the_others_wait_and_a_killed_holder_releases_it(tmp_path: Path) -> None:
    index = tmp_path / "kernel.nbi"
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(index)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        fd = os.open(str(index) + ".lock", os.O_RDWR)
        try:
            t = time.monotonic()
            assert not _kernel_cache._acquire(fd, time.monotonic() + 0.3)  # held elsewhere: refused until the deadline
            assert time.monotonic() - t >= 0.3
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
            assert _kernel_cache._acquire(fd, time.monotonic() + 30)  # the kernel dropped a dead holder's lock
        finally:
            os.close(fd)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert oct((index.parent / "kernel.nbi.lock").stat().st_mode & 0o777) == oct(0o600)


def test_the_lock_is_held_for_the_block_once_a_process_and_released_after(tmp_path: Path) -> None:
    """The block runs with the lock held (another descriptor cannot take it), a nested block of the
    same kernel does not wait for itself, and the lock is free after the block, also after an error."""
    index = tmp_path / "kernel.nbi"
    cache = _cache(index)

    def free() -> bool:
        fd = os.open(str(index) + ".lock", os.O_RDWR)
        try:
            return _kernel_cache._acquire(fd, time.monotonic())
        finally:
            os.close(fd)

    with pytest.raises(RuntimeError):
        with _kernel_cache.compile_locked(cache):
            assert not free()
            t = time.monotonic()
            with _kernel_cache.compile_locked(cache):  # the same process: no wait for its own lock
                assert not free()
            assert time.monotonic() - t < 1.0
            assert not free()
            raise RuntimeError("a compilation that failed")
    assert free()
    assert _kernel_cache._HELD == {}


def test_no_cache_or_no_lock_file_runs_the_block_unlocked(tmp_path: Path) -> None:
    ran = []
    with _kernel_cache.compile_locked(SimpleNamespace()):  # numba's NullCache: no index
        ran.append(1)
    with _kernel_cache.compile_locked(_cache(tmp_path / "missing" / "kernel.nbi")):  # its directory absent
        ran.append(2)
    assert ran == [1, 2]


def test_only_this_packages_kernels_take_the_lock_inside_numbas_compiler_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba's ``Dispatcher.compile`` is wrapped once; a kernel of the package takes its file lock with
    numba's compiler lock held (two threads of a process never wait on each other's file locks); a
    function outside the package compiles as before."""
    from numba.core import dispatcher
    from numba.core.compiler_lock import global_compiler_lock

    assert getattr(dispatcher.Dispatcher.compile, "__secemb_locked__", False)
    taken = []

    def locked_file(cache: str) -> contextlib.AbstractContextManager[None]:
        taken.append((cache, global_compiler_lock.is_locked()))
        return contextlib.nullcontext()

    monkeypatch.setattr(_kernel_cache, "compile_locked", locked_file)
    locked = _kernel_cache._locking(lambda self, sig: sig)
    ours = SimpleNamespace(py_func=kernels.compiled, _cache="ours")
    theirs = SimpleNamespace(py_func=json.dumps, _cache="theirs")
    assert locked(ours, "sig") == "sig" and locked(theirs, "sig") == "sig"
    assert taken == [("ours", True)]
