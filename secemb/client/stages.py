"""A deployed device's side of a one-server round (``secemb client`` of SFSL, SecEA, ...).

Under ``secemb serve`` the server closes a round's stages itself (no operator drives them), so
the device follows the round document (:class:`~secemb.transport.links.PolledStageLink`, over
HTTP :class:`~secemb.transport.http.HttpStageLink`) instead of an operator's calls:
:func:`take_part`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from secemb.errors import ProtocolError
from secemb.protocols.device_state import DeviceStateFile, DurableDevices
from secemb.protocols.exchange import ExchangeDevice, ExchangeProtocol
from secemb.protocols.stages import RoundPlan
from secemb.transport.links import PolledStageLink

__all__ = ["BoundedAnswers", "deployed_device", "device_state_file", "take_part"]


@runtime_checkable
class BoundedAnswers(Protocol):
    """A party that knows the longest answer an honest server sends it in each stage (SFSL's and
    SecEA's: computed from the round's public parameters)."""

    def answer_bytes(self, stage: str) -> int:
        """The longest honest answer of ``stage``, in bytes."""


def device_state_file(credentials: Path, user: int, deployment: Mapping[str, Any], secret: bytes,
                      server_ca: bytes) -> DeviceStateFile:
    """Device ``user``'s state file beside its credentials file (``device-U.json`` ->
    ``device-U.state``; a credentials file already named ``*.state``: ``*.state.state``, never
    the credentials file itself), authenticated under its credential ``secret`` and bound to the
    device, the deployment's ``protocol``, ``run`` and ``options`` (from ``deployment``, the
    credentials' document) and the SHA-256 of the server's CA certificate ``server_ca``."""
    binding = {"device": user, **{k: deployment.get(k) for k in ("protocol", "run", "options")},
               "server_ca_sha256": hashlib.sha256(server_ca).hexdigest()}
    path = credentials.with_suffix(".state")
    if path == credentials:  # the state written there would replace the credentials (and the key)
        path = credentials.with_name(credentials.name + ".state")
    return DeviceStateFile(path, secret, binding)


def deployed_device(protocol: ExchangeProtocol, user: int, state: DeviceStateFile) -> ExchangeDevice:
    """Device ``user`` as ``secemb client`` runs it: restored from and kept in ``state`` if the
    protocol's devices keep state (:class:`~secemb.protocols.device_state.DurableDevices`, e.g.
    a SecEA silo), else :meth:`~secemb.protocols.exchange.ExchangeProtocol.make_device`.

    Raises
    ------
    secemb.protocols.device_state.CorruptDeviceState: a state file that cannot be used;
    InvalidParameters: as ``make_device``.
    """
    if isinstance(protocol, DurableDevices):
        return protocol.make_durable_device(user, state)
    return protocol.make_device(user)


def take_part(link: PolledStageLink, device: ExchangeDevice, plan: RoundPlan, doc: dict[str, Any], *,
              wait_s: float, poll_s: float = 0.1) -> dict[str, Any]:
    """Device ``link.user``'s part in the open round ``doc`` announces (it lists the device):
    stage by stage, send its message, wait until the server closed the stage, fetch the answer
    if the stage has one (none: the device is out).  Returns ``{"round_id", "outcome"
    (committed, aborted, or "left" when the server answered it nothing), "upload_bytes",
    "download_bytes"}``.  The outcome is the round's state in the first round document read after
    its last stage closed (read again until it ends if the round is still open there), so the
    operator may open the next round while the device takes its last answer.  A document of another
    round where the device expected its own gives this one's end in its ``previous`` (the round
    the opening replaced; the server keeps a committed one's last answers for its devices,
    :class:`~secemb.server.exchange_app.StageCloser`); none there, or another's: ``aborted``.

    Each answer is read up to the limit of the longest honest answer of its stage (a
    :class:`BoundedAnswers` party's; any other party's: the floor), every round document up to
    the floor (:meth:`~secemb.transport.links.PolledStageLink.bound_answers`).

    Raises
    ------
    ProtocolError: the server did not close a stage (or the round) within ``wait_s``.
    InvalidMessage: a round document the device cannot take part in (InvalidParameters: its
    stages are not a subsequence of ``plan``'s), or an answer longer than its limit -- endless,
    or a decompression bomb -- read no further: the party never sees it and sends nothing more;
    ``RemoteError`` /
    ``Unreachable``: the server refused a message or did not answer.
    """
    round_id = int(doc["round_id"])
    party = device.party(doc)
    up = down = 0

    def result(outcome: Any) -> dict[str, Any]:
        return {"round_id": round_id, "outcome": outcome, "upload_bytes": up, "download_bytes": down}

    def state_of(now: dict[str, Any]) -> Any:
        """The round's state in ``now``: its ``previous`` if another round replaced this one there
        (none, or another's: this one was aborted)."""
        if now.get("round_id") == round_id:
            return now.get("state")
        before = now.get("previous") or {}
        return before.get("state") if before.get("round_id") == round_id else "aborted"

    def settled(stage: str | None) -> dict[str, Any]:
        """The round document once ``stage`` is no longer the open one (``None``: the round ended)."""
        deadline = time.monotonic() + wait_s
        while True:
            now = link.round_info()
            if now.get("round_id") != round_id or now.get("state") != "open" or now.get("stage") != stage:
                return now
            if time.monotonic() > deadline:
                raise ProtocolError(f"round {round_id}: the server did not close {stage or 'the round'} "
                                    f"within {wait_s} s")
            time.sleep(poll_s)

    state: Any = "open"
    for stage in plan.only(list(doc.get("stages", plan.stages))).stages:  # InvalidParameters: not the plan's
        body = party.message(stage)
        link.send(round_id, stage, body)
        up += len(body)
        state = state_of(settled(stage))
        if state not in ("open", "committed"):
            return result(state)
        if plan.replies(stage):
            link.bound_answers(party.answer_bytes(stage) if isinstance(party, BoundedAnswers) else None)
            try:
                answer = link.fetch(round_id, stage)
            finally:
                link.bound_answers(None)
            if answer is None:
                return result("left")
            down += len(answer)
            party.accept(stage, answer)
    # the round's end as the document read once its last stage closed showed it, if it did: the
    # operator may open the next round while the device takes its last answer (session 31,
    # helper E: a committed round then read as aborted), so only a round still open is read again
    return result(state if state != "open" else state_of(settled(None)))
