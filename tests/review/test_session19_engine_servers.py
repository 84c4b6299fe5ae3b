"""Session 19 review (helper J) of bounded payloads (issue 34 (b)): what a deviating server can
send the other in the check.  Regression tests (they pass).

* A deviating server 1's answer with a field element not below ``p`` (the first, ``z``'s share,
  or one in the middle) is refused as malformed (``InvalidMessage``: the close then aborts, a
  denial of service server 1 can cause anyway) and server 0's request stays pending; the real
  answer then decides.
* A deviating server 0's request framed for another round, or with server 0's party in its
  header, is refused by server 1 without using up any user's one answer.

Driven at the protocol roles by hand (``tests/protocols/test_bounded_payloads.py``'s ``Round``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocols"))
import test_bounded_payloads as tbp  # type: ignore[import-not-found]  # noqa: E402

from secemb.errors import InvalidMessage  # noqa: E402
from secemb.fss import field as F  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.protocols.secemb.sizes import NAME  # noqa: E402
from secemb.protocols.wire import frame  # noqa: E402


def test_an_answer_with_an_element_not_below_p_is_refused_and_the_request_stays_pending() -> None:
    rnd = tbp.Round("cuckoo", True)
    rnd.honest(range(3))
    answer = rnd.s1.bound_answer(rnd.s0.bound_request([0, 1, 2]))
    words = np.frombuffer(answer[HEADER_BYTES:], "<u8")
    width = len(words) // 3
    for at in (0, width + 5):  # device 0's z share; a wire share of device 1
        bad = words.copy()
        bad[at] = F.P
        with pytest.raises(InvalidMessage, match="not below p"):
            rnd.s0.bound_rejected(answer[:HEADER_BYTES] + bad.tobytes())
    assert rnd.s0.bound_rejected(answer) == set()


def test_a_request_for_another_round_or_party_uses_up_no_answer() -> None:
    rnd = tbp.Round("full", False)
    rnd.honest(range(2))
    request = rnd.s0.bound_request([0, 1])
    body = request[HEADER_BYTES:]
    for bad in (frame(NAME, "bound_request", 1, rnd.cfg.round_id + 1, body),
                frame(NAME, "bound_request", 0, rnd.cfg.round_id, body)):
        with pytest.raises(InvalidMessage):
            rnd.s1.bound_answer(bad)
    assert rnd.s0.bound_rejected(rnd.s1.bound_answer(request)) == set()  # still answered once, now
