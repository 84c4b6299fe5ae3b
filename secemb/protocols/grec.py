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

from secemb.protocols.ablations import aggregate_keys, parse_keys, row_keys, row_keys_bytes
from secemb.protocols.secfedrec import FullModelServer, FullModelUser, _FullModelProtocol
from secemb.protocols.wire import array_bytes, read_array
from secemb.sharing import share

__all__ = ["GrecProtocol"]


class _GrecUser(FullModelUser):
    protocol = "grec"

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        cfg = self.config
        if cfg.layout != "full":  # keys need real points: drop empty cuckoo slots into padding keys
            idx = np.where(self._indices < 0, 0, self._indices)
        else:
            idx = self._indices
        k0, k1 = row_keys(idx, rows, cfg.num_items, cfg.ring_bits, self._rng)
        d0, d1 = share(dense, _rng=self._rng)
        return k0.to_bytes() + array_bytes(d0), k1.to_bytes() + array_bytes(d1)


class _GrecServer(FullModelServer):
    protocol = "grec"

    def __init__(self, party: int, *, server_eval: bool = True) -> None:
        super().__init__(party)
        self.server_eval = server_eval

    def _key_bytes(self) -> int:
        cfg = self._cfg()
        return row_keys_bytes(cfg.num_items, cfg.slots, cfg.width, cfg.ring_bits)

    def upload_bytes(self) -> int:
        cfg = self._cfg()
        return self._key_bytes() + cfg.dense_size * cfg.dtype.itemsize

    def absorb(self, user_id: int, body: memoryview) -> None:
        cfg = self._cfg()
        kb = self._key_bytes()
        keys = parse_keys(body[:kb], self.party, domain=cfg.num_items, count=cfg.slots, width=cfg.width,
                          ring_bits=cfg.ring_bits, what="upload")
        dense = read_array(body, kb, cfg.dtype, (cfg.dense_size,))[0]
        split = cfg.num_items * cfg.width
        if self.server_eval:
            self._acc[:split] += aggregate_keys(keys, self.party).reshape(-1)
        self._acc[split:] += dense


class GrecProtocol(_FullModelProtocol):
    """Factory of GREC training roles."""

    name = "grec"
    user_cls, server_cls = _GrecUser, _GrecServer

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = 1.25, layout_seed: int = 0,
                 *, server_eval: bool = True, **_: object) -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        self.server_eval = bool(server_eval)

    def make_server(self, party: int) -> _GrecServer:
        return _GrecServer(party, server_eval=self.server_eval)
