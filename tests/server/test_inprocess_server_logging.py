"""A server started in a thread of someone else's process (the simulation, a test, a user's
Python session) leaves that process's logging alone.

Found in the full test suite: uvicorn's default ``dictConfig`` closes every logging handler the
process has; a handler a library installed on the root logger at import (absl's, imported by
dp-accounting) then closed the stream it held -- pytest's capture of stderr -- and the whole run
died with "lost sys.stderr" after ``secemb demo --network --protocol secea``."""

from __future__ import annotations

import io
import logging

import pytest

pytest.importorskip("uvicorn")

from secemb.server.listener import guarded_config  # noqa: E402


class _ClosingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """As absl's root handler does: closing the handler closes the stream it holds."""

    def close(self) -> None:
        self.stream.close()
        super().close()


async def _app(scope, receive, send):  # noqa: ANN001, ANN202 -- a do-nothing ASGI app
    return None


def test_a_server_in_a_thread_keeps_the_process_logging_handlers_open() -> None:
    stream = io.StringIO()
    handler = _ClosingHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        guarded_config(_app, "127.0.0.1", 0, read_timeout_s=5.0, max_connections=4, tls={},
                       log_level="warning", own_process=False)
        assert handler in root.handlers
        assert not stream.closed
        assert logging.getLogger("uvicorn.error").level == logging.WARNING  # its level is still set
    finally:
        root.removeHandler(handler)

