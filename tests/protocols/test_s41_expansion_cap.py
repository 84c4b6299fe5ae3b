"""The cuckoo expansion is capped at ``MAX_EXPANSION`` (8 buckets a request row; session 41): a device
refuses a round document announcing more buckets than that a row (finding S41-R4), so no server, run
or command may be configured past it -- refused up front, one line, never a traceback."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from secemb.cli import app
from secemb.errors import InvalidParameters
from secemb.fss.cuckoo import MAX_EXPANSION, CuckooLayout
from secemb.protocols import get_protocol


def test_the_cap_is_eight_buckets_a_row() -> None:
    assert MAX_EXPANSION == 8.0


def test_protocols_and_layouts_take_up_to_the_cap_and_refuse_past_it() -> None:
    assert get_protocol("secemb", layout="cuckoo", expansion=MAX_EXPANSION).expansion == MAX_EXPANSION
    assert CuckooLayout.for_request_size(100, 10, expansion=MAX_EXPANSION).num_buckets == 80
    for bad in (MAX_EXPANSION + 0.5, 0.5, float("nan")):
        with pytest.raises(InvalidParameters, match="expansion must be in"):
            get_protocol("secemb", layout="cuckoo", expansion=bad)
        with pytest.raises(InvalidParameters, match="expansion must be in"):
            CuckooLayout.for_request_size(100, 10, expansion=bad)


@pytest.mark.parametrize("command", ["train", "demo"])
def test_the_commands_refuse_an_expansion_past_the_cap_with_exit_2(command: str) -> None:
    res = CliRunner().invoke(app, [command, "--expansion", "9", "--epochs", "1"])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert "--expansion" in res.output and "Traceback" not in res.output
