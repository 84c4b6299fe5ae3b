"""DP-FedRec -- the local-DP baseline of SecEmb's Figure 7 (Appendix G.2): no secure
aggregation; each device adds Gaussian noise to its *whole* upload, so that every upload on
its own is ``(epsilon, delta)``-DP (local DP) over the user's participations.

Per round and user it is SecFedRec's message pattern (:mod:`secemb.protocols.secfedrec`: the
full table down, a full-size gradient up), with two changes: server 0's share is a seed (below),
and before sending, the device adds discrete Gaussian noise ``N_Z(0, sigma^2)`` (ring units,
from the OS CSPRNG) to every one of the ``m w + P`` coordinates of its clipped, encoded
gradient -- all of them, since noise only on the rated rows would reveal which items it rated.
The noisy vector still travels as two additive shares (so the baseline runs on the two-server
engine unchanged); its guarantee is the one of a public upload, which is what DP-FedRec claims.

What each server receives per user and round: server 0 a fresh 16-byte seed, server 1 the
full-size ``(m w + P)``-word vector ``x - r`` (``x`` the noisy upload, ``r`` the AES-CTR
expansion of the seed, :func:`secemb.randomness.expand_seed`, as SecEmb's and the lossy
baselines' seeded shares); server 0 expands the seed to ``r``, so the two sum to the servers'
shares of the same aggregate as two full-size uniform shares would.  The traffic is one full
model up (``(m w + P) k / 8`` bytes and 16 more), as DP-FedRec's noisy upload of the whole
model in the paper; each share alone is still uniform (server 1's is masked by ``r``).
``sigma`` and the L2 bound ``clip``
the devices clip their round contribution to (what ``sigma`` is calibrated for) are protocol
options: set from the run's DP plan (:func:`secemb.privacy.plan_dp` with ``central=False``: no
sampling amplification, ``epochs`` releases per user) through
:meth:`DPFedRecProtocol.with_noise` in a simulation, and announced to standalone devices in the
round document's protocol options in a deployment (``[protocol.options] sigma``, ``clip``), from
which a device clips (:meth:`DPFedRecProtocol.device_clip`, used by
:meth:`secemb.client.device.RoundInfo.clip`).
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidParameters, check_float
from secemb.options import DEFAULTS
from secemb.privacy.noise import ClipSpec, clip_spec, discrete_gaussian, to_ring
from secemb.protocols.base import Capabilities, RoundConfig
from secemb.protocols.secfedrec import FullModelProtocol, FullModelServer, FullModelUser, _accumulate
from secemb.protocols.wire import array_bytes
from secemb.randomness import SEED_BYTES, expand_seed

__all__ = ["DPFedRecProtocol", "DPFedRecServer", "DPFedRecUser"]


class DPFedRecUser(FullModelUser):
    """A SecFedRec user that noises its full-size upload first."""

    proto: DPFedRecProtocol

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        """Additive shares of ``x = [full gradient (m w), dense (P)] + noise`` (noise on every
        coordinate, drawn first from the user's randomness): a fresh 16-byte seed for server
        0, and ``x - expand_seed(seed)`` (full size) for server 1."""
        cfg = self.config
        vec = np.concatenate([self.full_gradient(rows).reshape(-1), dense])
        if self.proto.sigma > 0:
            np.add(vec, to_ring(cfg.ring_bits, discrete_gaussian(self.proto.sigma, vec.size, _rng=self._rng)), out=vec)
        seed = bytes(self._rng(SEED_BYTES))
        np.subtract(vec, expand_seed(seed, vec.shape, vec.dtype), out=vec)
        return seed, array_bytes(vec)


class DPFedRecServer(FullModelServer):
    """A full-model server whose party-0 uploads are seeds (:class:`DPFedRecUser`)."""

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        """Server 0: add (``retract``: subtract) the expansion of the user's seed; server 1:
        its full-size share, as :class:`FullModelServer`."""
        if self.party == 1:
            super().absorb(user_id, body, retract=retract)
            return
        _accumulate(self._acc, expand_seed(bytes(body), self._acc.shape, self._cfg().dtype), retract)


class DPFedRecProtocol(FullModelProtocol):
    """Factory of DP-FedRec roles; ``sigma``: each device's noise scale in ring units, ``clip``:
    the L2 bound of a device's round contribution it is calibrated for.  Both 0 (SecFedRec's
    gradient without noise, still sent as a seed and a full-size share) or both positive (a DP
    run sets them from its plan)."""

    name = "dp-fedrec"
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, options=("sigma", "clip"),
                                local_dp=True)
    user_cls = DPFedRecUser
    server_cls = DPFedRecServer

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0,
                 *, sigma: float = 0.0, clip: float = 0.0) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        for name, v in (("sigma", sigma), ("clip", clip)):
            check_float(name, v, low=0)
        if bool(sigma) != bool(clip):
            raise InvalidParameters(f"dp-fedrec: sigma and clip go together (the noise is calibrated for the clip "
                                    f"bound), got sigma={sigma!r}, clip={clip!r}")
        self.sigma, self.clip = float(sigma), float(clip)

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """Server 0: the 16-byte seed; server 1: the full-size share, ``(m w + P)`` words."""
        return SEED_BYTES if party == 0 else super().upload_body_bytes(rc, party)

    def with_noise(self, sigma: float, clip: float) -> DPFedRecProtocol:
        """The same protocol with the devices' noise scale ``sigma`` (ring units) and L2 bound
        ``clip``."""
        return DPFedRecProtocol(self.layout, self.relay, self.expansion, self.layout_seed, sigma=sigma, clip=clip)

    def device_clip(self) -> ClipSpec | None:
        """What a device clips to before its noise (``None`` without noise): its whole round
        contribution to L2 norm ``clip``, and every coordinate so that ``n_p`` contributions
        plus each device's noise tail never wrap."""
        return clip_spec(self.clip, self.sigma, central=False) if self.sigma else None
