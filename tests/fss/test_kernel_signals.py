"""Ctrl-C during a compiled kernel that takes a ``numpy.random.Generator`` (the cuckoo placement).

numba unboxes the generator through Python calls and ignores their failure, so a
``KeyboardInterrupt`` raised there made the kernel call a garbage function pointer: CI saw
``secemb train`` die of SIGSEGV on Ctrl-C (tests/cli/test_outputs_safe.py), reproduced here in
a few interrupts.  :func:`secemb.fss.kernels.signals_deferred` holds the handler back across
the call.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from secemb.fss import kernels

_CHILD = textwrap.dedent("""
    import signal, sys
    import numpy as np
    from secemb.fss import kernels
    from secemb.fss.cuckoo import CuckooLayout

    signal.signal(signal.SIGINT, signal.default_int_handler)
    assert kernels.compiled()
    layout, rng = CuckooLayout(num_items=1682, num_buckets=300), np.random.default_rng(1)
    items = np.arange(0, 1600, 7, dtype=np.int64)
    layout.assign(items, rng)  # compiled before the parent starts interrupting
    hits = 0

    def work():
        global hits
        while hits < 20:
            try:
                layout.assign(items, rng)
            except KeyboardInterrupt:
                hits += 1

    print("ready", flush=True)
    while True:
        try:
            work()
            break
        except KeyboardInterrupt:  # landed in the loop's own bookkeeping
            hits += 1
    print("hits", hits, flush=True)
""")


@pytest.mark.skipif(not kernels.available(), reason="no compiled kernels here")
def test_ctrl_c_during_cuckoo_placement_is_a_keyboard_interrupt_not_a_crash() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        sent = 0
        while proc.poll() is None and sent < 1000:  # before the fix: SIGSEGV within ~10 of them
            proc.send_signal(signal.SIGINT)
            sent += 1
            time.sleep(0.003)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != -signal.SIGSEGV, f"died of SIGSEGV after {sent} interrupts"
    # exit 0 having caught its 20 interrupts (or, rarely, one landed outside its try: -SIGINT)
    assert (proc.returncode, out) == (0, "hits 20\n") or proc.returncode == -signal.SIGINT


def test_a_signal_in_the_body_is_raised_once_it_is_done() -> None:
    earlier = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        reached = []
        with pytest.raises(KeyboardInterrupt):
            with kernels.signals_deferred():
                signal.raise_signal(signal.SIGINT)
                signal.raise_signal(signal.SIGINT)  # noted once
                reached.append("end of body")
        assert reached == ["end of body"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with kernels.signals_deferred():  # nothing arrived: nothing raised
            pass
    finally:
        signal.signal(signal.SIGINT, earlier)


def test_ignored_signals_stay_ignored_and_other_threads_are_left_alone() -> None:
    earlier = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with kernels.signals_deferred():
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            signal.raise_signal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, earlier)
    seen: list[object] = []

    def other() -> None:
        with kernels.signals_deferred():  # signal.signal would raise ValueError outside the main thread
            seen.append(signal.getsignal(signal.SIGINT))

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [signal.getsignal(signal.SIGINT)]
