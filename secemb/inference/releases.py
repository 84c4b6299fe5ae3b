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
Gaussian mechanisms), reporting the epsilon at the summed delta.

On disk (``.npz``, ``allow_pickle=False``, written 0600 atomically -- ``Z_u`` and ``H~_u``
together reveal ``H_u``, so the file is as private as the device's state)::

    format    "grec-releases-1"
    ledger    float64 (n, 4): epsilon, delta, B, sigma of every release made, oldest first
    h_sha256  the SHA-256 (hex) of the clean H_u of the current release ("" when none)
    h_tilde   float64 (R, d): the current release, what was sent
    z         float64 (R, d): Z_u = H~_u - H_u, kept for the denoiser
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from secemb.errors import InvalidMessage
from secemb.inference.mechanism import GaussianLDP, privatize
from secemb.outputs import atomic_write_bytes
from secemb.randomness import RandomBytes

__all__ = ["FORMAT", "ReleaseLedger", "representation_sha256"]

#: the file's format tag
FORMAT = "grec-releases-1"


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
    """

    path: Path | None = None
    ledger: np.ndarray = field(default_factory=lambda: np.zeros((0, 4)))
    current: tuple[str, GaussianLDP, np.ndarray, np.ndarray] | None = None

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
            if str(arrays["format"]) != FORMAT:
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
        return cls(p, ledger, current)

    def release(self, h: np.ndarray, mechanism: GaussianLDP, *,
                _rng: RandomBytes | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
        """``(H~_u, Z_u, reused)`` for the clean ``h`` (float64 ``(R, d)``) under ``mechanism``:
        the current release if it is of the same ``h`` and mechanism (``reused`` True), else a
        new one (:func:`~secemb.inference.privatize`), recorded in the ledger and made current.
        The caller saves (:meth:`save`) before sending a new release."""
        h = np.asarray(h, dtype=np.float64)
        sha = representation_sha256(h)
        if self.current is not None and self.current[0] == sha and self.current[1] == mechanism:
            return self.current[2], self.current[3], True
        h_tilde, z = privatize(h[None], mechanism, _rng=_rng)
        self.current = (sha, mechanism, h_tilde[0], z[0])
        row = [mechanism.epsilon, mechanism.delta, mechanism.bound, mechanism.sigma]
        self.ledger = np.concatenate([self.ledger, np.array([row], dtype=np.float64)])
        return h_tilde[0], z[0], False

    @property
    def releases(self) -> int:
        """The number of releases made."""
        return int(self.ledger.shape[0])

    def spent(self) -> tuple[float, float]:
        """``(epsilon, delta)`` of all releases together: the PLD accountant's epsilon at
        ``delta`` = the sum of the releases' deltas (``(0, 0)`` before any release).  Each
        release is a Gaussian mechanism of noise multiplier ``sigma / 2B``; together they are
        one Gaussian of noise multiplier ``1 / sqrt(sum (2B / sigma)^2)``."""
        if self.releases == 0:
            return 0.0, 0.0
        import dp_accounting
        from dp_accounting.pld import pld_privacy_accountant

        # Gaussian mechanisms compose exactly to one Gaussian: mu^2 = sum (2B / sigma_i)^2 (Dong, Roth
        # and Su 2019), so the accountant gets one event -- one event a release took minutes at a
        # thousand releases (finding S43-G3)
        mu = float(np.sqrt(np.sum((2.0 * self.ledger[:, 2] / self.ledger[:, 3]) ** 2)))
        acc = pld_privacy_accountant.PLDAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
        delta = float(self.ledger[:, 1].sum())
        return float(acc.get_epsilon(delta)), delta

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
        np.savez(buf, format=np.array(FORMAT), ledger=self.ledger, h_sha256=np.array(sha), h_tilde=h_tilde, z=z)
        try:
            atomic_write_bytes(self.path, buf.getvalue(), mode=0o600)
        except OSError as exc:
            raise InvalidMessage(f"cannot write the release ledger {self.path}: {exc.strerror or exc}") from None
        return self.path
