"""``secemb serve`` exits cleanly on SIGTERM and SIGINT (exit 0, "after a clean shutdown",
secemb/cli/serve.py; uvicorn raises the signal again after its shutdown, which with Python's handlers
ended the process by the signal or a KeyboardInterrupt) while clients hold idle keep-alive TLS
connections to it -- an operator's admin client, server 0's
link to server 1.  Until session 20 closing each such connection waited for the client's TLS
close_notify for asyncio's default 30 s, which an httpx pool's idle connection never sends: the
process outlived its supervisor's patience and was killed (LocalCluster.stop: 10 s, then SIGKILL)."""

from __future__ import annotations

import signal
import time

from net_helpers import WAIT_S, cluster_for, setup, small_data
from secemb.transport.network import ApiClient

#: generous against the 1 s TLS close timeout; far below the 30 s it replaced
STOP_WITHIN_S = 6.0


def test_sigterm_stops_both_servers_promptly_with_an_open_round_and_idle_connections() -> None:
    tr, _ = small_data()
    model, proto, config = setup("secemb", "cuckoo", False, m_prime=8, epochs=1, users_per_round=8)
    with cluster_for(model, proto, tr, config, deadline_s=3600, min_users=3) as cluster:
        admin = cluster.admin(0, timeout=WAIT_S)  # its pooled connection stays open, idle
        doc = admin.post_json("/v1/admin/rounds", {"participants": list(range(8)), "deadline_s": 3600})
        peer = ApiClient(cluster.url(1), "server0", cluster.peer_secret, timeout=WAIT_S, tls=cluster.peer_tls())
        assert peer.post_json(f"/v1/peer/rounds/{doc['round_id']}/close")["uploaded"] == []
        for party, sig in ((0, signal.SIGTERM), (1, signal.SIGINT)):  # a supervisor's stop; Ctrl-C
            proc = cluster.procs[party]
            assert proc is not None and proc.poll() is None
            start = time.monotonic()
            proc.send_signal(sig)
            code = proc.wait(timeout=30)
            took = time.monotonic() - start
            assert code == 0 and took < STOP_WITHIN_S, (party, code, took)
