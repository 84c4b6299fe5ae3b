"""The metric registry: a metric is one function plus its registration.

A metric declares what it needs (``needs``):

* ``"pointwise"`` -- predictions on held-out ``(user, item)`` pairs.  The function is
  ``fn(pred, truth, rating_range) -> float | None`` with ``pred`` the model's raw predictions
  (float64, (n,)), ``truth`` the held-out values (float64 or float32, (n,)) and
  ``rating_range`` the public rating scale ``(lo, hi)``; it returns ``None`` when ``n == 0``.
* ``"ranking"`` -- a ranking over candidate items per user (HR@K, NDCG@K, Recall@K, AUC).  The
  function is ``fn(scores, relevant, *, k) -> float | None`` with ``scores`` float64
  (n_users, n_candidates) and ``relevant`` bool of the same shape (held-out positives), ``k``
  the cut-off when the metric is registered with ``at_k=True``.  ``candidates`` names the
  candidate set: ``None`` the full catalogue, an int that many sampled negatives beside each
  held-out item (:func:`secemb.metrics.ranking.rank_next_items` builds both).

Names are lower-case; a metric registered with ``at_k=True`` is asked for as ``name@K``
(``"ndcg@10"``), and :func:`get_metric` parses the cut-off.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from secemb.errors import InvalidParameters

__all__ = ["Metric", "Needs", "available_metrics", "get_metric", "register_metric"]

#: what a metric is computed from
Needs = Literal["pointwise", "ranking"]
_NEEDS = ("pointwise", "ranking")
_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class _Entry:
    fn: Callable[..., float | None]
    needs: Needs
    higher_is_better: bool
    at_k: bool
    candidates: int | None


_REGISTRY: dict[str, _Entry] = {}


@dataclass(frozen=True)
class Metric:
    """A resolved metric: ``name`` is canonical (``"rmse"``, ``"ndcg@10"``), ``k`` the parsed
    cut-off (``None`` for a metric without one), ``candidates`` a ranking metric's candidate
    set (``None``: the full catalogue; an int: that many sampled negatives).  Call it with the
    arguments its ``needs`` prescribes (see the module docstring); the cut-off is passed for
    you."""

    name: str
    needs: Needs
    higher_is_better: bool
    fn: Callable[..., float | None]
    k: int | None = None
    candidates: int | None = None

    def __call__(self, *args: object) -> float | None:
        return self.fn(*args) if self.k is None else self.fn(*args, k=self.k)


def register_metric(
    name: str,
    fn: Callable[..., float | None],
    *,
    needs: Needs = "pointwise",
    higher_is_better: bool = False,
    at_k: bool = False,
    candidates: int | None = None,
) -> None:
    """Register ``fn`` as metric ``name`` (a later registration of the same name replaces it,
    as :func:`secemb.models.register_model` does).

    Parameters
    ----------
    name: lower-case letters, digits and ``_``, starting with a letter (no ``@``).
    fn: the metric function; its signature follows ``needs`` (module docstring).
    needs: ``"pointwise"`` or ``"ranking"``.
    higher_is_better: the direction (RMSE: False, NDCG: True).
    at_k: the metric takes a cut-off and is asked for as ``name@K``.
    candidates: for a ranking metric, the candidate set: ``None`` the full catalogue, an int
        >= 1 that many sampled negatives per held-out item.

    Raises
    ------
    InvalidParameters
        A malformed name, a non-callable ``fn``, an unknown ``needs`` or bad ``candidates``.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidParameters(f"metric name must match {_NAME.pattern!r}, got {name!r}")
    if not callable(fn):
        raise InvalidParameters(f"metric {name!r}: fn must be callable, got {type(fn).__name__}")
    if needs not in _NEEDS:
        raise InvalidParameters(f"metric {name!r}: needs must be one of {_NEEDS}, got {needs!r}")
    if candidates is not None and (needs != "ranking" or isinstance(candidates, bool)
                                   or not isinstance(candidates, int) or candidates < 1):
        raise InvalidParameters(f"metric {name!r}: candidates must be None or, for a ranking metric, an int >= 1, "
                                f"got {candidates!r}")
    _REGISTRY[name] = _Entry(fn, needs, bool(higher_is_better), bool(at_k), candidates)


def available_metrics() -> list[str]:
    """Registered metric names, sorted; those with a cut-off as ``"name@K"``."""
    return sorted(f"{n}@K" if e.at_k else n for n, e in _REGISTRY.items())


def get_metric(name: str) -> Metric:
    """Resolve ``name`` (case-insensitive, e.g. ``"RMSE"``, ``"ndcg@10"``) to a :class:`Metric`.

    Raises
    ------
    InvalidParameters
        Unknown metric (the message lists the available ones), a cut-off missing where the
        metric needs one or given where it takes none, or a cut-off that is not an int >= 1.
    """
    if not isinstance(name, str):
        raise InvalidParameters(f"metric name must be a str, got {type(name).__name__}")
    base, at, cut = name.strip().lower().partition("@")
    entry = _REGISTRY.get(base)
    if entry is None:
        raise InvalidParameters(f"unknown metric {name!r}; available: {available_metrics()}")
    if not entry.at_k:
        if at:
            raise InvalidParameters(f"metric {base!r} takes no cut-off, got {name!r}")
        return Metric(base, entry.needs, entry.higher_is_better, entry.fn, candidates=entry.candidates)
    if not at:
        raise InvalidParameters(f"metric {base!r} needs a cut-off: expected '{base}@K', got {name!r}")
    if not cut.isdigit() or int(cut) < 1:
        raise InvalidParameters(f"metric {base!r}: cut-off K must be an int >= 1, got {cut!r}")
    k = int(cut)
    return Metric(f"{base}@{k}", entry.needs, entry.higher_is_better, entry.fn, k, entry.candidates)
