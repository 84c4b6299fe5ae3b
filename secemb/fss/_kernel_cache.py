"""numba's on-disk cache of the kernels, invalidated by the modules they depend on (internal).

numba keeps a cached function's machine code while the function's own source file is unchanged
(its contents, bytecode, signature and target: an entry of the index for each CPU name and LLVM
feature string, so that the code for the target ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` name
lies next to this CPU's and never replaces it, :func:`secemb.fss.kernels.host_cpu_features`): a
kernel that inlines an intrinsic from another module keeps its cached code when only that module
changes.  So after an edit or an upgrade that
changes only :mod:`secemb.fss._aesni` (the AES intrinsics), the walk, the conversions and the
check would run the old intrinsics' code from the cache (found in session 28: a stale cache of
``convert_accumulate`` gave wrong sums until it was cleared).

Importing this module registers, ahead of numba's own, cache locators for the modules named in
:data:`DEPENDENCIES`: the same places as numba's (a ``NUMBA_CACHE_DIR``, the package's
``__pycache__``, the user-wide cache), and a source stamp that also covers the contents of the
modules each depends on, so a change to any of them compiles its kernels again.  The kernel
modules import it before their kernels are decorated.  A numba without the locator list this
relies on (``CacheImpl._locator_classes``) gets nothing registered; ``tests/fss/test_s28_kernel_cache.py``
fails there.

It also makes a compilation of this package's kernels one per machine at a time (:func:`compile_locked`):
processes that need the same kernel while its cache is cold (two servers and their devices started
together, the workers of a test run) took the same seconds of CPU each to compile the same code; with
the lock the first compiles and saves it, the others wait and load what it saved.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from numba.core import caching, dispatcher
from numba.core.compiler_lock import global_compiler_lock

__all__ = ["DEPENDENCIES", "compile_locked", "dependency_stamp"]

#: this package's directory: the kernels whose compilations :func:`compile_locked` serializes lie under it
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: the longest wait for another process's compilation of a kernel; past it this process compiles too
#: (numba's cache tolerates that: it is what happened without the lock)
LOCK_WAIT_S = 600.0

#: kernel module file -> the files of this package whose code its kernels compile in (intrinsics)
DEPENDENCIES: dict[str, tuple[str, ...]] = {
    "_numba_kernels.py": ("_aesni.py",),
    "_sketch_kernels.py": ("_aesni.py",),
    "_sketchproof_kernels.py": ("_sketch_kernels.py",),
    "_sketch_device_kernels.py": ("_sketch_kernels.py", "_aesni.py", "_rangeproof_kernels.py"),
}


def dependency_stamp(py_file: str) -> tuple[bytes, ...]:
    """The SHA-256 of each file :data:`DEPENDENCIES` names for the kernel module ``py_file``,
    read from ``py_file``'s directory (numba's own content hash, memoized by mtime and size)."""
    out = []
    for name in DEPENDENCIES[os.path.basename(py_file)]:
        path = os.path.join(os.path.dirname(py_file), name)
        st = os.stat(path)
        out.append(caching._hash_source_file(path, st.st_mtime, st.st_size))
    return tuple(out)


def _with_dependencies(base: type) -> type:
    """A subclass of numba's locator ``base`` for :data:`DEPENDENCIES`' modules only, whose
    source stamp is ``(numba's stamp, dependency_stamp(file))``."""

    def from_function(cls: type, py_func: Any, py_file: str) -> Any:
        deps = DEPENDENCIES.get(os.path.basename(py_file))
        if deps is None or not all(os.path.exists(os.path.join(os.path.dirname(py_file), d)) for d in deps):
            return None
        return base.from_function.__func__(cls, py_func, py_file)  # type: ignore[attr-defined]

    def get_source_stamp(self: Any) -> Any:
        return (base.get_source_stamp(self), dependency_stamp(self._py_file))  # type: ignore[attr-defined]

    return type(f"Secemb{base.__name__}", (base,), {
        "from_function": classmethod(from_function), "get_source_stamp": get_source_stamp,
        "__doc__": f"numba's {base.__name__}, stamped with the kernel module's dependencies too."})


#: lock file -> its descriptor, for the locks this process holds (a compilation that needs another kernel
#: compiled takes that kernel's lock too; one already held is not taken again)
_HELD: dict[str, int] = {}


@contextmanager
def compile_locked(cache: Any) -> Iterator[None]:
    """Hold an exclusive lock (``flock``) on the file ``<index>.lock`` next to the on-disk cache
    index of ``cache`` (a dispatcher's ``_cache``) for the block: one process of this machine at a
    time compiles that kernel, and a process that waited finds the code the holder saved.

    Nothing is locked (the block runs at once) where the kernel has no on-disk cache (numba's
    ``NullCache``), this process holds that lock already, the lock file cannot be opened or locked
    (a read-only cache directory, a file system without ``flock``), or another process held it for
    :data:`LOCK_WAIT_S`.  The lock is the open file's: the kernel drops it when the holder exits,
    killed or not, so a dead holder never blocks the others (a forked child closes the copies it
    inherited: :func:`_forget_in_child`)."""
    index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
    path = index + ".lock" if isinstance(index, str) else None
    fd = -1
    if path is not None and path not in _HELD:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError:
            fd = -1
    if fd >= 0 and not _acquire(fd, time.monotonic() + LOCK_WAIT_S):
        os.close(fd)
        fd = -1
    if fd < 0:
        yield
        return
    _HELD[path] = fd  # type: ignore[index]
    try:
        yield
    finally:
        del _HELD[path]  # type: ignore[arg-type]
        os.close(fd)  # closing the only descriptor of the open file releases its lock


def _forget_in_child() -> None:
    """After a fork: close the child's copies of the lock files the parent held (they share the
    parent's open files, and so its locks, which the parent releases when its compilation ends)."""
    for fd in _HELD.values():
        os.close(fd)
    _HELD.clear()


def _acquire(fd: int, deadline: float) -> bool:
    """Whether ``fd``'s exclusive ``flock`` was taken before ``deadline`` (polled: 5 ms doubling to 100 ms)."""
    pause = 0.005
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() >= deadline:
                return False
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


#: the module numba's ``numba.np.arraymath`` imports to probe for BLAS
_BLAS_PROBE = "scipy.linalg.cython_blas"
#: whether :func:`load_numba_registries` ran in this process
_registries_loaded = False


def load_numba_registries() -> None:
    """Load numba's registries of implementations now, without importing ``scipy.linalg``.

    numba loads them at a process's first compilation or cache load
    (``BaseContext.refresh``); one of them, ``numba.np.arraymath``, probes for BLAS once by
    importing ``scipy.linalg.cython_blas``, which imports all of ``scipy.linalg`` -- about half
    of that first call (0.13-0.16 s here).  The kernels call no BLAS, so the probe is made to
    fail (a ``None`` entry in ``sys.modules``: the import system's documented way to make an
    import raise ``ImportError``, which numba catches) for the duration of the refresh only.
    The process-wide effect: numba-compiled ``np.correlate`` / ``np.convolve`` on floats use
    numba's own loop instead of BLAS (``np.dot`` and ``np.linalg`` still import scipy when
    they are compiled).  Where ``scipy.linalg`` is already imported the probe is free and left
    alone.  Runs once a process, under numba's compiler lock (which its own refreshes hold);
    where numba's internals are not where this expects them, it does nothing and numba
    refreshes as usual (scipy included).

    Called at :mod:`secemb.fss._aesni`'s import and before the first compilation or cache load
    of any of this package's kernels (:func:`_locking`): a process whose first kernel is one of
    :mod:`secemb.fss._shani`'s, which imports no AES module (a server authenticating its first
    request), otherwise paid numba's refresh with ``scipy.linalg`` (session 37's profile of the
    test suite: ~24 % of the servers' first kernel loads).  Later calls do nothing.
    """
    global _registries_loaded
    if _registries_loaded:
        return
    try:  # numba internals: a numba that moved them loads its registries itself, as it always did
        from numba.core.registry import cpu_target
    except ImportError:
        return
    with global_compiler_lock:
        if _registries_loaded:
            return
        _registries_loaded = True
        if _BLAS_PROBE in sys.modules:
            cpu_target.target_context.refresh()
            return
        sys.modules[_BLAS_PROBE] = None  # type: ignore[assignment]  # None: import raises ImportError
        try:
            cpu_target.target_context.refresh()
        finally:
            if sys.modules.get(_BLAS_PROBE, 0) is None:
                del sys.modules[_BLAS_PROBE]


def _locking(compile_: Callable[..., Any]) -> Callable[..., Any]:
    """numba's ``Dispatcher.compile`` run under :func:`compile_locked` for this package's cached
    kernels (their code found in the on-disk cache, or compiled and saved there, by one process at
    a time); other functions compile as before.  numba's compiler lock (one compilation at a time in
    a process, re-entrant) is taken first, so that two threads never hold kernels' locks in opposite
    orders; between processes a compilation takes the locks of the kernels it calls after its own,
    down the call graph, which has no cycle."""

    @functools.wraps(compile_)
    def compile(self: Any, sig: Any) -> Any:
        if not getattr(self.py_func, "__code__", None) or not self.py_func.__code__.co_filename.startswith(_PACKAGE):
            return compile_(self, sig)
        load_numba_registries()
        with global_compiler_lock, compile_locked(self._cache):
            return compile_(self, sig)

    compile.__secemb_locked__ = True  # type: ignore[attr-defined]
    return compile


def _register() -> None:
    impl = getattr(caching, "CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if isinstance(classes, list) and not any(c.__name__.startswith("Secemb") for c in classes):
        bases = [getattr(caching, n, None) for n in ("UserProvidedCacheLocator", "InTreeCacheLocator",
                                                      "UserWideCacheLocator")]
        classes[:0] = [_with_dependencies(b) for b in bases if b is not None]
    cls = getattr(dispatcher, "Dispatcher", None)
    if cls is not None and not getattr(cls.compile, "__secemb_locked__", False):
        cls.compile = _locking(cls.compile)
        os.register_at_fork(after_in_child=_forget_in_child)


_register()
