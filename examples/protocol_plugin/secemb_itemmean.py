"""A minimal ONE-SERVER protocol as a secemb plug-in: one module plus its registration.

``itemmean`` learns each item's mean rating with one server and no cryptography -- an example
of the shape (:mod:`secemb.protocols.exchange`), not of privacy: the server sees each device's
per-item residuals.  A round has two exchanges::

    itemmean-model    device -> server: an empty request   server -> device: the item means (float64 LE)
    itemmean-upload   device -> server: per item, the sum of its residuals and its count (float64 LE)

When the upload stage closes the server moves every item's mean by ``lr`` times the mean
residual of the round.  Install this directory (``pip install -e examples/protocol_plugin``)
and ``secemb train --protocol itemmean``, ``secemb demo --network --protocol itemmean`` and
``secemb serve`` + ``secemb client`` of ``secemb admin init --protocol itemmean`` find it
through the ``secemb.protocols`` entry point; see ``docs/protocol.md``, "A one-server protocol".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from secemb.data import by_user, load_dataset, train_test_split
from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError
from secemb.protocols import register_protocol
from secemb.protocols.exchange import (
    EpochFigures,
    ExchangeProtocol,
    ExchangeResult,
    ExchangeRounds,
    ExchangeRun,
    ExchangeServer,
    RoundFigures,
)
from secemb.protocols.stages import SERVER0, USER, Hop, RoundPlan, register_stages

NAME = "itemmean"
WIRE_ID = 201  # any id in [1, 255] no other protocol has
MODEL, UPLOAD = "itemmean-model", "itemmean-upload"
register_stages((MODEL, UPLOAD), ("itemmean_request", "itemmean_model", "itemmean_update"))
PLAN = RoundPlan((Hop(MODEL, USER, SERVER0, "itemmean_request"), Hop(MODEL, SERVER0, USER, "itemmean_model"),
                  Hop(UPLOAD, USER, SERVER0, "itemmean_update")), stages=(MODEL, UPLOAD), servers=1)


class ItemMeanNode:
    """The server: the item means (float64 (m,)) and one round at a time.  A refused call
    (:class:`ProtocolError` out of order, :class:`InvalidMessage` a bad body) changes nothing."""

    plan = PLAN

    def __init__(self, num_items: int, lr: float) -> None:
        self.means, self.lr = np.zeros(num_items), lr
        self.round: dict[str, Any] = {"round_id": 0, "state": "committed"}

    def open_round(self, round_id: int, users: list[int]) -> dict[str, Any]:
        if self.round["state"] == "open" or round_id <= self.round["round_id"]:
            raise ProtocolError(f"round {round_id} cannot open after round {self.round['round_id']}")
        self.round = {"round_id": round_id, "users": sorted(users), "state": "open", "stage": 0, "got": {}}
        return {"round_id": round_id, "users": sorted(users), "stages": list(PLAN.stages)}

    def _current(self, round_id: int, stage: str) -> dict[str, Any]:
        rnd = self.round
        if rnd["round_id"] != round_id or rnd["state"] != "open" or PLAN.stages[rnd["stage"]] != stage:
            raise ProtocolError(f"round {round_id} is not at stage {stage}")
        return rnd

    def receive(self, round_id: int, stage: str, user: int, body: bytes) -> None:
        rnd = self._current(round_id, stage)
        m = self.means.size
        if user not in rnd["users"] or user in rnd["got"]:
            raise InvalidMessage(f"user {user}: not in round {round_id}, or a second message")
        if stage == MODEL and body:
            raise InvalidMessage("the model request is empty")
        if stage == UPLOAD:
            if len(body) != 16 * m:
                raise InvalidMessage(f"an update is {16 * m} bytes, got {len(body)}")
            update = np.frombuffer(body, "<f8").reshape(2, m)
            if not np.all(np.isfinite(update)) or np.any(update[1] < 0):
                raise InvalidMessage("an update holds finite sums and non-negative counts")
            rnd["got"][user] = update
        else:
            rnd["got"][user] = None

    def close(self, round_id: int, stage: str) -> None:
        rnd = self._current(round_id, stage)
        if stage == UPLOAD:
            # in user order, not arrival order: float sums must not depend on the network's timing
            total = sum((rnd["got"][u] for u in sorted(rnd["got"])), np.zeros((2, self.means.size)))
            self.means += self.lr * total[0] / np.maximum(total[1], 1.0)
            rnd["state"] = "committed"
        rnd["answers"] = {u: self.model() for u in rnd["got"]} if stage == MODEL else {}
        rnd["stage"], rnd["got"] = rnd["stage"] + 1, {}

    def reply(self, round_id: int, stage: str, user: int) -> bytes | None:
        if self.round["round_id"] != round_id or stage != MODEL or self.round.get("stage", 0) < 1:
            raise ProtocolError(f"stage {stage} of round {round_id} has no answers")
        answer: bytes | None = self.round["answers"].get(user)
        return answer

    def outcome(self, round_id: int) -> dict[str, Any]:
        return {"round_id": round_id, "state": self.round["state"] if self.round["round_id"] == round_id else "open"}

    def model(self) -> bytes:
        return self.means.astype("<f8").tobytes()


class ItemMeanParty:
    """A device's part in one round: its rated ``items`` and ``ratings``."""

    def __init__(self, items: np.ndarray, ratings: np.ndarray, num_items: int) -> None:
        self.items, self.ratings, self.m = items, ratings, num_items
        self.means: np.ndarray | None = None

    def message(self, stage: str) -> bytes:
        if stage == MODEL:
            return b""
        if self.means is None:
            raise ProtocolError("the upload comes after the model")
        update = np.zeros((2, self.m))
        np.add.at(update[0], self.items, self.ratings - self.means[self.items])
        np.add.at(update[1], self.items, 1.0)
        return update.astype("<f8").tobytes()

    def accept(self, stage: str, body: bytes) -> None:
        if len(body) != 8 * self.m:
            raise InvalidMessage(f"the model is {8 * self.m} bytes, got {len(body)}")
        self.means = np.frombuffer(body, "<f8").copy()


class ItemMeanDevice:
    """A device of a deployment (``secemb client``): its own training ratings."""

    def __init__(self, items: np.ndarray, ratings: np.ndarray, num_items: int) -> None:
        self.items, self.ratings, self.m = items, ratings, num_items

    def party(self, round_doc: Mapping[str, Any]) -> ItemMeanParty:
        return ItemMeanParty(self.items, self.ratings, self.m)


class ItemMeanProtocol(ExchangeProtocol):
    """Item means with one server (option ``lr``: the step toward the round's mean residual, default 1)."""

    name = NAME
    options = ("lr",)

    def __init__(self, run: ExchangeRun, *, lr: float | None = None) -> None:
        super().__init__(run)
        self.lr = 1.0 if lr is None else float(lr)
        if not 0.0 < self.lr <= 1.0:
            raise InvalidParameters(f"--protocol itemmean takes --lr in (0, 1], got {lr!r}")

    def plan(self) -> RoundPlan:
        return PLAN

    def _data(self) -> tuple[Any, Any]:
        r = self.run
        return train_test_split(load_dataset(r.dataset, r.data_dir, download=r.download, seed=r.seed), 0.2, r.seed)

    def make_server(self) -> ExchangeServer:
        train, _ = self._data()
        node = ItemMeanNode(train.num_items, self.lr)
        return ExchangeServer(node, 16 * train.num_items, node.model, train.num_users)

    def make_device(self, user: int) -> ItemMeanDevice:
        train, _ = self._data()
        items, ratings = by_user(train).of(user)
        return ItemMeanDevice(items, ratings.astype(np.float64), train.num_items)

    def train(self, connect: Callable[[ExchangeServer], ExchangeRounds], *,
              on_start: Callable[[dict[str, Any]], None] | None = None,
              on_round: Callable[[RoundFigures], None] | None = None,
              on_epoch: Callable[[EpochFigures], None] | None = None) -> ExchangeResult:
        train, test = self._data()
        server = self.make_server()
        rounds = connect(server)
        rated = by_user(train)
        users = np.unique(train.users)
        n = min(self.run.users_per_round, users.size)
        per_epoch = math.ceil(users.size / n)
        config = {"protocol": NAME, "dataset": self.run.dataset, "servers": 1, "lr": self.lr, "seed": self.run.seed,
                  "epochs": self.run.epochs, "users_per_round": n, "total_rounds": self.run.epochs * per_epoch,
                  "metrics": ["rmse"]}
        if on_start is not None:
            on_start(config)
        rng = np.random.default_rng(self.run.seed)
        figures: list[RoundFigures] = []
        epochs: list[EpochFigures] = []
        for epoch in range(1, self.run.epochs + 1):
            for _ in range(per_epoch):
                round_id = len(figures) + 1
                chosen = sorted(int(u) for u in rng.choice(users, n, replace=False))
                parties = {}
                for u in chosen:
                    items, ratings = rated.of(u)
                    parties[u] = ItemMeanParty(items, ratings.astype(np.float64), train.num_items)
                rec = rounds.play(round_id, parties)
                figures.append(RoundFigures(round_id, epoch, len(chosen), sum(sum(v.values()) for v in rec.up.values()),
                                            sum(sum(v.values()) for v in rec.down.values()), 0.0, 0.0,
                                            _mse(train, rounds.model())))
                if on_round is not None:
                    on_round(figures[-1])
            model = rounds.model()
            epochs.append(EpochFigures(epoch, _mse(train, model), {"rmse": math.sqrt(_mse(test, model))}))
            if on_epoch is not None:
                on_epoch(epochs[-1])
        table = np.frombuffer(rounds.model(), "<f8").reshape(-1, 1).copy()
        return ExchangeResult(config, figures, epochs, table, np.zeros(0), np.zeros((train.num_users, 1)))


def _mse(data: Any, model: bytes) -> float:
    """The mean squared error of the item means ``model`` on ``data``'s ratings."""
    means = np.frombuffer(model, "<f8")
    return float(np.mean((data.ratings - means[data.items]) ** 2))


register_protocol(NAME, ItemMeanProtocol, wire_id=WIRE_ID, servers=1)
