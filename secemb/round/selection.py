"""Which epoch's model a run keeps (:class:`EpochSelection`, used by the round driver
:func:`secemb.sim.driver.run`).

Without ``TrainConfig.early_stop`` a run keeps its last epoch's model, as it always did.  With
``early_stop = P``, after every epoch the run's validation score (the first metric of
``TrainConfig.metrics``, from the metric registry, on the validation data) is compared with
the best so far; a better one (lower, or higher for a metric the registry marks
``higher_is_better``; a tie keeps the earlier epoch) makes a copy of the public model and of
every device's private state (parameters and optimizer state), and ``P`` epochs in a row
without a better score end the training.  The run then returns the copy: RecBole's
``stopping_step`` and best-validation checkpoint.  The test data take no part: the choice
depends on the validation data alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from secemb.data import RatingData
from secemb.errors import InvalidParameters
from secemb.metrics import get_metric
from secemb.models.base import UserStore
from secemb.round.results import EpochStats, TrainConfig

__all__ = ["EpochSelection"]

#: what :meth:`EpochSelection.observe` reads when it keeps an epoch: the public table and dense
#: vector and the devices' store, as they stand after the epoch
Snapshot = Callable[[], tuple[np.ndarray, np.ndarray, UserStore]]


class EpochSelection:
    """The epoch a run keeps, epoch by epoch (see the module docstring).

    Raises
    ------
    InvalidParameters
        ``config.early_stop`` is set and there are no validation data.
    """

    def __init__(self, config: TrainConfig, val_data: RatingData | None) -> None:
        self.patience = config.early_stop
        self.metric = get_metric(config.metrics[0])
        if self.patience is not None and (val_data is None or len(val_data) == 0):
            raise InvalidParameters("early_stop keeps the best validation epoch: the run needs validation data "
                                    "(valid_fraction > 0, or a task with its own validation set)")
        self.best: float | None = None
        self.since_best = 0
        self.last = 0
        self._kept: tuple[int, np.ndarray, np.ndarray, dict[str, np.ndarray]] | None = None

    @property
    def epoch_kept(self) -> int:
        """The epoch whose model :meth:`kept` returns: the best so far under early stopping
        (the last epoch while none had a finite score), else the last epoch observed."""
        return self.last if self._kept is None else self._kept[0]

    def observe(self, stats: EpochStats, snapshot: Snapshot) -> bool:
        """Take the scores of the epoch just ended; copy the model (``snapshot()``) if it is the
        best yet.  Returns whether the run should stop (``patience`` epochs without a better
        score); always ``False`` without early stopping, which copies nothing."""
        self.last = stats.epoch
        if self.patience is None:
            return False
        score = stats.val_metrics.get(self.metric.name)
        better = score is not None and math.isfinite(score) and (
            self.best is None or (score > self.best if self.metric.higher_is_better else score < self.best))
        if better:
            assert score is not None
            table, dense, store = snapshot()
            self.best, self.since_best = score, 0
            self._kept = (stats.epoch, np.array(table, copy=True), np.array(dense, copy=True), store.state_dict())
        else:
            self.since_best += 1
        return self.since_best >= self.patience

    def kept(self, table: np.ndarray, dense: np.ndarray, store: UserStore) -> tuple[np.ndarray, np.ndarray, UserStore]:
        """The model to return: the kept copy (a fresh store from it, with ``store``'s
        optimizer), or ``(table, dense, store)`` themselves -- the last epoch's -- when nothing
        was copied."""
        if self._kept is None:
            return table, dense, store
        _, t, d, state = self._kept
        return t, d, UserStore.from_state_dict(state, store.optimizer)
