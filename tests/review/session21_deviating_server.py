"""Session 21 (helper G): a deviating one-server node on 127.0.0.1 for the red-team tests of SFSL
devices and SecEA silos (``test_session21_sfsl_*.py``, ``test_session21_secea_*.py``).

:class:`DeviatingNode` serves the device endpoints of ``secemb serve``'s one-server API
(``GET /v1/exchange/round``, ``POST`` / ``GET /v1/exchange/rounds/{round}/{stage}``) to one
victim device, which takes part over HTTP as a deployed device does
(:func:`secemb.client.stages.take_part` over :class:`~secemb.transport.http.HttpStageLink`, or
``secemb client`` itself).  Behind it an honest node runs the round (the protocol's own
:class:`~secemb.protocols.base.ExchangeNode`): the round's other devices are played in process,
each stage closed as soon as the victim's message is in.  The deviation is ``tamper(stage,
answer)``: what the victim gets instead of the honest node's answer of ``stage`` (``None``: no
answer, a 204).  The honest node checks the victim's messages in full, so a refused message is
the victim's fault (400), never the stub's.

:class:`QuietHandler` and :class:`LoopbackServer` are the loopback HTTP stub's parts, shared with
the other session-21 stubs (``test_session21_deadline.py``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from secemb.errors import SecembError

Tamper = Callable[[str, bytes], bytes | None]


class QuietHandler(BaseHTTPRequestHandler):
    """A stub's request handler: HTTP/1.1, a 10 s socket timeout (a client never holds a test),
    no log lines; a subclass answers (``do_GET`` / ``do_POST``)."""

    protocol_version = "HTTP/1.1"
    timeout = 10

    def log_message(self, *args: Any) -> None:
        pass

    def start(self, status: int, headers: Mapping[str, str], length: int) -> None:
        """The answer's status line and ``headers``, with ``length`` as its content length; the
        connection closed after the answer."""
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(length))
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True


#: how often a test server's serving loop checks for its shutdown (socketserver's default, 0.5 s,
#: made every close wait up to that long)
POLL_S = 0.01


class LoopbackServer:
    """``handler`` served on 127.0.0.1 (a free port) by a daemon thread until :meth:`close` (which
    returns within one :data:`POLL_S` of the serving loop)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, args=(POLL_S,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def honest(stage: str, answer: bytes) -> bytes | None:
    """No deviation: the honest node's answer."""
    return answer


class DeviatingNode:
    """One round of ``node`` (an exchange node) served to device ``victim`` over HTTP on 127.0.0.1.

    ``doc``: the round document ``node.open_round`` returned; ``others``: the parties of the
    round's other devices (``message`` / ``accept``), played in process.  ``drip``: ``(stage,
    seconds)``: the victim's answer of that stage is written one byte every ``seconds`` (a slow
    server that never lets a read time out).  ``seen``: per request ``(method, path)``;
    ``posted``: the stages the victim sent, in order.
    """

    def __init__(self, node: Any, doc: Mapping[str, Any], others: Mapping[int, Any], *, victim: int = 0,
                 tamper: Tamper = honest, drip: tuple[str, float] | None = None) -> None:
        self.node, self.doc, self.others, self.victim, self.tamper = node, dict(doc), dict(others), victim, tamper
        self.drip = drip
        self.round_id = int(doc["round_id"])
        self.stages: list[str] = list(doc["stages"])
        self.done = 0  # stages closed
        self.seen: list[tuple[str, str]] = []
        self.posted: list[str] = []
        self._lock = threading.Lock()
        owner = self

        class Handler(QuietHandler):
            def _answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                path = self.path.split("?")[0]
                with owner._lock:
                    owner.seen.append((self.command, path))
                    status, out, kind = owner._route(self.command, path, body)
                self.start(status, {"content-type": kind}, len(out))
                drip = owner.drip
                try:
                    if drip is not None and self.command == "GET" and path.endswith(f"/{drip[0]}"):
                        for i in range(len(out)):
                            time.sleep(drip[1])
                            self.wfile.write(out[i:i + 1])
                    else:
                        self.wfile.write(out)
                except OSError:  # the reader hung up
                    pass

            do_GET = do_POST = _answer

        self.http = LoopbackServer(Handler)

    @property
    def url(self) -> str:
        return self.http.url

    def state(self) -> str:
        """The honest node's state of the round."""
        return str(self.node.outcome(self.round_id)["state"])

    def _route(self, method: str, path: str, body: bytes) -> tuple[int, bytes, str]:
        if method == "GET" and path == "/v1/exchange/round":
            stage = self.stages[self.done] if self.done < len(self.stages) else None
            return 200, json.dumps(self.doc | {"state": self.state(), "stage": stage}).encode(), "application/json"
        prefix = f"/v1/exchange/rounds/{self.round_id}/"
        stage = path[len(prefix):] if path.startswith(prefix) else ""
        if stage not in self.stages:
            return 404, b'{"error": "not found"}', "application/json"
        if method == "POST":
            try:
                self.node.receive(self.round_id, stage, self.victim, body)
            except SecembError as exc:
                return 400, json.dumps({"error": "refused", "detail": str(exc)}).encode(), "application/json"
            self.posted.append(stage)
            self._close(stage)
            return 200, b"", "application/octet-stream"
        try:
            answer = self.node.reply(self.round_id, stage, self.victim)
        except SecembError as exc:
            return 409, json.dumps({"error": "no answer", "detail": str(exc)}).encode(), "application/json"
        out = None if answer is None else self.tamper(stage, answer)
        return (204, b"", "application/octet-stream") if out is None else (200, out, "application/octet-stream")

    def _close(self, stage: str) -> None:
        """The other devices' messages of ``stage``, the stage closed, their answers taken."""
        try:
            for u, party in sorted(self.others.items()):
                self.node.receive(self.round_id, stage, u, party.message(stage))
            self.node.close(self.round_id, stage)
        except SecembError:  # the round aborted: the victim reads it in the round document
            self.done = len(self.stages)
            return
        self.done += 1
        for u, party in sorted(self.others.items()):
            try:
                answer = self.node.reply(self.round_id, stage, u)
            except SecembError:  # a stage without answers
                return
            if answer is not None:
                party.accept(stage, answer)

    def close(self) -> None:
        self.http.close()
