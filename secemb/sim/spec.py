"""What a training run is given, grouped (the options of :func:`secemb.sim.driver.run`):
:class:`RunSpec` (what is trained), :class:`RoundPolicy` (how rounds run, with the simulated
device faults, :data:`Behavior`) and :class:`Hooks` (the callbacks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from secemb.data import RatingData
from secemb.errors import InvalidParameters
from secemb.models.base import RecModel
from secemb.protocols.base import Protocol
from secemb.round.results import EpochStats, RoundStats, TrainConfig
from secemb.sim.settings import DEVICE_RANDOMNESS, DeviceRandomness

__all__ = ["AfterRound", "BeforeRound", "Behavior", "Hooks", "RoundPolicy", "RunSpec"]

#: per (round index, user): None (normal) or a fault to simulate on the device:
#: "drop" (retrieves, never uploads), "only0"/"only1" (uploads to one server only; where devices upload to
#: both servers "only0" sends nothing: its upload to server 1 lost, it has no receipt to show server 0),
#: "late:<seconds>" (waits that long between training and upload).
Behavior = Callable[[int, int], str | None]

#: ``(round index, attempt, round id, users)``, called before a round's devices run
BeforeRound = Callable[[int, int, int, list[int]], None]
#: ``(round index, attempt, outcome, device errors by user)``, called when a round ended
AfterRound = Callable[[int, int, dict[str, Any], dict[int, BaseException]], None]


@dataclass(frozen=True)
class RunSpec:
    """What a run trains: ``model`` with ``protocol`` on ``train_data``, scored on
    ``test_data`` and ``val_data`` (either may be ``None``), as ``config`` says; the devices'
    private draws from where ``device_randomness`` says; ``extra_config`` merged into
    ``result.config`` (see :func:`~secemb.sim.driver.run` for each).

    Raises
    ------
    InvalidParameters
        The held-out data do not share the training data's id spaces, or
        ``device_randomness`` is neither mode.
    """

    model: RecModel
    protocol: Protocol
    train_data: RatingData
    test_data: RatingData | None
    config: TrainConfig
    device_randomness: DeviceRandomness
    val_data: RatingData | None = None
    extra_config: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        for held_out in (self.test_data, self.val_data):
            if held_out is not None and (
                held_out.num_items != self.train_data.num_items or held_out.num_users != self.train_data.num_users
            ):
                raise InvalidParameters("train, test and validation data must share the user and item id spaces")
        if self.device_randomness not in DEVICE_RANDOMNESS:
            raise InvalidParameters(
                f"device_randomness must be one of {DEVICE_RANDOMNESS}, got {self.device_randomness!r}")


@dataclass(frozen=True)
class RoundPolicy:
    """How the driver runs each round: the servers' deadline, whether to close a round as soon
    as its devices finished (else the servers close it on quorum or deadline), the tries per
    round, and the simulated device faults (:data:`Behavior`; see :func:`~secemb.sim.driver.run`)."""

    deadline_s: float = 120.0
    close_when_done: bool = True
    max_attempts: int = 5
    behavior: Behavior | None = None


@dataclass(frozen=True)
class Hooks:
    """The run's callbacks, each optional: around every round attempt (``before_round``,
    ``after_round``) and progress (``on_start`` with ``result.config``, ``on_round`` per
    committed round, ``on_epoch``)."""

    before_round: BeforeRound | None = None
    after_round: AfterRound | None = None
    on_start: Callable[[dict[str, Any]], None] | None = None
    on_round: Callable[[RoundStats], None] | None = None
    on_epoch: Callable[[EpochStats], None] | None = None
