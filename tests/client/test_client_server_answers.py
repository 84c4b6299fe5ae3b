"""What a device does with a server's 2xx answer that is not what the API promises: a body that
is not JSON (a proxy's HTML page, a truncated answer) is an :class:`InvalidMessage` from
:class:`ApiClient`, never a ``JSONDecodeError`` traceback; a round status that is not a JSON
object is an :class:`InvalidMessage` from :meth:`DeviceClient.round_status`."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from _client_cli import SERVERS, run_client

from secemb.client.device import DeviceClient
from secemb.errors import InvalidMessage
from secemb.transport.network import ApiClient


def _api(content: bytes, content_type: str = "text/html") -> ApiClient:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=content, headers={"content-type": content_type})

    return ApiClient("https://127.0.0.1:9", http=httpx.Client(transport=httpx.MockTransport(answer)))


@pytest.mark.parametrize("content", [b"<html>502 Bad Gateway</html>", b'{"round_id": 1', b"\xff\xfe\x00"])
def test_an_answer_that_is_not_json_is_an_invalid_message(content) -> None:
    api = _api(content)
    with pytest.raises(InvalidMessage, match="not JSON"):
        api.get_json("/v1/round")
    with pytest.raises(InvalidMessage, match="not JSON"):
        api.post_json("/v1/admin/rounds", {"participants": [1]})


def test_json_answers_still_parse() -> None:
    assert _api(b'{"state": "open"}', "application/json").get_json("/v1/round") == {"state": "open"}
    assert _api(b"", "application/json").post_json("/v1/count") is None


def test_secemb_client_waits_out_a_server_that_answers_html(monkeypatch) -> None:
    """Every ``GET /v1/round`` answered with an HTML page: no round is open as far as the
    device can tell; it gives up after ``--wait`` with exit 1, no traceback, nothing sent."""
    sent: list[str] = []

    def html(self: ApiClient, method: str, path: str, **kwargs: Any) -> httpx.Response:
        sent.append(f"{method} {path}")
        return httpx.Response(200, content=b"<html>maintenance</html>", headers={"content-type": "text/html"})

    doc = run_client(monkeypatch, None, SERVERS, 1, "html", request=html)
    assert "no open round" in doc["error"], doc
    assert sent and all(s == "GET /v1/round" for s in sent), sent


class _StatusLink:
    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def round_status(self, round_id: int) -> Any:
        return self.doc


@pytest.mark.parametrize("doc", [[], "committed", None, 3])
def test_a_round_status_that_is_not_an_object_is_an_invalid_message(doc) -> None:
    client = DeviceClient.over(1, (_StatusLink(doc), _StatusLink(doc)), min_users=2)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="round status"):
        client.round_status(4)


def test_an_answer_whose_body_does_not_decode_is_an_invalid_message() -> None:
    """A body that does not decode by its ``Content-Encoding`` raised ``httpx.DecodingError``
    (not a ``TransportError``, so not :class:`Unreachable`): a traceback in every command, a
    500 in server 0 asking server 1.  It is an :class:`InvalidMessage` for every call."""
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b'{"state": "open"}', headers={"content-encoding": "gzip"})

    api = ApiClient("https://127.0.0.1:9", http=httpx.Client(transport=httpx.MockTransport(answer)))
    for call in (lambda: api.get_json("/v1/round"), lambda: api.get_bytes("/v1/rounds/1/dense"),
                 lambda: api.post_bytes("/v1/rounds/1/upload", b"x")):
        with pytest.raises(InvalidMessage, match="does not decode"):
            call()
