"""Refusals seen from a child interpreter, for the tests that call the compiled kernels with hostile
arguments in a fresh process, so that a memory error is the child's death and not pytest's
(tests/review/test_session20_kernel_inputs.py, tests/fss/test_s24_address_kernels_review.py; session
25: the two child preludes each defined ``refused``).  A module of its own in tests/, imported by
name, as round_setup is.

The child prints one verdict line per attempt (:func:`refused`, whose source a test puts in the
child's code: :data:`REFUSED`); the test reads them back (:func:`assert_all_refused`).
"""

import inspect
from collections.abc import Callable, Iterable


def refused(what: str, fn: "Callable[[], object]", *errors: type[BaseException]) -> None:
    """In the child: call ``fn``; print ``REFUSED <what> <exception's class>`` where it raises one
    of ``errors``, ``ACCEPTED <what>`` where it returns.  Any other exception propagates (the child
    fails)."""
    try:
        fn()
    except errors as exc:
        print("REFUSED", what, type(exc).__name__)
        return
    print("ACCEPTED", what)


REFUSED = inspect.getsource(refused)
"""The source of :func:`refused`, for a child's prelude (it needs no import there: the one
annotation that names an import is a string)."""


def assert_all_refused(lines: Iterable[str], expected: int, error: str | None = None) -> None:
    """The child's output ``lines`` hold exactly ``expected`` verdicts of :func:`refused`, every one
    ``REFUSED`` (and, given ``error``, with that exception's class)."""
    lines = list(lines)
    verdicts = [ln for ln in lines if ln.startswith(("REFUSED", "ACCEPTED"))]
    assert len(verdicts) == expected, lines
    wrong = [ln for ln in verdicts if not ln.startswith("REFUSED") or (error is not None and not ln.endswith(error))]
    assert not wrong, wrong
