"""A device's LDP releases of its representation, and what they cost together
(docs/inference.md, "Several releases by one device").

Policy -- the secure default of ``secemb infer``: **one release per representation version**.
The device keeps its last release (``H~_u``, ``Z_u``) with the SHA-256 of the clean ``H_u``
and the mechanism it was drawn under.  A later inference with the same ``H_u`` and the same
``(epsilon, delta, B)`` sends the *same* bytes again (post-processing of one release: no
further privacy cost, and the server cannot average fresh draws).  A different ``H_u`` (the
device trained further) or another mechanism draws a new release, which **composes** with
the earlier ones: every release made is recorded in a ledger, and :meth:`ReleaseLedger.spent`
composes them with Google's ``dp-accounting`` privacy-loss-distribution accountant (tight for
Gaussian mechanisms), reporting the epsilon at the largest of the releases' deltas.

Two guards against a server that wants many releases (red team G, session 43):

* A ledger holds the releases of **one model** (its name and hyper-parameters, as the server
  announces them): a release for another model is refused (:class:`~secemb.errors.InvalidMessage`),
  nothing drawn.  Finding S43-G1: an MF device of dimension 8 accepted NCF of dimension 4 (the same
  9 private parameters), whose ``H_u`` is the same ``p_u`` in another shape, so a server that
  alternated the two announcements got a fresh release on every query and averaged them.
* A **privacy budget** (``max_epsilon``, default :data:`DEFAULT_MAX_EPSILON`): a new release that
  would take the composed epsilon beyond it is refused
  (:class:`~secemb.errors.InvalidParameters`), nothing drawn or recorded; the current release is
  still sent again (post-processing: no cost).  Finding S43-G2: nothing capped the releases.

On disk (``.npz``, ``allow_pickle=False``, written 0600 atomically -- ``Z_u`` and ``H~_u``
together reveal ``H_u``, so the file is as private as the device's state)::

    format    "grec-releases-2" ("grec-releases-1": the same without ``model``, read as bound to none)
    model     the model the releases are of: its name and hyper-parameters (JSON; "" when none)
    ledger    float64 (n, 4): epsilon, delta, B, sigma of every release made, oldest first
    h_sha256  the SHA-256 (hex) of the clean H_u of the current release ("" when none)
    h_tilde   float64 (R, d): the current release, what was sent
    z         float64 (R, d): Z_u = H~_u - H_u, kept for the denoiser
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.inference.mechanism import GaussianLDP, privatize
from secemb.outputs import atomic_write_bytes
from secemb.randomness import RandomBytes

__all__ = ["DEFAULT_MAX_EPSILON", "FORMAT", "ReleaseLedger", "model_identity", "representation_sha256"]

#: the file's format tag (and the earlier one, read without a model)
FORMAT = "grec-releases-2"
_FORMAT_1 = "grec-releases-1"
#: a device's default privacy budget: the composed epsilon (at the largest release delta) a new release
#: may not exceed
DEFAULT_MAX_EPSILON = 10.0


def model_identity(name: str, hparams: Mapping[str, object]) -> str:
    """The identity a ledger binds its releases to: the model's name and hyper-parameters (JSON,
    keys sorted)."""
    return json.dumps({"name": name, "hparams": hparams}, sort_keys=True, separators=(",", ":"), default=str)


def representation_sha256(h: np.ndarray) -> str:
    """SHA-256 (hex) of a clean representation: its shape and float64 little-endian bytes."""
    a = np.ascontiguousarray(np.asarray(h, dtype="<f8"))
    return hashlib.sha256(repr(a.shape).encode() + a.tobytes()).hexdigest()


@dataclass
class ReleaseLedger:
    """One device's releases (``path``: where it is kept; ``None``: in memory only).

    Attributes
    ----------
    ledger: float64 ``(n, 4)``, ``[epsilon, delta, B, sigma]`` of every release made.
    current: ``(h_sha256, mechanism, h_tilde, z)`` of the last release, or ``None``.
    model: :func:`model_identity` of the model the releases are of (``""``: none yet).
    """

    path: Path | None = None
    ledger: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    current: tuple[str, GaussianLDP, np.ndarray, np.ndarray] | None = None
    model: str = ""

    @classmethod
    def load(cls, path: str | os.PathLike) -> ReleaseLedger:
        """The ledger kept at ``path`` (an empty one if the file does not exist).

        Raises
        ------
        InvalidMessage
            The file exists but is not a readable ledger of this format.
        """
        p = Path(path)
        if not p.exists():
            return cls(p)
        try:
            with np.load(p, allow_pickle=False) as f:
                arrays = {k: f[k] for k in ("format", "ledger", "h_sha256", "h_tilde", "z")}
                model = str(f["model"]) if str(arrays["format"]) == FORMAT else ""
            if str(arrays["format"]) not in (FORMAT, _FORMAT_1):
                raise ValueError(f"format {str(arrays['format'])!r}, expected {FORMAT!r}")
            ledger = np.asarray(arrays["ledger"], dtype=np.float64)
            if ledger.ndim != 2 or ledger.shape[1] != 4 or not np.isfinite(ledger).all():
                raise ValueError(f"ledger must be a finite (n, 4) array, got {ledger.shape}")
            sha = str(arrays["h_sha256"])
            current = None
            if sha:
                if ledger.shape[0] == 0 or arrays["h_tilde"].shape != arrays["z"].shape or arrays["z"].ndim != 2:
                    raise ValueError("the current release does not match the ledger")
                eps, delta, bound, _ = (float(x) for x in ledger[-1])
                current = (sha, GaussianLDP(eps, delta, bound), np.asarray(arrays["h_tilde"], dtype=np.float64),
                           np.asarray(arrays["z"], dtype=np.float64))
        except (OSError, KeyError, ValueError) as exc:
            raise InvalidMessage(f"{p}: not a GREC release ledger ({exc})") from None
        return cls(p, ledger, current, model)

    def release(self, h: np.ndarray, mechanism: GaussianLDP, *, model: str = "",
                max_epsilon: float | None = DEFAULT_MAX_EPSILON,
                _rng: RandomBytes | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(H~_u, Z_u, reused)`` for the clean ``h`` (float64 ``(R, d)``) of ``model``
        (:func:`model_identity`; ``""``: unnamed) under ``mechanism``: the current release if it is
        of the same ``h`` and mechanism (``reused`` True), else a new one
        (:func:`~secemb.inference.privatize`), recorded in the ledger and made current.  The caller
        saves (:meth:`save`) before sending a new release.

        Raises
        ------
        InvalidMessage
            ``model`` is not the model of the ledger's releases (finding S43-G1); nothing drawn.
        InvalidParameters
            A new release would take the composed epsilon (:meth:`spent`) beyond ``max_epsilon``
            (``None``: no budget; finding S43-G2); nothing drawn or recorded.
        """
        if model and self.model and model != self.model:
            raise InvalidMessage(f"the server announces the model {model}, and this device's releases are of "
                                 f"{self.model}: refused (a server that switches the announced model would get a "
                                 "fresh release each time; a new model needs a new release file)")
        h = np.asarray(h, dtype=np.float64)
        sha = representation_sha256(h)
        if self.current is not None and self.current[0] == sha and self.current[1] == mechanism:
            return self.current[2], self.current[3], True
        row = [mechanism.epsilon, mechanism.delta, mechanism.bound, mechanism.sigma]
        if max_epsilon is not None:
            eps, delta = _composed(np.concatenate([self.ledger, np.array([row], dtype=np.float64)]))
            if eps > max_epsilon:
                raise InvalidParameters(f"a new release would spend epsilon {eps:.4g} (at delta {delta:.2g}, "
                                        f"{self.releases + 1} releases) beyond this device's budget of "
                                        f"{max_epsilon:g}: refused, nothing sent (--max-epsilon raises the budget)")
        h_tilde, z = privatize(h[None], mechanism, _rng=_rng)
        self.current = (sha, mechanism, h_tilde[0], z[0])
        self.ledger = np.concatenate([self.ledger, np.array([row], dtype=np.float64)])
        self.model = self.model or model
        return h_tilde[0], z[0], False

    @property
    def releases(self) -> int:
        """The number of releases made."""
        return int(self.ledger.shape[0])

    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` of all releases together (:func:`_composed`; ``(0, 0)`` before any
        release)."""
        return _composed(self.ledger)

    def save(self) -> Path:
        """Write the ledger to :attr:`path` (0600, atomically).

        Raises
        ------
        InvalidMessage
            No path; or the file cannot be written (the message names it).
        """
        if self.path is None:
            raise InvalidMessage("this release ledger has no file")
        sha, h_tilde, z = ("", np.zeros((0, 0)), np.zeros((0, 0))) if self.current is None else (
            self.current[0], self.current[2], self.current[3])
        buf = io.BytesIO()
        np.savez(buf, format=np.array(FORMAT), model=np.array(self.model), ledger=self.ledger,
                 h_sha256=np.array(sha), h_tilde=h_tilde, z=z)
        try:
            atomic_write_bytes(self.path, buf.getvalue(), mode=0o600)
        except OSError as exc:
            raise InvalidMessage(f"cannot write the release ledger {self.path}: {exc.strerror or exc}") from None
        return self.path


def _composed(ledger: np.ndarray) -> tuple[float, float]:
    """``(epsilon, delta)`` of the releases ``ledger`` (rows ``[epsilon, delta, B, sigma]``)
    together: the PLD accountant's epsilon at ``delta`` = the largest of their deltas (``(0, 0)``
    for none).  Each release is a Gaussian mechanism of noise multiplier ``sigma / 2B``; together
    they are exactly one Gaussian of noise multiplier ``1 / sqrt(sum (2B / sigma)^2)`` (Dong, Roth
    and Su 2019), so the accountant gets one event -- one event a release took minutes at a
    thousand releases (finding S43-G3).  At a fixed delta the epsilon only grows with releases
    (finding S43-G6: at the summed delta, as before session 43, it fell as the deltas added up, to
    0 past delta 1)."""
    if ledger.shape[0] == 0:
        return 0.0, 0.0
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    mu = float(np.sqrt(np.sum((2.0 * ledger[:, 2] / ledger[:, 3]) ** 2)))
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
    delta = float(ledger[:, 1].max())
    return float(acc.get_epsilon(delta)), delta
