"""The cyclic garbage collector during a training run or a server's life: what existed before
it is not scanned again.

A training process holds a large heap of long-lived objects before its first round: the
dataset, the model, the protocol's roles and, with the compiled kernels, numba's registries and
typed functions (136,500 tracked objects at the start of a SecEmb ML-100K run, 78,700 at a
plaintext one's before the kernels load; session 40).  Python's collector walks
all of them in every full collection, and a run's rounds allocate enough container objects to
trigger one every few epochs: measured at ML-100K (MF, the default options, 4 epochs of each
protocol, session 40), a full collection cost 74-117 ms of CPU once in every four epochs of both
plaintext and SecEmb, against 3-17 ms an epoch for all the young ones together (docs/results.md,
"Glue of the secure path").

:func:`sparing_the_setup_heap` moves every object tracked when the run starts to the
collector's permanent generation (:func:`gc.freeze`) and back at its end (:func:`gc.unfreeze`),
so collections during the run look at what the run made.  A training run
(:func:`secemb.sim.driver.run`) and a server process (:func:`secemb.server.serve`, around its
listener) use it: in ``secemb bench robust``'s rounds, 33 rounds of 20 devices, the collections
took 59-60 ms of CPU with the server modules and kernels scanned and 12-14 ms with them frozen
(two alternating pairs, one helper running, load average 1.4 after them, session 40).  Nothing
about the model depends on it: objects still go when their last reference does, and the run's
own cyclic garbage is still collected; only cyclic garbage that existed before the run (which a
collection before it would have freed) waits until the run ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["sparing_the_setup_heap"]


@contextmanager
def sparing_the_setup_heap() -> Iterator[bool]:
    """Within the block, the collector skips every object tracked when it starts (frozen, and
    unfrozen on leaving it, also on an exception).  Yields whether it froze them: not when the
    process has frozen objects already (:func:`gc.get_freeze_count` above 0), whose owner
    decides when they are unfrozen, nor while the collector is disabled.  Process-wide, like
    the collector itself; not re-entrant (an inner block finds the heap frozen and does nothing).

    A ``gc.freeze()`` by another owner within the block (a library freezing before it forks) is
    left to that owner: the block does not unfreeze where the frozen count grew past its own
    (freed objects only shrink it; S40-R3).  If the other owner's freeze came after as many of
    the block's frozen objects were freed as it added, the block cannot tell, and thaws it."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield False
        return
    gc.freeze()
    mine = gc.get_freeze_count()
    try:
        yield True
    finally:
        if gc.get_freeze_count() <= mine:
            gc.unfreeze()
