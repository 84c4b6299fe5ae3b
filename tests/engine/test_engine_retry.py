"""Issue 12, finding 8: the engine's operator calls (model fetch, status, count phase, opening,
closing) retry a restarting server with backoff (tenacity) and give up with a clear error."""

from __future__ import annotations

import pytest

from secemb.sim.admin import RoundAborted, retry
from secemb.transport.errors import RemoteError, Unreachable


class _Restarting:
    """A server call that fails ``failures`` times with ``error``, then answers."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "model"


@pytest.mark.parametrize("error", [Unreachable("connection refused"),
                                   RemoteError(503, "peer_unavailable", "restarting")])
def test_finding8_operator_calls_are_retried_while_a_server_restarts(error):
    call = _Restarting(3, error)
    assert retry(call, 10.0, "fetching the model") == "model" and call.calls == 4


def test_finding8_a_conflict_is_retried_only_where_the_caller_says_it_clears():
    conflict = RemoteError(409, "conflict", "count phase of a restarted peer")
    call = _Restarting(1, conflict)
    assert retry(call, 10.0, "count phase", retry_conflict=True) == "model" and call.calls == 2
    call = _Restarting(1, conflict)
    with pytest.raises(RemoteError):
        retry(call, 10.0, "opening a round")
    assert call.calls == 1


def test_finding8_bad_requests_are_not_retried_and_a_dead_server_gives_up_with_the_reason():
    call = _Restarting(5, RemoteError(422, "invalid_parameters", "n_p"))
    with pytest.raises(RemoteError):
        retry(call, 10.0, "opening a round")
    assert call.calls == 1
    call = _Restarting(10 ** 6, Unreachable("connection refused"))
    with pytest.raises(RoundAborted, match="fetching the model: gave up after 0.3 s: connection refused"):
        retry(call, 0.3, "fetching the model")
    assert 2 <= call.calls < 50
