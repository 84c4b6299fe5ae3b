"""Compiled kernels of the FSS hot loops, and the switch between them and the numpy reference.

Hazmat layer.  Every hot loop of the server's full-domain work has a pure-numpy reference
(in :mod:`~secemb.fss.tree` and :mod:`~secemb.fss.convert`, AES through OpenSSL in large
batched calls) and a numba kernel here that fuses the AES rounds (AES-NI/VAES instructions,
:mod:`secemb.fss._aesni`) with the work between them: the tree levels of a cache-resident
subtree with their correction words and control bits, the payload conversion, the shares'
correction ``t * CW`` and the aggregation sums.  The two give the same bits
(``tests/fss/test_fss_kernels.py``).

Selection: :data:`BACKEND` is ``"numba"`` when numba is installed and the CPU has AES-NI,
``"numpy"`` otherwise; the environment variable ``SECEMB_FSS_KERNELS=numpy`` forces the
reference (read once at import; tests and benchmarks assign :data:`BACKEND` directly).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from secemb.errors import InvalidParameters

__all__ = ["BACKEND", "compiled", "available", "host_cpu_features", "sha_compiled", "signals_deferred"]


@cache
def host_cpu_features() -> dict[str, bool]:
    """LLVM's feature flags of this CPU (``"aes"``, ``"vaes"``, ``"avx2"``, ...), through llvmlite
    (numba's code generator; raises ``ImportError`` without it)."""
    import llvmlite.binding as llb

    return dict(llb.get_host_cpu_features())


def available() -> bool:
    """Whether the compiled kernels can run here (numba imports, CPU with AES-NI).

    It imports numba (a numba that refuses this numpy raises ``ImportError``: the reference is
    used then) but not numba's registries, which :mod:`secemb.fss._aesni` loads when a kernel
    is first used.
    """
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return bool(host_cpu_features().get("aes"))


def _initial_backend() -> str:
    wanted = os.environ.get("SECEMB_FSS_KERNELS", "numba")
    if wanted not in ("numba", "numpy"):
        raise InvalidParameters(f"SECEMB_FSS_KERNELS must be 'numba' or 'numpy', got {wanted!r}")
    return "numba" if wanted == "numba" and available() else "numpy"


#: ``"numba"`` (compiled kernels) or ``"numpy"`` (the reference); read at every call
BACKEND = _initial_backend()


def compiled() -> bool:
    """Whether calls now take the compiled kernels."""
    return BACKEND == "numba"


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
