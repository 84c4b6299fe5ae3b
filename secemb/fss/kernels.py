"""Compiled kernels of the FSS hot loops, and the switch between them and the numpy reference.

Hazmat layer.  Every hot loop of the server's full-domain work has a pure-numpy reference
(in :mod:`~secemb.fss.tree` and :mod:`~secemb.fss.convert`, AES through OpenSSL in large
batched calls) and a numba kernel here that fuses the AES rounds (AES-NI/VAES instructions,
:mod:`secemb.fss._aesni`) with the work between them: the tree levels of a cache-resident
subtree with their correction words and control bits, the payload conversion, the shares'
correction ``t * CW`` and the aggregation sums.  The two give the same bits
(``tests/fss/test_fss_kernels.py``).

Selection: :data:`BACKEND` is ``"numba"`` when numba is installed and the CPU it compiles for
has AES-NI (:func:`host_cpu_features`), ``"numpy"`` otherwise; the environment variable
``SECEMB_FSS_KERNELS=numpy`` forces the reference (read once at import; tests and benchmarks
assign :data:`BACKEND` directly).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import numpy as np

from secemb.errors import InvalidParameters

__all__ = ["BACKEND", "compiled", "available", "host_cpu_features", "read_only", "sha_compiled", "signals_deferred",
           "compile_clock"]


#: among the features the kernels choose their code by, those LLVM enables with each (its X86 target's
#: implications): a feature :func:`host_cpu_features` reads from ``NUMBA_CPU_FEATURES`` counts only
#: with these, so that a string like ``+vaes,-avx2`` (LLVM: no VAES) does not pick the VAES code
_REQUIRES: dict[str, tuple[str, ...]] = {
    "vaes": ("aes", "avx2"), "avx2": ("avx",), "avx512f": ("avx2",), "avx512vl": ("avx512f",),
    "avx512ifma": ("avx512f",), "avx512vnni": ("avx512f",), "amx-int8": ("amx-tile",),
}


def _named_features(flat: str) -> dict[str, bool]:
    """The features an LLVM feature string (``"+aes,-avx512f,..."``) enables: each it names with
    ``+`` and never with ``-``, with the features :data:`_REQUIRES` lists for it; every feature it
    names is a key.  A feature it does not name counts as absent (a CPU model's own features too)."""
    signs: dict[str, set[str]] = {}
    for item in flat.split(","):
        item = item.strip()
        if item[:1] in ("+", "-") and len(item) > 1:
            signs.setdefault(item[1:], set()).add(item[0])

    def on(name: str) -> bool:
        return signs.get(name) == {"+"} and all(on(r) for r in _REQUIRES.get(name, ()))

    return {name: on(name) for name in signs}


@cache
def host_cpu_features() -> dict[str, bool]:
    """The CPU features numba compiles the kernels for, by LLVM's names (``"aes"``, ``"vaes"``,
    ``"avx2"``, ``"avx512f"``, ``"avx512ifma"``, ``"sha"``, ``"amx-tile"``, ...): the kernels pick
    their code by these (:mod:`secemb.fss._aesni`, :mod:`secemb.fss._projection_kernels`,
    :func:`sha_compiled`), so that they emit only instructions of the target numba compiles for.

    By default this CPU's (LLVM's host features, as numba takes them: without AVX where numba
    turns it off, ``NUMBA_ENABLE_AVX=0``).  numba's own ``NUMBA_CPU_FEATURES`` (read through
    ``numba.core.config``) replaces them: numba then generates code for that LLVM feature string
    (and ``NUMBA_CPU_NAME``'s model), and this reports the features the string enables
    (:func:`_named_features`: a feature it does not name counts as absent, so a partial string
    picks narrower code, never an instruction the target lacks).  That is the testing and
    deployment knob to run the kernels as a CPU without AVX-512, AMX or VAES would, on a CPU that
    has every feature the string enables: e.g. ``NUMBA_CPU_NAME=znver3`` and a string with ``+``
    for that CPU's features and ``-`` for every other this LLVM knows (the profiles of
    ``tests/fss/test_cpu_profiles.py``).  numba's cache keys each kernel's code by the CPU name and
    the feature string, so the code of different targets never mixes
    (:mod:`secemb.fss._kernel_cache`).  Raises ``ImportError`` without numba."""
    from numba.core import codegen, config

    flat = getattr(config, "CPU_FEATURES", None)  # set from the environment at numba's import
    return _named_features(codegen.get_host_cpu_features() if flat is None else flat)


def available() -> bool:
    """Whether the compiled kernels can run here (numba imports, its target CPU has AES-NI).

    It imports numba (a numba that refuses this numpy raises ``ImportError``: the reference is
    used then) but not numba's registries, which :mod:`secemb.fss._aesni` loads when a kernel
    is first used.  It registers :mod:`secemb.fss._kernel_cache` (the kernels' cache keys and
    their compile lock) before any kernel compiles.
    """
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    from secemb.fss import _kernel_cache  # noqa: F401 - before any kernel compiles: its cache locators and compile lock
    return bool(host_cpu_features().get("aes"))


def _initial_backend() -> str:
    wanted = os.environ.get("SECEMB_FSS_KERNELS", "numba")
    if wanted not in ("numba", "numpy"):
        raise InvalidParameters(f"SECEMB_FSS_KERNELS must be 'numba' or 'numpy', got {wanted!r}")
    return "numba" if wanted == "numba" and available() else "numpy"


#: ``"numba"`` (compiled kernels) or ``"numpy"`` (the reference); read at every call
BACKEND = _initial_backend()


def read_only(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous read-only array: itself where it is one, else a read-only view of it (of a
    C-contiguous copy where it is not contiguous); the same elements.  The wrappers pass an array a kernel
    only reads through this: numba compiles a kernel once for each mix of writability and layout it is
    called with (a message's bytes come read-only, a server's own arrays writeable), ~2-8 s of CPU each on a
    fresh install (session 36)."""
    if a.flags.c_contiguous and not a.flags.writeable:
        return a
    view = np.ascontiguousarray(a).view()
    view.flags.writeable = False
    return view


def compiled() -> bool:
    """Whether calls now take the compiled kernels."""
    return BACKEND == "numba"


@contextmanager
def compile_clock() -> Iterator[Callable[[], float]]:
    """Measure the wall seconds numba spends compiling kernels while the body runs: yields a function
    that returns them (so far, and after the body).  Only compilations count -- a kernel that numba
    loads from its on-disk cache, or that this process has loaded already, adds nothing -- so a run
    after the first on a machine reads about 0.  numba compiles under one process-wide lock, so
    compilations on any thread add up without overlap (numba's ``numba:compile`` event, timed
    outermost first).  Without numba the function returns 0."""
    try:
        from numba.core import event
    except ImportError:
        yield lambda: 0.0
        return
    timer = event.TimingListener()
    with event.install_listener("numba:compile", timer):
        yield lambda: timer.duration if timer.done else 0.0


def sha_compiled() -> bool:
    """Whether SHA-256 of many messages takes the SHA-NI kernel (:mod:`secemb.fss._shani`):
    the compiled kernels are on (:func:`compiled`) and the CPU has the SHA extensions."""
    return compiled() and bool(host_cpu_features().get("sha"))


#: the signals whose Python handler :func:`signals_deferred` holds back (those a handler that
#: raises is commonly installed for: Ctrl-C's ``KeyboardInterrupt``, a server's shutdown, a timer)
_DEFERRED = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGALRM", "SIGUSR1", "SIGUSR2")
                  if hasattr(signal, name))


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Run the body with the main thread's Python signal handlers held back: a signal of
    :data:`_DEFERRED` that arrives meanwhile is noted and raised again (once, however often it
    arrived) once the body is done, when its own handler runs as usual (Ctrl-C still raises
    ``KeyboardInterrupt``, just after).

    For a numba kernel called with a ``numpy.random.Generator``: numba (0.68) unboxes the
    generator through Python calls (``ctypes.cast``) and ignores their failure, so a handler
    that raises there -- Ctrl-C at the wrong instant -- leaves the kernel a garbage function
    pointer to call: the process dies of SIGSEGV (tests/fss/test_kernel_signals.py).  Python runs
    signal handlers only in the main thread, so elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def note(signum: int, frame: Any) -> None:
        arrived.append(signum)

    held = {sig: signal.signal(sig, note) for sig in _DEFERRED if callable(signal.getsignal(sig))}
    try:
        yield
    finally:
        for sig, handler in held.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(arrived):
            signal.raise_signal(sig)
