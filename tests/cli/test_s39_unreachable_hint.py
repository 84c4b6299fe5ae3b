"""Session 39 (lead; helper U's finding): ``secemb admin open-round`` with the servers down printed
``ConnectError: [Errno 111] Connection refused`` and the URL, with nothing to say what to check.  A
refused connection now says that nothing listens at the URL (a TLS failure, also a ConnectError, does not)."""

from __future__ import annotations

import socket

import pytest

from secemb.transport.errors import Unreachable
from secemb.transport.network import ApiClient


def test_a_refused_connection_says_nothing_listens_there() -> None:
    with socket.socket() as s:  # a port on 127.0.0.1 that was free a moment ago, closed: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = ApiClient(f"http://127.0.0.1:{port}", timeout=5.0)
    with pytest.raises(Unreachable) as err:
        client.request("GET", "/v1/health")
    text = str(err.value)
    assert f"GET http://127.0.0.1:{port}/v1/health: ConnectError" in text
    assert text.endswith(f"(nothing listens at http://127.0.0.1:{port}: is that server running?)")
