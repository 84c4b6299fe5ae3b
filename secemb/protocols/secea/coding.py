"""SecEA's coding layer (paper Eqs. 3-16) on field arrays: no keys, no bytes, no parties.

Shapes: ``M`` entities in the union, ``E`` entities a client retrieves, ``N`` clients, ``w``
elements per part.  Every array is ``uint64`` with values in Z_p (:mod:`.field`) unless stated.
Functions that draw randomness take ``rng`` (a :data:`secemb.randomness.RandomBytes`); pass a
CSPRNG (the default of the parties is :func:`secemb.randomness.system_rng`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError
from secemb.protocols.secea import field
from secemb.protocols.secea.field import P
from secemb.protocols.secea.lagrange import basis_matrix
from secemb.randomness import RandomBytes

__all__ = ["SecEAParams", "expand", "share", "queries", "answer", "server_noise", "decode", "decode_average"]


@dataclass(frozen=True)
class SecEAParams:
    """Public parameters of one SecEA deployment, validated once.

    Parameters
    ----------
    num_clients:
        ``N >= 2``.
    threshold:
        ``T``, the largest coalition of curious clients tolerated; ``0 <= T < N/2``.
    dim:
        ``d``, the embedding length.
    parts:
        ``K``; ``None`` takes the paper's ``K = floor((N+1)/2) - T`` (Eq. 4), the largest allowed.
        A smaller ``K`` sends more field elements but needs fewer answers (see
        :attr:`needed_answers`), so it tolerates more silos dropping out after sharing.
    frac_bits:
        ``f``, fractional bits of the fixed-point encoding.
    alphas, betas:
        The public evaluation points; default ``alpha_v = K + T + v`` and ``beta_k = k``
        (1-based), which are distinct.
    """

    num_clients: int
    threshold: int
    dim: int
    parts: int | None = None
    frac_bits: int = 16
    alphas: tuple[int, ...] | None = None
    betas: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        n, t = self.num_clients, self.threshold
        if n < 2:
            raise InvalidParameters(f"num_clients must be >= 2, got {n}")
        if not 0 <= t or not 2 * t < n:
            raise InvalidParameters(f"threshold T must satisfy 0 <= T < N/2 = {n / 2}, got {t}")
        k_max = (n + 1) // 2 - t
        k = k_max if self.parts is None else self.parts
        if not 1 <= k <= k_max:
            raise InvalidParameters(f"parts K must be in [1, floor((N+1)/2) - T = {k_max}], got {k}")
        object.__setattr__(self, "parts", k)
        if self.dim < 1:
            raise InvalidParameters(f"dim must be >= 1, got {self.dim}")
        if not 0 <= self.frac_bits <= 24:
            raise InvalidParameters(f"frac_bits must be in [0, 24], got {self.frac_bits}")
        alphas = self.alphas or tuple(k + t + v for v in range(1, n + 1))
        betas = self.betas or tuple(range(1, k + t + 1))
        if len(alphas) != n or len(betas) != k + t:
            raise InvalidParameters(f"need {n} alphas and {k + t} betas, got {len(alphas)} and {len(betas)}")
        points = [int(x) % P for x in alphas + betas]
        if len(set(points)) != len(points):
            raise InvalidParameters("the alphas and betas must be pairwise distinct in Z_p")
        object.__setattr__(self, "alphas", tuple(int(a) for a in alphas))
        object.__setattr__(self, "betas", tuple(int(b) for b in betas))
        if self.max_abs <= 0:
            raise InvalidParameters(
                f"no fixed-point range left: L = lcm(1..{n}) = {self.lcm} times 2^{self.frac_bits} exceeds p/2"
            )

    @property
    def k(self) -> int:
        """``K``, the number of parts each expanded embedding is split into."""
        return int(self.parts or 0)

    @property
    def width(self) -> int:
        """``w = ceil((d+1)/K)``: field elements per part (the expanded vector is zero-padded)."""
        return -(-(self.dim + 1) // self.k)

    @property
    def needed_answers(self) -> int:
        """``2(K+T-1)+1``: answers a client needs to interpolate (Eq. 14); ``<= N``."""
        return 2 * (self.k + self.threshold - 1) + 1

    @property
    def noise_points(self) -> int:
        """``K~ = K + 2T - 1``: the server's random values per noise polynomial (Eq. 12)."""
        return self.k + 2 * self.threshold - 1

    @property
    def lcm(self) -> int:
        """``L = lcm(1..N)``: multiplying ``S * c^-1`` by it gives the integer ``L*S/c``."""
        return math.lcm(*range(1, self.num_clients + 1))

    @property
    def max_abs(self) -> float:
        """Largest ``|h|`` encoded: ``L * |h| * 2^f`` stays below ``p/2`` so the decoded
        ``L * S / c`` (an average, so no larger than ``L * max|h| * 2^f``) is read back exactly."""
        return math.floor((P // 2) / self.lcm) / 2.0**self.frac_bits

    @cached_property
    def share_matrix(self) -> np.ndarray:
        """``(N, K+T)``: ``l_k(alpha_v)`` over the betas (Eq. 6-7, 11)."""
        return basis_matrix(self.betas or (), self.alphas or ())

    @cached_property
    def noise_matrix(self) -> np.ndarray:
        """``(N, K~)``: the noise polynomial's value at ``alpha_v`` from its values at
        ``alpha_1..alpha_K~`` given that it vanishes at ``beta_1..beta_K`` (Eq. 12)."""
        alphas, betas = self.alphas or (), self.betas or ()
        nodes = betas[: self.k] + alphas[: self.noise_points]
        return basis_matrix(nodes, alphas)[:, self.k :]

    def decode_matrix(self, answered: list[int]) -> np.ndarray:
        """``(K, D)``: interpolation at ``beta_1..beta_K`` from the answers of the first
        ``D = needed_answers`` clients in ``answered`` (0-based indices) (Eq. 15)."""
        if len(answered) < self.needed_answers:
            raise ProtocolError(
                f"round aborted: {len(answered)} answers arrived, {self.needed_answers} = 2(K+T-1)+1 are needed"
            )
        alphas, betas = self.alphas or (), self.betas or ()
        return basis_matrix([alphas[v] for v in answered[: self.needed_answers]], betas[: self.k])


def expand(params: SecEAParams, num_entities: int, own: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The expanded embeddings ``h~`` of Eq. 3, fixed-point encoded and zero-padded.

    Parameters
    ----------
    own:
        int64, shape ``(E,)``: positions in ``[0, M)`` of the client's entities, distinct.
    rows:
        float, shape ``(E, d)``: their embeddings; clipped to ``[-max_abs, max_abs]``.

    Returns
    -------
    numpy.ndarray
        shape ``(M, K*w)``: row ``m`` is ``(round(h * 2^f), 1, 0...)`` if ``m`` is in ``own``,
        else zeros.
    """
    own = np.asarray(own, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.float64)
    if rows.shape != (own.size, params.dim):
        raise InvalidParameters(f"rows must have shape ({own.size}, {params.dim}), got {rows.shape}")
    if own.size and (own.min() < 0 or own.max() >= num_entities or np.unique(own).size != own.size):
        raise InvalidParameters(f"own entity positions must be distinct and in [0, {num_entities})")
    if not np.all(np.isfinite(rows)):
        raise InvalidParameters("embeddings must be finite")
    fixed = np.rint(np.clip(rows, -params.max_abs, params.max_abs) * 2.0**params.frac_bits).astype(np.int64)
    out = np.zeros((num_entities, params.k * params.width), dtype=np.uint64)
    out[own, : params.dim] = field.as_field(fixed)
    out[own, params.dim] = 1
    return out


def share(params: SecEAParams, expanded: np.ndarray, rng: RandomBytes) -> np.ndarray:
    """Lagrange shares ``phi_{n,e_m}(alpha_v)`` of Eq. 6-7 for all ``v`` and ``m``.

    ``expanded`` has shape ``(M, K*w)``; returns shape ``(N, M, w)``: ``[v]`` is ``y_{n,v}``.
    """
    m = expanded.shape[0]
    k, t, w = params.k, params.threshold, params.width
    secrets_ = expanded.reshape(m, k, w).transpose(1, 0, 2).reshape(k, m * w)
    noise = field.uniform(rng, (t, m * w))
    values = np.concatenate([secrets_, noise]) if t else secrets_
    return field.matmul(params.share_matrix, values).reshape(params.num_clients, m, w)


def queries(params: SecEAParams, targets: np.ndarray, num_entities: int, rng: RandomBytes) -> np.ndarray:
    """Query vectors ``q_{n,v,e}`` of Eq. 9-11 for every target ``e`` and every client ``v``.

    ``targets``: int64, shape ``(E,)``, positions in ``[0, M)``.  Returns shape ``(N, E, M)``.
    """
    targets = np.asarray(targets, dtype=np.int64)
    e, m, k, t = targets.size, num_entities, params.k, params.threshold
    basis = params.share_matrix
    ones = basis[:, :k].sum(axis=1) % np.uint64(P)  # sum_{k<=K} l_k(alpha_v): the value where e_m = e
    if t:
        out = field.matmul(basis[:, k:], field.uniform(rng, (t, e * m)))
    else:
        out = np.zeros((params.num_clients, e * m), np.uint64)
    out = out.reshape(params.num_clients, e, m)
    out[:, np.arange(e), targets] = (out[:, np.arange(e), targets] + ones[:, None]) % np.uint64(P)
    return out


def answer(query: np.ndarray, stored: np.ndarray) -> np.ndarray:
    """Client v's answers ``A = <q, y_v>``: ``query`` (E, M) times ``stored`` ``y_v`` (M, w) -> (E, w)."""
    return field.matmul(query, stored)


def server_noise(params: SecEAParams, count: int, rng: RandomBytes) -> tuple[np.ndarray, np.ndarray]:
    """The server's masks for ``count`` retrievals of one client (Eq. 12-13).

    Returns ``(r, psi)``: ``r`` shape ``(count,)`` uniform in Z_p^*, and ``psi`` shape
    ``(N, count, w)``: ``psi_{n,e}(alpha_v)``, a polynomial of degree ``2(K+T-1)`` vanishing at
    ``beta_1..beta_K`` and uniform at ``alpha_1..alpha_K~``.
    """
    r = field.uniform(rng, (count,))
    while np.any(r == 0):
        r[r == 0] = field.uniform(rng, (int(np.count_nonzero(r == 0)),))
    z = field.uniform(rng, (params.noise_points, count * params.width))
    psi = field.matmul(params.noise_matrix, z).reshape(params.num_clients, count, params.width)
    return r, psi


def decode(params: SecEAParams, answers: np.ndarray, answered: list[int]) -> np.ndarray:
    """``Y_{n,e}(beta_k)`` for ``k <= K`` (Eq. 15-16) from the decrypted answers.

    ``answers``: shape ``(len(answered), E, w)``, ``[i]`` the answers of client ``answered[i]``.
    Returns shape ``(E, K*w)``: ``(r*S, r*c, 0...)`` per target, ``S`` the sum of the owners'
    encoded embeddings and ``c`` their number.

    Raises
    ------
    ProtocolError
        If fewer than :attr:`SecEAParams.needed_answers` answers arrived (round aborted).
    """
    coeff = params.decode_matrix(answered)
    d_, e, w = params.needed_answers, answers.shape[1], params.width
    at_betas = field.matmul(coeff, answers[:d_].reshape(d_, e * w)).reshape(params.k, e, w)
    return at_betas.transpose(1, 0, 2).reshape(e, params.k * w)


def decode_average(params: SecEAParams, decoded: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The averages from :func:`decode`'s ``(r*S, r*c)``.

    Returns ``(numerators, averages)``: int64 ``L*S/c`` of shape ``(E, d)`` (exact: ``c``
    divides ``L``) and float64 ``L*S/c / (L * 2^f)``.

    Raises
    ------
    ProtocolError
        If a retrieved count ``r*c`` is zero (the entity is in no client's set).
    """
    rc = decoded[:, params.dim]
    if np.any(rc == 0):
        raise ProtocolError("a retrieved entity has count zero: no client holds it")
    scale = (field.inverse(rc) * np.uint64(params.lcm % P)) % np.uint64(P)
    numerators = field.to_signed((decoded[:, : params.dim] * scale[:, None]) % np.uint64(P))
    return numerators, numerators / float(params.lcm * 2**params.frac_bits)


def run_arithmetic(params: SecEAParams, num_entities: int, own: list[np.ndarray], rows: list[np.ndarray],
                   rng: RandomBytes) -> list[np.ndarray]:
    """One round of SecEA's field arithmetic for all clients, without the layers that leave
    values unchanged (the XOR pads of the relay and Paillier, whose decryption returns the
    masked answer exactly): shares, queries, answers, the server's ``r`` and ``psi``, decoding.

    ``own[n]`` (int64, positions in ``[0, M)``) and ``rows[n]`` (float, ``(len(own[n]), d)``)
    per client; returns each client's averages (float64, ``(len(own[n]), d)``).  The parties
    (:mod:`.parties`) compute the same values from bytes; this is for long training runs.
    """
    n_clients = params.num_clients
    stored = np.zeros((n_clients, num_entities, params.width), dtype=np.uint64)
    for n in range(n_clients):
        stored = (stored + share(params, expand(params, num_entities, own[n], rows[n]), rng)) % np.uint64(P)
    out = []
    for n in range(n_clients):
        asks = queries(params, own[n], num_entities, rng)
        r, psi = server_noise(params, own[n].size, rng)
        masked = np.stack([(answer(asks[v], stored[v]) * r[:, None] + psi[v]) % np.uint64(P) for v in range(n_clients)])
        out.append(decode_average(params, decode(params, masked, list(range(n_clients))))[1])
    return out
