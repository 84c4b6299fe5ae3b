"""``python -m secemb.bench.robust --workers N`` (issue 34 (b)): the servers of every kind of round
evaluate and check on a thread backend of N threads; the figures are those of the serial run's kind
(the same bytes), and a bounded round still draws one challenge for its batch of uploads."""

from __future__ import annotations

from secemb.bench.robust import measure


def test_workers_run_every_kind_on_threads_with_the_serial_bytes() -> None:
    (serial,) = measure(3, 1, size="ml100k", layouts=("cuckoo",), bound=True)
    (threads,) = measure(3, 1, size="ml100k", layouts=("cuckoo",), bound=True, workers=2)
    assert (serial["workers"], threads["workers"]) == (1, 2)
    assert threads["challenges"] == 1
    for kind in ("unchecked", "checked", "bounded"):
        for field in ("device_upload_bytes", "server_bytes"):
            assert threads[kind][field] == serial[kind][field], (kind, field)
        assert threads[kind]["server_s"] > 0
