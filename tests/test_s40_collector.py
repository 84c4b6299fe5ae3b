"""The garbage collector during a training run (secemb.collector, session 40): the objects
that exist when the run starts are frozen (not scanned by its collections) and unfrozen when it
ends, whatever the outcome; a process that froze objects itself, or disabled the collector, is
left as it is."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from typing import Any

import pytest

from secemb.collector import sparing_the_setup_heap
from secemb.training import Experiment, run_experiment


class _Node:
    def __init__(self) -> None:
        self.other: Any = self


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    assert gc.get_freeze_count() == 0, "a test left the heap frozen"
    yield
    gc.unfreeze()


def _cycle() -> weakref.ref[_Node]:
    """A reference cycle no one holds: only the cyclic collector frees it."""
    return weakref.ref(_Node())


def test_garbage_made_before_waits_garbage_made_within_is_collected() -> None:
    gc.collect()  # no automatic collection between the cycle's making and the freeze
    before = _cycle()
    with sparing_the_setup_heap() as froze:
        assert froze and gc.get_freeze_count() > 0
        within = _cycle()
        gc.collect()
        assert within() is None, "the run's own cyclic garbage is collected"
        assert before() is not None, "what existed before the run is not scanned"
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert before() is None


def test_unfrozen_when_the_block_raises() -> None:
    with pytest.raises(KeyboardInterrupt), sparing_the_setup_heap():
        raise KeyboardInterrupt
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_its_heap_keeps_it_frozen() -> None:
    gc.freeze()
    with sparing_the_setup_heap() as froze:
        assert not froze
    # still frozen (objects freed by their last reference meanwhile leave the count, so no equality)
    assert gc.get_freeze_count() > 0


def test_a_disabled_collector_is_left_alone() -> None:
    gc.disable()
    try:
        with sparing_the_setup_heap() as froze:
            assert not froze and gc.get_freeze_count() == 0
    finally:
        gc.enable()


def test_a_training_run_freezes_its_setup_heap_and_unfreezes_it() -> None:
    seen: list[int] = []
    run_experiment(Experiment(dataset="synthetic", protocol="plaintext", epochs=1),
                   on_start=lambda _: seen.append(gc.get_freeze_count()),
                   on_epoch=lambda _: seen.append(gc.get_freeze_count()))
    assert len(seen) == 2 and all(n > 0 for n in seen)
    assert gc.get_freeze_count() == 0


def test_a_server_serves_with_its_start_up_heap_frozen(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """``secemb serve``'s :func:`secemb.server.serve`: the listener runs with the heap it loaded
    frozen, and the node is stopped and the heap unfrozen when it returns (the listener, node and
    app stand-ins record what they see)."""
    import contextlib
    import types

    import secemb.server as server
    from secemb.server import app, listener

    seen: list[str] = []
    node = types.SimpleNamespace(stop=lambda: seen.append(f"stopped {gc.get_freeze_count() > 0}"))
    monkeypatch.setattr(server, "make_node", lambda cfg: node)
    monkeypatch.setattr(server, "hold_state_dir", lambda path: contextlib.nullcontext())
    monkeypatch.setattr(app, "create_app", lambda n: "app")
    monkeypatch.setattr(listener, "bind", lambda host, port: types.SimpleNamespace(close=lambda: None))
    monkeypatch.setattr(listener, "run", lambda a, cfg, **kw: seen.append(f"served {a} {gc.get_freeze_count() > 0}"))
    cfg = types.SimpleNamespace(check_listener=lambda: None, host="127.0.0.1", port=0, party=0, state_dir=tmp_path)
    server.serve(cfg)  # type: ignore[arg-type]
    assert seen == ["served app True", "stopped False"]
    assert gc.get_freeze_count() == 0
