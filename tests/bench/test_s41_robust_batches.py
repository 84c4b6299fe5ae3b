"""``secemb bench robust --batch N`` (session 41): the servers take the round's retrieval requests and
uploads ``N`` devices at a time, as a deployment's server takes those that arrive together over HTTP
(its ``Batcher``), so that a bounded cuckoo round draws one challenge per upload batch, not one per
round; the bytes are those of the one-batch round (framing is per message, not per batch)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from secemb.bench.robust import measure
from secemb.cli import app


def test_each_upload_batch_draws_its_own_challenge_and_the_bytes_do_not_change() -> None:
    (whole,) = measure(5, 1, size="ml100k", layouts=("cuckoo",), bound=True)
    (batched,) = measure(5, 1, size="ml100k", layouts=("cuckoo",), bound=True, batch=2)
    assert (whole["batch"], batched["batch"]) == (0, 2)
    # 5 devices in batches of 2, 2 and 1: three challenges; one batch: one
    assert (whole["challenges"], batched["challenges"]) == (1, 3)
    for kind in ("unchecked", "checked", "bounded"):
        for field in ("device_upload_bytes", "server_bytes"):
            assert batched[kind][field] == whole[kind][field], (kind, field)


def test_a_batch_of_the_whole_round_is_the_one_batch_round() -> None:
    (line,) = measure(3, 1, size="ml100k", layouts=("cuckoo",), bound=True, batch=7)
    assert line["challenges"] == 1 and line["batch"] == 7


def test_full_layout_challenges_stay_per_device_in_batches() -> None:
    # the full layout's challenge is each device's own (derived at retrieval), however the uploads arrive
    (line,) = measure(3, 1, size="ml100k", layouts=("full",), bound=True, batch=2)
    assert line["challenges"] == 3


def test_cli_batch_option() -> None:
    res = CliRunner().invoke(app, ["bench", "robust", "--users", "3", "--repeats", "1", "--json", "--bound",
                                   "--layouts", "cuckoo", "--batch", "1"])
    assert res.exit_code == 0, res.output
    (line,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert (line["batch"], line["challenges"]) == (1, 3)
    table = CliRunner().invoke(app, ["bench", "robust", "--users", "2", "--repeats", "1", "--layouts", "cuckoo",
                                     "--batch", "1"])
    assert table.exit_code == 0 and "batches of 1" in table.output
    refused = CliRunner().invoke(app, ["bench", "robust", "--batch", "-1"])
    assert refused.exit_code == 2
