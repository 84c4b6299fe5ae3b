"""SFSL's ``min_row_holders`` as a setting (session 26, helper G): validated where a run, a node
and a device take it; 1 gives the paper's sums (every row a survivor holds, whatever its
number of holders: a plaintext twin) and the paper's dropouts; the default 2 gives other sums on
the same round; a device takes part only in rounds that announce its deployment's value; a
protocol made with 1 warns, naming finding R6."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest
import torch
from sfsl_world import plaintext_twin, world

from secemb.data.ctr import TaobaoShaped, split_clicks
from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.exchange import ExchangeRun
from secemb.protocols.sfsl import SFSLRun, TrainingSettings, sfsl_round
from secemb.protocols.sfsl.parties import MIN_ROW_HOLDERS, R6_WARNING
from secemb.protocols.sfsl.protocol import SFSLProtocol
from secemb.protocols.sfsl.staged import SFSLNode
from secemb.randomness import CtrDrbg
from secemb.secagg import SecAggConfig

torch.set_num_threads(1)


#: the one message of min_row_holders 3 in a round of 3 devices (threshold 2), wherever it is checked
_OVER_3 = re.escape("min_row_holders (at most the threshold of a round of 3 devices) must be an int in [1, 2], got 3")


def _settings(m: int) -> TrainingSettings:
    return TrainingSettings(lr=0.5, batch=4, bound=0.5, min_row_holders=m)


@pytest.mark.parametrize("m", [1, 2])
def test_each_min_row_holders_gives_its_plaintext_twin_bit_for_bit(m: int) -> None:
    server, devices = world("CPP1")
    rep = sfsl_round(server, devices, 1, _settings(m), np.random.default_rng(11), _rng=CtrDrbg(5))
    assert rep.survivors == [0, 1, 2, 3, 4]
    twin, twin_devices = world("CPP1")
    single = plaintext_twin(twin, twin_devices, 1, rep.survivors, _settings(m))
    assert single > 0  # rows one device holds: where the two settings differ
    assert np.array_equal(server.table, twin.table) and np.array_equal(server.dense, twin.dense)
    # and not the other setting's sums
    other, other_devices = world("CPP1")
    plaintext_twin(other, other_devices, 1, rep.survivors, _settings(3 - m))
    assert not np.array_equal(server.table, other.table)


def test_min_row_holders_1_keeps_the_papers_dropout_after_share_keys() -> None:
    """Device 3 drops after ShareKeys: with 1 the round completes over the four others (its mask
    key revealed, as in the paper); with 2 the same round aborts (tests/protocols/test_sfsl.py)."""
    server, devices = world("CPP1")
    rep = sfsl_round(server, devices, 1, _settings(1), np.random.default_rng(11), drop_after={3: 2},
                     _rng=CtrDrbg(5))
    assert rep.survivors == [0, 1, 2, 4]
    twin, twin_devices = world("CPP1")
    plaintext_twin(twin, twin_devices, 1, [0, 1, 2, 4], _settings(1))
    assert np.array_equal(server.table, twin.table) and np.array_equal(server.dense, twin.dense)


@pytest.mark.parametrize("bad", [0, -1, 4, True, 1.0, "2"])
def test_settings_and_runs_refuse_min_row_holders_out_of_range(bad: object) -> None:
    # 5 devices: threshold 3
    with pytest.raises(InvalidParameters, match="min_row_holders"):
        TrainingSettings(min_row_holders=bad).check(5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameters, match=r"min_row_holders .*must be an int in \[1, 3\]"):
        SFSLRun(clients_per_round=5, settings=TrainingSettings(min_row_holders=bad))  # type: ignore[arg-type]
    for good in (1, 2, 3):
        assert TrainingSettings(min_row_holders=good).check(5).min_row_holders == good
    assert TrainingSettings().min_row_holders == MIN_ROW_HOLDERS == 2


def test_every_check_of_min_row_holders_is_one_rule_with_one_message() -> None:
    """Session 27 (helper D): the settings, a run, a node opening a round and the secure sum's
    config refuse the same values with the same words; what they accept the others accept."""
    server, _ = world("CPP1")
    for m in (0, 3, 4, True, 1.0, "2"):
        seen = set()
        for check in (lambda: TrainingSettings(min_row_holders=m).check(3),  # noqa: B023 - called at once
                      lambda: SFSLRun(clients_per_round=3, settings=TrainingSettings(min_row_holders=m)),  # noqa: B023
                      lambda: SFSLNode(server, TrainingSettings(min_row_holders=m)).open_round(1, [0, 1, 2])):  # noqa: B023
            with pytest.raises(InvalidParameters) as exc:
                check()
            seen.add(str(exc.value))
        assert seen == {"min_row_holders (at most the threshold of a round of 3 devices) must be an int in [1, 2], "
                        f"got {m!r}"}, seen
        with pytest.raises(InvalidParameters) as exc:
            SecAggConfig(length=4, threshold=2, sparse=True, signed=True, min_row_holders=m)  # type: ignore[arg-type]
        assert str(exc.value) == f"min_row_holders (at most the round's threshold) must be an int in [1, 2], got {m!r}"
    for m in (1, 2):
        assert TrainingSettings(min_row_holders=m).check(3).min_row_holders == m
        assert SFSLRun(clients_per_round=3, settings=TrainingSettings(min_row_holders=m)).settings.min_row_holders == m
        assert SFSLNode(server, TrainingSettings(min_row_holders=m)).open_round(1, [0, 1, 2])["settings"][
            "min_row_holders"] == m
        assert SecAggConfig(length=4, threshold=2, sparse=True, signed=True, min_row_holders=m).min_row_holders == m


def test_a_node_refuses_to_open_a_round_too_small_for_its_min_row_holders() -> None:
    server, _ = world("CPP1")
    node = SFSLNode(server, TrainingSettings(min_row_holders=3))
    with pytest.raises(InvalidParameters, match=_OVER_3):
        node.open_round(1, [0, 1, 2])
    doc = node.open_round(1, [0, 1, 2, 3, 4])  # threshold 3: refused nothing above
    assert doc["settings"]["min_row_holders"] == 3


@pytest.fixture(scope="module")
def clicks():
    return split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))


def _protocol(clicks, **options: object) -> SFSLProtocol:
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP1", batch=8, data=clicks,
                        **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, 3, "1", None])
def test_the_protocol_refuses_min_row_holders_out_of_range(clicks, bad: object) -> None:
    with pytest.raises(InvalidParameters, match=r"min_row_holders .*must be an int in \[1, 2\]"):
        _protocol(clicks, min_row_holders=bad)


@pytest.mark.parametrize("deployed, announced", [(2, 1), (1, 2)])
def test_a_device_refuses_a_round_announcing_another_min_row_holders(clicks, deployed: int, announced: int) -> None:
    """A server announcing ``min_row_holders = 1`` to devices of a deployment of 2 (which would
    reopen finding R6) is refused like any other setting of its own; so is the converse."""
    device = _protocol(clicks, min_row_holders=deployed).make_device(0)
    doc = _protocol(clicks, min_row_holders=announced).make_server().node.open_round(1, [0, 1, 2])
    assert doc["settings"]["min_row_holders"] == announced
    with pytest.raises(InvalidMessage, match="settings other than the deployment's"):
        device.party(doc)
    without = {**doc, "settings": {k: v for k, v in doc["settings"].items() if k != "min_row_holders"}}
    with pytest.raises(InvalidMessage, match="not an SFSL round document"):
        device.party(without)
    same = _protocol(clicks, min_row_holders=deployed).make_server().node.open_round(1, [0, 1, 2])
    assert device.party(same).settings.min_row_holders == deployed


def test_a_device_refuses_a_min_row_holders_above_the_rounds_threshold(clicks) -> None:
    device = _protocol(clicks).make_device(0)
    doc = _protocol(clicks).make_server().node.open_round(1, [0, 1, 2])
    doc["settings"]["min_row_holders"] = 3  # threshold 2 in a round of 3
    with pytest.raises(InvalidMessage, match=_OVER_3):
        device.party(doc)


def test_a_protocol_with_min_row_holders_1_warns_naming_r6(clicks, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="secemb.protocols.sfsl.parties"):
        _protocol(clicks)
        _protocol(clicks, min_row_holders=2)
        assert caplog.messages == []
        _protocol(clicks, min_row_holders=1)
    assert caplog.messages == [R6_WARNING]
    assert "finding R6" in R6_WARNING and "min_row_holders = 1" in R6_WARNING
