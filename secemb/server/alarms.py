"""Alarms: a deviation a server detects or a device reports, journaled, logged as a WARNING
and shown in the status until the operator clears it (docs/deployment.md, "Alarms").

Party: both servers.  :data:`ALARMS` names the kinds and whether each halts the deployment:
``relay_tampered`` (server 1: forwarded bytes that fail the device's authentication) and
``device_rejected`` (server 0: uploads that fail the verification step) do not;
``retrieval_tampered``, ``model_disagreement`` and ``uploads_misreported`` (server 0, at the
close: server 1 does not hold uploads it acknowledged -- forwards it took, with relay, uploads it
receipted, without, or users it
named in the quorum check that closed the round) do -- the open round is aborted and no round opens
(:class:`~secemb.server.errors.Conflict`) until :meth:`Alarms.clear_alarms`.
Clearing the alarms leaves the devices' strikes (server 0's rejection counts: the door) as they
are -- a participant can force a clear by a false report -- and :meth:`Alarms.clear_strikes` is
the operator's explicit forgiving (session 31, S31-R2).  :data:`DEVICE_ALARMS` is what a
participant of the current round may report (``POST /v1/alarm``, :meth:`Alarms.device_alarm`).
An alarm's detail names no secret.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from secemb.errors import InvalidParameters, check_int
from secemb.server.admission import check_participant
from secemb.server.errors import Conflict
from secemb.server.rounds import ABORTED, OPEN
from secemb.server.state import NodeState

__all__ = ["ALARMS", "DEVICE_ALARMS", "Alarms"]

log = logging.getLogger("secemb.server")

#: the alarms a server raises (docs/deployment.md, "Alarms"), and whether each halts the deployment
ALARMS = {"relay_tampered": False, "retrieval_tampered": True, "model_disagreement": True, "device_rejected": False,
          "uploads_misreported": True}
#: what a device may report (``POST /v1/alarm``)
DEVICE_ALARMS = ("retrieval_tampered", "model_disagreement")


class Alarms(NodeState):
    """A node's alarms: raised by either server or reported by a device, halting (or not) the
    deployment until the operator clears them."""

    def raise_alarm(self, kind: str, round_id: int, detail: str) -> None:
        """Record a detected deviation of kind ``kind`` (:data:`ALARMS`) in round ``round_id``:
        journaled (it survives a restart), logged as a WARNING, shown in :meth:`status` until
        :meth:`clear_alarms`.  A halting kind halts the deployment: the current round, if still
        open, is aborted (a closing one ends as its close decides: its aggregate holds no
        reporting device, and both servers must end it alike), and no round opens until the
        alarm is cleared.  The same alarm again (kind, round, detail) is recorded once.
        ``detail`` names no secret (which user is known to both servers; no slot or item is)."""
        halt = ALARMS[kind]
        rec = {"ev": "alarm", "kind": kind, "round": int(round_id), "detail": detail[:500], "halt": halt,
               "time_unix": time.time()}
        with self.lock:
            if any((a["kind"], a["round"], a["detail"]) == (kind, rec["round"], rec["detail"]) for a in self.alarms):
                return
            self._journal_outcome(rec)
            self._remember_alarm(rec)
            rnd = self.round
        log.warning("ALARM %s in round %d at server %d: %s%s", kind, round_id, self.party, detail,
                    " -- the deployment is halted until the operator clears the alarm" if halt else "")
        if halt and rnd is not None and rnd.state == OPEN:
            self._end(rnd, ABORTED, f"deployment halted: {kind}")

    def clear_alarms(self) -> dict[str, Any]:
        """The operator's acknowledgement (``POST /v1/admin/alarms/clear``): forget the alarms
        and lift the halt (journaled); ``{"cleared": how many}``.  The devices' strikes stay
        (:meth:`clear_strikes`)."""
        with self.lock:
            n = len(self.alarms)
            # "strikes": "kept" tells the replay (NodeState._recover) that this clear forgave no strike
            self.store.append({"ev": "alarms_cleared", "round": self.max_round, "alarms": n, "strikes": "kept"})
            self.alarms, self.halted = [], None
        log.warning("server %d: %d alarm(s) cleared by the operator", self.party, n)
        return {"cleared": n}

    def clear_strikes(self, device: object = None) -> dict[str, Any]:
        """The operator's forgiving (``POST /v1/admin/strikes/clear``, ``secemb admin
        clear-strikes``): forget the rejections (:attr:`rejections`, the door's strikes) of
        ``device``, or of every device when it is ``None``; journaled (``{"ev":
        "strikes_cleared", "device"}``, replayed at start) even when there was none to forget.
        ``{"cleared": {device id as a string: strikes forgotten}}``.

        Raises
        ------
        InvalidParameters: ``device`` is neither ``None`` nor a user id in ``[0, num_users)``
            (nothing changed).
        StorageError: the disk refused the record (nothing changed).
        """
        who = None if device is None else check_int("device", device, low=0, high=self.cfg.num_users - 1)
        with self.lock:
            cleared = {u: n for u, n in sorted(self.rejections.items()) if who is None or u == who}
            self.store.append({"ev": "strikes_cleared", "round": self.max_round, "device": who,
                               "strikes": {str(u): n for u, n in cleared.items()}})
            for u in cleared:
                del self.rejections[u]
        log.warning("server %d: the operator cleared the strikes of %s: %s", self.party,
                    "every device" if who is None else f"device {who}", cleared or "none held")
        return {"cleared": {str(u): n for u, n in cleared.items()}}

    def _refuse_if_halted(self) -> None:
        """Raise Conflict while the deployment is halted (under the lock)."""
        if self.halted is not None:
            raise Conflict(f"the deployment is halted by an alarm ({self.halted}): see docs/deployment.md, "
                           "'Alarms'; after the investigation, 'secemb admin clear-alarms'")

    def device_alarm(self, user: int, doc: dict[str, Any]) -> dict[str, Any]:
        """Device ``user``'s report (``POST /v1/alarm``): ``{"kind": one of DEVICE_ALARMS,
        "round_id": the current round, "detail": text}`` -- it caught a server deviating (a
        tampered retrieval answer, servers announcing different models).  Only a participant
        of the current round may report; the report halts the deployment.

        Raises
        ------
        InvalidParameters: a malformed report.
        Conflict: ``round_id`` is not the current round.
        Forbidden: ``user`` is not one of its participants.
        """
        unknown = set(doc) - {"kind", "round_id", "detail"}
        kind, detail = doc.get("kind"), doc.get("detail", "")
        if unknown or kind not in DEVICE_ALARMS or not isinstance(detail, str):
            raise InvalidParameters(f"an alarm is {{'kind': one of {list(DEVICE_ALARMS)}, 'round_id': int, "
                                    f"'detail': str}}, got fields {sorted(doc)}")
        r = check_int("an alarm's round_id", doc.get("round_id"))
        with self.lock:
            rnd = self.round
            if rnd is None or rnd.round_id != r:
                raise Conflict(f"round {r} is not the current round")
            check_participant(rnd, user)
        text = "".join(c if c.isprintable() else " " for c in detail[:200])  # one log line, whatever it sent
        self.raise_alarm(kind, r, f"device {user} reports {kind}: {text}")
        return {"halted": True}
