"""Index-set perturbation of secure federated submodel learning (SFSL, Algorithm 2) and its
privacy levels (Lemmas 1-2, Theorem 2 of secure-federated-submodel-learning.txt).

A client ``i`` holds its real index set ``S`` (the goods it interacted with) and, each round,
receives the union ``U`` of the chosen clients' real sets from the private set union.  It
answers the questionnaire "is ``j`` in your set?" for every ``j`` in ``U`` twice:

* **permanent randomized response** (RAPPOR's memoization): the first time ``j`` is asked,
  the answer "yes" is drawn with probability ``p1`` if ``j in S`` and ``p2`` otherwise and
  *memoized* (sets ``Y``/``N``) for every later round;
* **instantaneous randomized response**: each round, ``j`` goes into the perturbed set ``S''``
  with probability ``p3`` if ``j in Y`` and ``p4`` if ``j in N``.

So ``P[j in S'' | j in S] = p5 = p1 (p3 - p4) + p4`` and ``P[j in S'' | j not in S] = p6 =
p2 (p3 - p4) + p4``.  Local differential privacy (Definition 1): the permanent answer is
``eps_inf``-LDP (Lemma 1) and one instantaneous report ``eps_1``-LDP (Lemma 2), with
``eps = ln max(a/b, b/a, (1-a)/(1-b), (1-b)/(1-a))`` over ``(a, b) = (p1, p2)`` resp.
``(p5, p6)``; any number of rounds stays within ``eps_inf`` (Theorem 1).

Theorem 2 (secure aggregation of the submodel updates): for an index ``j`` of the union with
``n1`` live owners and ``n0`` live non-owners, the server pins one owner and learns its update
(Event 1) with probability ``p7 = p5 (1-p5)^(n1-1) (1-p6)^n0`` and learns that ``j`` is owned
by nobody who submitted (Event 2) with probability ``p8 = (1-p5)^n1 (1 - (1-p6)^n0)``.  Table V
reports one number per preset; these are **averages over the union's indices with their
actual owner counts** (:func:`event_probabilities`) -- plugging in the mean owner count does
not reproduce the table (docs/sfsl.md).

Randomness: every draw comes from a CSPRNG (:mod:`secemb.randomness`, ``os.urandom`` by
default): a server that could predict the coins could undo the perturbation.  A Bernoulli(p)
coin is ``u < round(p * 2^32)`` for a uniform 32-bit ``u``: exact for the presets (dyadic
probabilities), within ``2^-33`` of ``p`` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from secemb.errors import InvalidParameters, check_float
from secemb.randomness import RandomBytes, random_words, system_rng

__all__ = ["CPP_PRESETS", "IndexPerturber", "RRParams", "event_probabilities", "get_cpp"]

_TWO32 = 1 << 32


def _ldp_epsilon(a: float, b: float) -> float:
    """``ln max(a/b, b/a, (1-a)/(1-b), (1-b)/(1-a))``: ``inf`` when one answer is possible
    for one input and impossible for the other, ``0`` when the two distributions agree."""
    worst = 1.0
    for x, y in ((a, b), (1.0 - a, 1.0 - b)):
        if x == y:
            continue
        if x == 0.0 or y == 0.0:
            return math.inf
        worst = max(worst, x / y, y / x)
    return math.log(worst)


@dataclass(frozen=True)
class RRParams:
    """The four probabilities of Algorithm 2 (a client's choice of probability parameters).

    Attributes
    ----------
    p1, p2: permanent response: P[yes | j in S], P[yes | j not in S].
    p3, p4: instantaneous response: P[j in S'' | memoized yes], P[j in S'' | memoized no].

    Raises
    ------
    InvalidParameters
        A probability that is not a real number in ``[0, 1]``.
    """

    p1: float
    p2: float
    p3: float
    p4: float

    def __post_init__(self) -> None:
        for name in ("p1", "p2", "p3", "p4"):
            object.__setattr__(self, name, check_float(f"{name} (a probability)", getattr(self, name), low=0, high=1))

    @property
    def p5(self) -> float:
        """P[j in S'' | j in S] = p1 (p3 - p4) + p4."""
        return self.p1 * (self.p3 - self.p4) + self.p4

    @property
    def p6(self) -> float:
        """P[j in S'' | j not in S] = p2 (p3 - p4) + p4."""
        return self.p2 * (self.p3 - self.p4) + self.p4

    @property
    def eps_inf(self) -> float:
        """Lemma 1: the LDP level of the permanent response (bound over all rounds)."""
        return _ldp_epsilon(self.p1, self.p2)

    @property
    def eps_one(self) -> float:
        """Lemma 2: the LDP level of one instantaneous report (``eps_1``)."""
        return _ldp_epsilon(self.p5, self.p6)


#: Table V's choices of probability parameters (p1 = p3, p2 = p4)
CPP_PRESETS: dict[str, RRParams] = {
    "CPP1": RRParams(1.0, 0.0, 1.0, 0.0),
    "CPP2": RRParams(15 / 16, 1 / 16, 15 / 16, 1 / 16),
    "CPP3": RRParams(7 / 8, 1 / 8, 7 / 8, 1 / 8),
    "CPP4": RRParams(3 / 4, 1 / 4, 3 / 4, 1 / 4),
    "CPP5": RRParams(1.0, 1.0, 1.0, 1.0),
}


def get_cpp(name: str) -> RRParams:
    """The preset ``name`` (``"CPP1"`` ... ``"CPP5"``, case-insensitive).

    Raises
    ------
    InvalidParameters
        An unknown preset (the message lists them).
    """
    key = str(name).strip().upper()
    if key not in CPP_PRESETS:
        raise InvalidParameters(f"unknown SFSL preset {name!r}; available: {sorted(CPP_PRESETS)}")
    return CPP_PRESETS[key]


def event_probabilities(params: RRParams, owners: np.ndarray, chosen: int) -> tuple[float, float]:
    """Theorem 2's ``(p7, p8)`` averaged over the indices of the union.

    Parameters
    ----------
    params: the probability parameters every live client uses.
    owners: int64 (u,): for each index of the union, its number of live owners ``n_j1 >= 1``.
    chosen: the number of live clients ``n`` (``n_j0 = n - n_j1``).

    Returns
    -------
    (p7, p8): the means over the ``u`` indices of ``p5 (1-p5)^(n1-1) (1-p6)^n0`` and
    ``(1-p5)^n1 (1 - (1-p6)^n0)``.

    Raises
    ------
    InvalidParameters
        An empty ``owners``, or a count outside ``[1, chosen]``.
    """
    n1 = np.asarray(owners, dtype=np.int64)
    if n1.ndim != 1 or n1.size == 0:
        raise InvalidParameters(f"owners must be a non-empty 1-D array of counts, got shape {n1.shape}")
    if n1.min() < 1 or n1.max() > chosen:
        raise InvalidParameters(f"owner counts must be in [1, {chosen}], got [{n1.min()}, {n1.max()}]")
    n0 = chosen - n1
    p5, p6 = params.p5, params.p6
    q5, q6 = 1.0 - p5, 1.0 - p6
    # 0.0 ** 0 == 1.0 in numpy, as the formulas need (e.g. CPP1: a single owner, p7 = 1)
    p7 = p5 * np.power(q5, n1 - 1) * np.power(q6, n0)
    p8 = np.power(q5, n1) * (1.0 - np.power(q6, n0))
    return float(p7.mean()), float(p8.mean())


def _coins(p: float, n: int, rng: RandomBytes) -> np.ndarray:
    """bool (n,): independent Bernoulli(p) coins from the CSPRNG ``rng``."""
    threshold = round(p * _TWO32)
    if threshold >= _TWO32:
        return np.ones(n, dtype=bool)
    if threshold <= 0:
        return np.zeros(n, dtype=bool)
    return random_words(rng, (n,), np.uint32) < np.uint32(threshold)


class IndexPerturber:
    """One client's Algorithm 2 with its persistent memo (the permanent answers ``Y``, ``N``).

    Parameters
    ----------
    real: int64, the client's real index set ``S`` (any order; duplicates ignored).  It must
        not change across rounds (the paper's prerequisite), so it is fixed here.
    params: the client's probability parameters.

    The memo is the client's own state (the paper's "disk load"); :meth:`state_dict` and
    :meth:`from_state_dict` persist it.  Nothing in it ever leaves the device.
    """

    def __init__(self, real: np.ndarray, params: RRParams) -> None:
        if not isinstance(params, RRParams):
            raise InvalidParameters(f"params must be an RRParams, got {type(params).__name__}")
        real = np.asarray(real)
        if real.ndim != 1 or (real.size and not np.issubdtype(real.dtype, np.integer)):
            raise InvalidParameters(f"real must be a 1-D integer array, got {real.dtype} {real.shape}")
        self.real = np.unique(real.astype(np.int64))
        self.params = params
        self.yes = np.empty(0, dtype=np.int64)
        self.no = np.empty(0, dtype=np.int64)

    def perturb(self, union: np.ndarray, *, _rng: RandomBytes = system_rng) -> np.ndarray:
        """The round's perturbed index set ``S''`` (int64, sorted, a subset of ``union``).

        New indices of ``union`` (in neither memo) get their permanent answer first (``p1``/
        ``p2``, memoized); then every index of ``union`` is reported with ``p3`` (memoized yes)
        or ``p4`` (memoized no).  ``_rng`` is the CSPRNG (tests inject a
        :class:`~secemb.randomness.CtrDrbg`).

        Raises
        ------
        InvalidParameters
            ``union`` is not a 1-D integer array.
        """
        union = np.asarray(union)
        if union.ndim != 1 or (union.size and not np.issubdtype(union.dtype, np.integer)):
            raise InvalidParameters(f"union must be a 1-D integer array, got {union.dtype} {union.shape}")
        union = np.unique(union.astype(np.int64))
        p = self.params
        new = union[~(np.isin(union, self.yes, assume_unique=True) | np.isin(union, self.no, assume_unique=True))]
        if new.size:
            owned = np.isin(new, self.real, assume_unique=True)
            answer = np.where(owned, _coins(p.p1, new.size, _rng), _coins(p.p2, new.size, _rng))
            self.yes = np.union1d(self.yes, new[answer])
            self.no = np.union1d(self.no, new[~answer])
        memo_yes = np.isin(union, self.yes, assume_unique=True)
        report = np.where(memo_yes, _coins(p.p3, union.size, _rng), _coins(p.p4, union.size, _rng))
        return union[report]

    def succinct(self, perturbed: np.ndarray) -> np.ndarray:
        """``S ∩ S''`` (int64, sorted): the indices the client really trains on."""
        return np.intersect1d(self.real, perturbed, assume_unique=False)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The memo as arrays (copies): ``yes``, ``no`` int64 sorted."""
        return {"yes": self.yes.copy(), "no": self.no.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a memo from :meth:`state_dict`.

        Raises
        ------
        InvalidParameters
            Keys other than ``yes``/``no``, non-integer arrays, or an index in both.
        """
        if set(state) != {"yes", "no"}:
            raise InvalidParameters(f"memo state must have keys ['no', 'yes'], got {sorted(state)}")
        arrays = [np.asarray(state[k]) for k in ("yes", "no")]
        if any(a.ndim != 1 or (a.size and not np.issubdtype(a.dtype, np.integer)) for a in arrays):
            raise InvalidParameters("memo state: 'yes' and 'no' must be 1-D integer arrays")
        yes, no = (np.unique(a.astype(np.int64)) for a in arrays)
        if np.intersect1d(yes, no).size:
            raise InvalidParameters("memo state: an index is memoized both yes and no")
        self.yes, self.no = yes, no
