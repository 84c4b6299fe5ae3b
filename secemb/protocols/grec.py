"""GREC's training protocol (Chen et al., ``../shared/papers/grec.txt`` §3.1, Algorithm 2):
full model download and FSS secure aggregation of the sparse update with **full row keys**.

Per round and user: the user downloads the whole table from server 0 (as
:mod:`secemb.protocols.secfedrec`), trains on its rows, and uploads ``m'`` full DPF keys per
server -- each ``f_i(item_i) = gradient row i`` (payload width ``w``, a fresh tree path per
key) -- plus additive shares of the dense gradient.  Servers evaluate the keys over the whole
domain and add them up.  No private retrieval (the download is the full model, ``O(m w)``),
no path sharing (the keys carry their own paths).

Key size on the wire: ``16 + 16 n + ceil(n/8) + w k/8`` bytes with ``n = ceil(log2 m)`` -- the
``(lambda + 2) n + lambda`` bits a real key needs, not GREC's Table 2 formula ``128 log2 m``
(see ``docs/baselines.md``).  Exact; what a server sees is SecEmb-RowEnc's upload.
"""

from __future__ import annotations

import numpy as np

from secemb.options import DEFAULTS
from secemb.protocols.ablations import aggregate_keys, parse_keys, row_keys, row_keys_bytes
from secemb.protocols.base import Capabilities, RoundConfig
from secemb.protocols.secfedrec import FullModelProtocol, FullModelServer, FullModelUser, _accumulate
from secemb.protocols.wire import array_bytes, read_array
from secemb.sharing import share

__all__ = ["GrecProtocol"]


def _key_bytes(rc: RoundConfig) -> int:
    """The ``slots`` full row keys of one upload."""
    return row_keys_bytes(rc.num_items, rc.slots, rc.width, rc.ring_bits)


class _GrecUser(FullModelUser):
    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        idx = self._requested()
        if cfg.layout != "full":  # keys need real points: drop empty cuckoo slots into padding keys
            idx = np.where(idx < 0, 0, idx)
        k0, k1 = row_keys(idx, rows, cfg.num_items, cfg.ring_bits, self._rng)
        d0, d1 = share(dense, _rng=self._rng)
        return k0.to_bytes() + array_bytes(d0), k1.to_bytes() + array_bytes(d1)


class _GrecServer(FullModelServer):
    proto: GrecProtocol

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        cfg = self._cfg()
        kb = _key_bytes(cfg)
        keys = parse_keys(body[:kb], self.party, domain=cfg.num_items, count=cfg.slots, width=cfg.width,
                          ring_bits=cfg.ring_bits, what="upload")
        dense = read_array(body, kb, cfg.dtype, (cfg.dense_size,))[0]
        split = cfg.num_items * cfg.width
        if self.proto.server_eval:
            _accumulate(self._acc[:split], aggregate_keys(keys, self.party).reshape(-1), retract)
        _accumulate(self._acc[split:], dense, retract)


class GrecProtocol(FullModelProtocol):
    """Factory of GREC training roles.  ``server_eval=False``: servers validate the keys but
    skip their evaluation (``secemb bench``; the aggregate's sparse part is then zero)."""

    name = "grec"
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=True, options=("server_eval",),
                                local_options=("server_eval",))
    user_cls, server_cls = _GrecUser, _GrecServer

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0,
                 *, server_eval: bool = True) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        self.server_eval = bool(server_eval)

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """``slots`` full row keys, then a share of the dense gradient."""
        return _key_bytes(rc) + rc.dense_size * rc.dtype.itemsize
