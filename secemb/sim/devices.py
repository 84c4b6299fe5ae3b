"""The simulated devices of one round attempt, phase by phase (what the round driver,
:mod:`secemb.sim.driver`, runs between opening and closing a round).

:class:`RoundDevices` takes a round's :class:`Device` records through the device SDK
(:class:`~secemb.client.device.RoundSession`): sessions opened and prepared (their keys made as
one batch), retrieval requests sent (:meth:`DevicePhase.retrieve`), then, group by group
(:func:`group_size`), each device's dense download, their rows read as one batch, their local
steps and uploads encoded as one batch, each device's upload sent.  A device that fails keeps
its error in its record and drops out of the round; the driver decides what an error means.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from typing import Protocol as TypingProtocol

import numpy as np

from secemb.client.device import DeviceClient, RoundInfo, RoundSession
from secemb.models.base import RecModel, UserStore
from secemb.models.task import Sample, Task
from secemb.privacy.noise import ClipSpec
from secemb.protocols.adversary import ATTACK_BEHAVIOR, with_attack
from secemb.protocols.base import Protocol, RoundConfig
from secemb.protocols.placement import PaddedRequest
from secemb.protocols.stages import UPLOAD
from secemb.ring import FixedPoint
from secemb.round.local import LocalStep
from secemb.round.results import VerificationError
from secemb.sim.allocator import reusing_freed_memory

__all__ = ["GROUP_BYTES", "Device", "DevicePhase", "RoundDevices", "group_size"]


class DevicePhase(TypingProtocol):
    """How the devices of a round run: one after another in process, concurrently over HTTP."""

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(x) for x in items]``, possibly concurrently, in order."""

    def retrieve(self, sessions: Sequence[RoundSession]) -> list[BaseException | None]:
        """Send the sessions' retrieval requests (each in its protocol's plan order) and hand
        each its replies; per session, the error that stopped it (else ``None``)."""

    def send_uploads(self, items: Sequence[Any], send: Callable[[Any], None],
                     fail: Callable[[Any, BaseException], None]) -> None:
        """``send(x)`` of each item (each sends one device's upload, or its bound proof, through
        its links), and ``fail(x, exc)`` for an item whose ``send`` raised or whose message a
        server refused (in process the messages reach each server as one batch)."""


@dataclass
class Device:
    """One device's part in one round attempt: its user, drawn sample and placement, the fault
    it simulates (:data:`~secemb.sim.spec.Behavior`), and what the attempt left: its session,
    the error that stopped it, whether it uploaded to both servers, its training loss."""

    user: int
    sample: Sample
    placement: PaddedRequest
    behavior: str | None
    session: RoundSession | None = None
    error: BaseException | None = None
    uploaded: bool = False
    loss: float | None = None


#: the most bytes of devices' round buffers (dense vector, rows, gradients, upload) the driver
#: holds at once: the devices of a round go through it after their retrieval in groups this
#: allows (:func:`group_size`)
GROUP_BYTES = 1 << 26


def group_size(rc: RoundConfig, itemsize: int) -> int:
    """How many devices of a round of ``rc`` (ring words of ``itemsize`` bytes) go through the
    round together after their retrieval (:meth:`RoundDevices.batch`): as many as keep
    their buffers -- counted as four ring copies of the dense vector and of the rows (the
    received vector and rows, the gradients, the upload) -- within :data:`GROUP_BYTES`, at
    least one.  The model does not depend on it; the simulation's memory does (DeepFM at
    d = 128: 7 M dense values a device, so one device at a time)."""
    per_device = 4 * itemsize * (rc.dense_size + rc.slots * rc.width)
    return max(1, GROUP_BYTES // per_device)


class RoundDevices:
    """The devices' side of a run's round attempts.

    ``device``: device ``u``'s client; ``phase``: how a round's devices run; ``protocol``: the
    protocol the devices run (a simulated attacker wraps it); ``model`` and ``store``: the local
    step and the devices' private state; ``fp``, ``task``, ``clip``: what each session encodes,
    samples and clips with; ``schedule``: ``"staged"`` (a round's devices together, step by
    step) or ``"interleaved"`` (each device through all its steps before the next);
    ``keep_encoded``: keep each device's encoded gradients after its upload (the driver
    verifies the round against them).
    """

    def __init__(self, device: Callable[[int], DeviceClient], phase: DevicePhase, protocol: Protocol, model: RecModel,
                 store: UserStore, *, fp: FixedPoint, task: Task, clip: ClipSpec | None,
                 schedule: Literal["interleaved", "staged"], keep_encoded: bool) -> None:
        self.device, self.phase, self.protocol, self.model, self.store = device, phase, protocol, model, store
        self.fp, self.task, self.clip = fp, task, clip
        self.schedule, self.keep_encoded = schedule, keep_encoded

    def run(self, devs: list[Device], info: RoundInfo, expected: np.ndarray | None) -> None:
        """Every device of the attempt, as the schedule says (:meth:`batch` of all of them, or
        of each one alone); ``expected``: the encoded table the retrieved rows are checked
        against (``None``: not checked).  A large model's buffers are reused from one device
        to the next meanwhile (:func:`~secemb.sim.allocator.reusing_freed_memory`)."""
        with reusing_freed_memory(self.fp.dtype.itemsize * info.config.dense_size):
            if self.schedule == "interleaved":
                for d in devs:
                    self.batch([d], info, expected)
            else:
                self.batch(devs, info, expected)

    def batch(self, devs: list[Device], info: RoundInfo, expected: np.ndarray | None) -> None:
        """``devs`` through the round, step by step: sessions opened and prepared (their keys
        made as one batch), retrieval requests sent (:meth:`DevicePhase.retrieve`), then, group
        by group (:func:`group_size`: a small model's round is one group), each device's dense
        download, their rows read as one batch (:meth:`_read_rows`), their local steps and
        uploads encoded as one batch (:meth:`_train`), each device's upload sent
        (:meth:`_send_upload`, which frees its buffers; :meth:`DevicePhase.send_uploads`: in
        process the group's uploads reach each server as one batch) and, with bounded payloads,
        each device that uploaded to both servers proves its upload's bound
        (:meth:`RoundSession.prove`: a device that cannot sends nothing and the servers leave it
        out; in process the group's proofs reach server 0 as one batch).  A device that fails
        keeps its error and drops out."""
        live = self._prepare(devs, info)
        errors = self.phase.retrieve([s for _, s in live])
        for (d, _), err in zip(live, errors, strict=True):
            if err is not None:
                d.error = err
        running = _running(devs)
        size = group_size(info.config, self.fp.dtype.itemsize)
        for group in (running[i : i + size] for i in range(0, len(running), size)):
            self._on_each(group, lambda d: _session(d).fetch_dense())
            self._read_rows(_running(group), expected)
            training = [d for d in _running(group) if d.behavior != "drop"]  # a dropped device never uploads
            self._train(training)
            self.phase.send_uploads(_running(training), self._send_upload, _upload_failed)
            proving = [d for d in _running(training) if d.uploaded and _session(d).proves]
            if proving:  # bounded payloads: each challenge fetched, the proofs sent (as one batch in process)
                self.phase.send_uploads(proving, _prove, _upload_failed)

    def _on_each(self, devs: list[Device], fn: Callable[[Device], None]) -> None:
        """``fn`` of each device (:meth:`DevicePhase.map`: possibly concurrently); a device whose
        call fails keeps its error."""

        def one(dev: Device) -> None:
            try:
                fn(dev)
            except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
                dev.error = exc

        self.phase.map(one, devs)

    def _connect(self, dev: Device, info: RoundInfo) -> RoundSession | None:
        """``dev``'s session of the round (``None``: it failed, its error kept)."""
        try:
            client = self.device(dev.user)
            # as a real device does: both servers announce the round on the same model (a
            # ModelDisagreement is reported to both and the device takes no part)
            client.round_info()
            proto = self.protocol
            if dev.behavior is not None and dev.behavior.startswith(ATTACK_BEHAVIOR):  # a simulated malicious device
                proto = with_attack(self.protocol, dev.behavior[len(ATTACK_BEHAVIOR):])
            dev.session = RoundSession(client, info, protocol=proto, fp=self.fp, task=self.task, clip=self.clip)
            return dev.session
        except Exception as exc:  # noqa: BLE001 - a device failure is data, not a crash (Ctrl-C is not)
            dev.error = exc
            return None

    def _prepare(self, devs: list[Device], info: RoundInfo) -> list[tuple[Device, RoundSession]]:
        """The devices' sessions, prepared with the drawn samples and slots, their keys made
        as one batch (:meth:`RoundSession.prepare_many`); the devices that failed keep their
        error and are left out."""
        opened = [(d, s) for d, s in zip(devs, self.phase.map(lambda d: self._connect(d, info), devs), strict=True)
                  if s is not None]
        errors = RoundSession.prepare_many([s for _, s in opened], [d.sample for d, _ in opened],
                                           [d.placement for d, _ in opened])
        for (d, _), err in zip(opened, errors, strict=True):
            d.error = err
        return [(d, s) for d, s in opened if d.error is None]

    def _read_rows(self, devs: list[Device], expected: np.ndarray | None) -> None:
        """The devices' rows read from their replies as one batch
        (:meth:`RoundSession.reconstruct_many`), each checked against ``expected`` where the
        run verifies (a simulated attacker's are not); a device that fails keeps its error."""
        rows = RoundSession.reconstruct_many([_session(d) for d in devs])
        for dev, got in zip(devs, rows, strict=True):
            if isinstance(got, Exception):
                dev.error = got
            elif expected is not None and not (dev.behavior or "").startswith(ATTACK_BEHAVIOR):
                try:
                    _check_rows(dev, got, expected, _session(dev).rc.round_id)
                except VerificationError as exc:
                    dev.error = exc

    def _train(self, devs: list[Device]) -> None:
        """The devices' local steps on their rows, device by device, and their uploads encoded
        as one batch (:meth:`RoundSession.train_many`); each device's loss, or its error."""
        model = self.model

        def step(user: int) -> LocalStep:
            state = self.store.state(user)
            return lambda rows, dense, batch: model.local_step(rows, dense, state, batch)

        results = RoundSession.train_many([_session(d) for d in devs], [step(d.user) for d in devs])
        for dev, got in zip(devs, results, strict=True):
            if isinstance(got, Exception):
                dev.error = got
            else:
                dev.loss = got.loss

    def _send_upload(self, dev: Device) -> None:
        """``dev``'s upload sent (to one server only, or late, where its behavior says)."""
        session = _session(dev)
        if dev.behavior is not None and dev.behavior.startswith("late:"):
            time.sleep(float(dev.behavior.split(":", 1)[1]))
        if dev.behavior == "only0" and 1 in session.plan.device_sends(UPLOAD):
            return  # its upload to server 1 was lost: without server 1's receipt a device sends server 0 none
        if dev.behavior in ("only0", "only1"):
            session.upload(only=int(dev.behavior[-1]))
        else:
            session.upload()
            dev.uploaded = True
        # the round's sessions live until it closes: keep one device's buffers, not all of
        # them (the encoded gradients only where the round is verified against them)
        session.release(keep_encoded=self.keep_encoded)


def _prove(dev: Device) -> None:
    """``dev``'s bound proof for its upload, sent (none where it cannot prove: the servers then
    leave it out of the round)."""
    _session(dev).prove()


def _upload_failed(dev: Device, exc: BaseException) -> None:
    """``dev``'s upload did not count: its error kept, as for any device that fails."""
    dev.error, dev.uploaded = exc, False


def _running(devs: list[Device]) -> list[Device]:
    """The devices of ``devs`` with a session and no error."""
    return [d for d in devs if d.error is None and d.session is not None]


def _session(dev: Device) -> RoundSession:
    """A running device's session (:func:`_running`)."""
    assert dev.session is not None  # a running device has one
    return dev.session


def _check_rows(dev: Device, rows: np.ndarray, expected: np.ndarray, round_id: int) -> None:
    """``dev``'s retrieved rows are the encoded table's rows at its placement (padding: 0).

    Raises
    ------
    VerificationError
        A row differs.
    """
    want = expected[np.maximum(dev.placement.indices, 0)]
    want[dev.placement.indices < 0] = 0
    if not np.array_equal(rows, want):
        bad = int(np.flatnonzero(np.any(rows != want, axis=1))[0])
        raise VerificationError(
            f"round {round_id}, user {dev.user}: retrieved row {bad} (item "
            f"{int(dev.placement.indices[bad])}) differs from the encoded table"
        )
