"""Guard pages for children that check a compiled kernel reads or writes nothing outside its arrays.

:data:`PLACE` is Python source for a child interpreter (``python -c PLACE + body``): it defines
``place(a, at)``, a copy of the array ``a`` in a fresh mapping between two ``PROT_NONE`` pages, its
last byte the last before the upper guard (``at="end"``) or its first the first after the lower one
(``at="start"``), so that a one-byte overrun ends the child with SIGSEGV (the technique of
``tests/fss/test_s24_address_kernels_review.py``, whose own check shows the guard catches one byte).
Linux only (``mprotect`` through ctypes).
"""

import textwrap

from _server_template import run_script

PLACE = """
import ctypes, mmap
import numpy as np
PAGE = mmap.PAGESIZE
libc = ctypes.CDLL(None, use_errno=True)
libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)

def place(a, at):
    pages = -(-a.nbytes // PAGE) + 2
    mm = mmap.mmap(-1, pages * PAGE)
    base = np.frombuffer(mm, np.uint8)
    for off in (0, (pages - 1) * PAGE):
        assert libc.mprotect(base.ctypes.data + off, PAGE, 0) == 0
    lo = PAGE if at == "start" else (pages - 1) * PAGE - a.nbytes
    g = base[lo : lo + a.nbytes].view(a.dtype).reshape(a.shape)
    g[...] = a
    return g
"""


def run_guarded(body: str, timeout: float = 120) -> list[str]:
    """Run ``PLACE + body`` in a child interpreter (forked from the suite's warm template where it can be:
    :func:`_server_template.run_script`); its output's words.  Fails (AssertionError, with its stderr's tail)
    where the child did not exit 0: a signal such as SIGSEGV from a guard, or a failed assertion of its own."""
    got = run_script(PLACE + textwrap.dedent(body), timeout=timeout)
    assert got.returncode == 0, (got.returncode, got.stderr[-2000:])
    return got.stdout.split()
