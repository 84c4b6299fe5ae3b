"""Session 21 (helper G found it, helper K fixed it): selective failure of a SecEA silo's set-up
on the union a deviating server announces (finding G6).

The entity union is the set-up's answer of ``psu-unmask``.  A silo whose entities are not all in
the union it is handed cannot take part, so its set-up fails -- visibly to the server.  So a
server learns one bit per set-up, "is the silo's set inside the union I sent", of the silo's
private entity set, which the PSU is there to hide.  Before, a silo whose set-up failed wrote
no state, so the same silo (its process restarted, e.g. by a supervisor) took a new set-up, and
a server that left one entity out of each union learnt the whole set, one entity per set-up.

Now (docs/security.md, "SecEA's set-up: one bit, then caught"): the silo writes in its state file
that it takes part in a set-up before its first message leaves, and takes no second set-up
without its operator (``secemb client --new-set-up``); the failed set-up tells the operator
that the server deviated.  The refusal comes at the round document, before the silo sends or
reads anything of the new set-up, so it is the same whatever union the server would send: the
server has its one bit and learns nothing more until the operator acts.

Here, over HTTP on 127.0.0.1, silo 0 run by ``secemb client`` as deployed (its state file beside
its credentials): a set-up whose union leaves out one of its entities, then the server's next
probe.  The honest paths are ``test_session21_secea_setup.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from session21_secea_setup import CHOSEN, SETUP_STAGES, Deployment, union_less  # noqa: E402


def test_after_one_failed_probe_the_silo_takes_no_further_set_up_and_its_operator_is_told(
        secea_deployment: Deployment) -> None:
    # probe 1: the union without 651, one of silo 0's entities -- the server's one bit
    probe = secea_deployment.set_up(1, union_less(CHOSEN[0], 1))
    code, line = secea_deployment.client()
    assert code == 1 and probe.posted == SETUP_STAGES  # it failed after its last set-up message
    assert line == {"user": 0, "error": "round 1: the server's union leaves out 1 of silo 0's 6 entities: the server "
                                        "deviated from the protocol (or handed out a union without this silo's PSU "
                                        "input), and this failed set-up tells it that the silo holds one of the "
                                        "entities it left out; the silo takes no new set-up without its operator"}
    meta, arrays = secea_deployment.state()  # written before the HELLO left; no keys, no union
    assert meta["setup_round"] == 1 and meta["last_round"] is None and "client" not in meta and "union" not in arrays
    recorded = secea_deployment.state_path.read_bytes()

    # probe 2 (the silo's process restarted): the union without 654 -- refused at the round document
    probe = secea_deployment.set_up(2, union_less(CHOSEN[1], 2))
    code, line = secea_deployment.client()
    assert code == 1 and line == {"user": 0, "error": "round 2: silo 0 took part in a set-up before (round 1, did not "
                                                      "complete): it takes no second one without its operator "
                                                      "(secemb client --new-set-up)"}
    assert probe.posted == []  # nothing sent: not even its HELLO, so no union was ever read
    assert ("GET", "/v1/exchange/rounds/2/psu-unmask") not in probe.seen
    assert secea_deployment.state_path.read_bytes() == recorded  # its record unchanged

    # and so on for every later probe while its operator does nothing
    probe = secea_deployment.set_up(3, union_less(CHOSEN[2], 3))
    assert secea_deployment.client()[0] == 1 and probe.posted == []
