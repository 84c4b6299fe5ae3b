"""Session 19 review (helper J) of bounded payloads (issue 34 (b)) at server 1's node, in
process: "each device's proof is answered once" under concurrency.

Verifier messages of one proof under two query seeds reveal the witness
(``tests/review/test_session19_rangeproof.py``), so server 1 answers each user's proof once
(``SecEmbServer.bound_answer`` keeps the users it answered).  The check of that set and its
update are apart (the verifier messages are computed in between) and the follower's
``peer_bound`` calls the role outside its lock, so a deviating server 0 that sends two check
requests for the same users at once -- two HTTP requests are served by two threads -- could
get both answered.  Here two requests that differ only in the query seed meet inside the
verifier computation (a barrier in ``rangeproof.verifier_messages``; it gives up after a few
seconds when the calls are serialized): exactly one may be answered.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
import test_bounded_nodes as tbn  # type: ignore[import-not-found]  # noqa: E402

from secemb.client.device import Device  # noqa: E402
from secemb.errors import SecembError  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.protocols.secemb import server as server_module  # noqa: E402
from secemb.sim.local import LocalPeer  # noqa: E402

WAIT_S = 3.0  # how long a request waits for the other inside the verifier computation


def test_two_concurrent_check_requests_for_the_same_proofs_get_one_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    servers = tbn._servers()
    leader, follower = tbn._nodes(servers)
    peer = leader.peer
    assert isinstance(peer, LocalPeer)
    meet = threading.Barrier(2)
    real_messages = server_module.rangeproof.verifier_messages

    def meeting(*args: Any, **kw: Any) -> Any:
        if args[1] == 1:  # server 1's call
            try:
                meet.wait(timeout=WAIT_S)
            except threading.BrokenBarrierError:
                pass  # the other request is not inside: serialized
        return real_messages(*args, **kw)

    outcomes: list[bytes | SecembError] = []

    def two_at_once(round_id: int, body: bytes) -> bytes:
        other = body[:HEADER_BYTES] + bytes(16) + body[HEADER_BYTES + 16:]  # another query seed
        assert other != body

        def ask(req: bytes) -> None:
            try:
                outcomes.append(follower.peer_bound(round_id, req))
            except SecembError as exc:
                outcomes.append(exc)

        threads = [threading.Thread(target=ask, args=(req,)) for req in (body, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=4 * WAIT_S)
        answers = [o for o in outcomes if isinstance(o, bytes)]
        if not answers:
            raise AssertionError(f"no request was answered: {outcomes}")
        return answers[0]

    monkeypatch.setattr(server_module.rangeproof, "verifier_messages", meeting)
    monkeypatch.setattr(peer, "bound", two_at_once)
    try:
        r = tbn._open(servers)
        for u in tbn.USERS[:4]:
            client = servers.servers().device(u)
            Device(client, *tbn.RATINGS.of(u)).participate(client.round_info())
        leader.close_round(r)
        assert len(outcomes) == 2
        answered = [o for o in outcomes if isinstance(o, bytes)]
        assert len(answered) == 1, f"server 1 answered {len(answered)} check requests for the same proofs"
    finally:
        servers.stop()
