"""Server 1's model sync (:meth:`FollowerNode.peer_model`) outside a round's commit: the
current model again is an idempotent duplicate, another model of the current version is
refused (409), bytes that are no MODEL message of either version are refused as such, and
none of them changes the installed model."""

from __future__ import annotations

import pytest
from deviation_helpers import in_process, play_round

from secemb.digest import model_sha256
from secemb.errors import InvalidMessage
from secemb.round import messages
from secemb.server.errors import Conflict


def test_a_sync_of_the_current_model_is_a_duplicate_and_another_is_refused():
    pair, servers = in_process()
    follower = servers.nodes[1]
    r, outcome, errors = play_round(pair)
    assert outcome["state"] == "committed" and not errors
    assert follower.version == 1
    sha = follower.model_sha()
    table, dense = follower.table.copy(), follower.dense.copy()

    again = messages.encode_model(1, table, dense)
    assert follower.peer_model(again, r) == {"model_version": 1, "duplicate": True}

    other = table.copy()
    other[0, 0] += 1.0
    with pytest.raises(Conflict, match="different model for version 1"):
        follower.peer_model(messages.encode_model(1, other, dense), r)
    with pytest.raises(InvalidMessage):
        follower.peer_model(messages.encode_model(5, table, dense), r)  # neither the next nor the current
    with pytest.raises(InvalidMessage):
        follower.peer_model(b"not a model", r)
    assert (follower.version, follower.model_sha()) == (1, sha) == (1, model_sha256(follower.table, follower.dense))
    assert not follower.status()["alarms"]


def test_a_next_version_model_without_a_staged_one_is_refused():
    pair, servers = in_process()
    follower = servers.nodes[1]
    with pytest.raises(Conflict, match="computed no model"):
        follower.peer_model(messages.encode_model(1, follower.table, follower.dense), 0)
    assert follower.version == 0 and not follower.status()["alarms"]
