"""FedMF with Top-K sparsification (``fedmf-topk``): the baseline "FedMF w/ Top-K" of GREC's
Table 9 (grec.txt, Appendix A.10.1, after Gupta et al., KDD 2021), in SecFedRec's family
(:mod:`secemb.protocols.secfedrec`): full-model download from server 0, and an upload
compressed before it is additively shared between the two servers.

Upload.  The user's item update is its full sparse gradient ``G`` (m x w, zero outside its
rows).  It keeps the ``K`` entries of ``G`` of largest magnitude (ties: the lower flat index
first) and sends both servers the same ``K`` flat indices ``i * w + c`` (uint32, ascending),
each server an additive share of the ``K`` values and a share of the dense gradient.  A user
with fewer than ``K`` non-zero entries pads with index 0 and value 0 (adding nothing).  ``K``
is fixed by the round, ``K = floor(s w b / (ratio (4 + b)))`` with ``b`` the ring word's bytes
and ``s`` by ``basis``:

* ``"update"`` (the default): ``s`` = the round's slots (m' rows in the full layout), so the
  upload's item part is ``1 / ratio`` of the user's own sparse update (its m' rows, what a
  plain FedMF user sends).  The paper's Table 9 (every baseline at reduction ratio 16) reports
  a large loss for Top-K on Yelp, which only this reading gives: there a user has far fewer
  than ``m w / 32`` non-zero entries, so the other reading keeps all of them.
* ``"table"``: ``s = m``, ``1 / ratio`` of SecFedRec's full share of the m x w table.

No error feedback: what a user leaves out is lost (the paper describes none, and a user is
drawn once an epoch).

Aggregation is exact on what is kept: each server scatter-adds its value shares at the public
indices; the reconstructed sum is the sum of the users' Top-K-sparsified gradients.

Leak (why it is a baseline, not a secure protocol): the indices travel in the clear, so both
servers learn which item rows -- hence which rated items -- carry each user's largest updates.

Wire (the common frame of :mod:`secemb.protocols.wire`), body of an upload to server ``p``::

    indices uint32[K] | share_p of the K values ring[K] | share_p of the dense gradient ring[P]

Every other message is SecFedRec's.  Trained in process (``networked=False``: the benches run it
through the in-process transport only).
"""

from __future__ import annotations

import math

import numpy as np

from secemb.errors import InvalidMessage, InvalidParameters, check_float
from secemb.options import DEFAULTS
from secemb.protocols.base import Capabilities, RoundConfig
from secemb.protocols.secfedrec import FullModelProtocol, FullModelServer, FullModelUser, _accumulate
from secemb.protocols.wire import array_bytes, read_array
from secemb.sharing import share

__all__ = ["BASES", "TopKProtocol", "top_k", "top_k_count"]

_U32 = np.dtype("<u4")


#: what ``K`` is a fraction of (module docstring)
BASES = ("update", "table")


def top_k_count(rc: RoundConfig, ratio: float, basis: str = "update") -> int:
    """``K`` of a round: the most entries whose indices and value shares take at most
    ``1 / ratio`` of ``s w`` ring words (``s``: the slots for ``basis="update"``, the items for
    ``"table"``), at least 1."""
    b = rc.dtype.itemsize
    rows = rc.slots if basis == "update" else rc.num_items
    return max(1, math.floor(rows * rc.width * b / (ratio * (4 + b))))


def top_k(full: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(indices, values)``: the ``k`` entries of largest magnitude of the flat ring vector
    ``full`` (read as signed two's complement), indices ascending uint32; ties keep the lower
    index.  Fewer than ``k`` non-zero entries: all of them, then index 0 with value 0."""
    unsigned = full.view(np.uint32 if full.dtype.itemsize == 4 else np.uint64)
    nz = np.flatnonzero(unsigned)
    if nz.size > k:
        # |x| of the two's complement word, exact in the unsigned type (|-2^(b-1)| = 2^(b-1));
        # ``~magnitude`` sorts the largest first, and the stable sort keeps the lower index on ties
        words = unsigned[nz]
        negative = (words >> np.array(8 * full.dtype.itemsize - 1, words.dtype)).astype(bool)
        magnitude = np.where(negative, np.invert(words) + np.array(1, words.dtype), words)
        order = np.argsort(np.invert(magnitude), kind="stable")[:k]
        nz = np.sort(nz[order])
    idx = np.zeros(k, np.int64)
    idx[:nz.size] = nz
    vals = np.zeros(k, full.dtype)
    vals[:nz.size] = full[nz]
    return idx.astype(_U32), vals


class _TopKUser(FullModelUser):
    proto: TopKProtocol

    def encode_upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes]:
        """The Top-K indices (to both servers), then each server's shares of their values and of
        the dense gradient."""
        idx, vals = top_k(self.full_gradient(rows).reshape(-1), self.proto.k(self.config))
        v0, v1 = share(vals, _rng=self._rng)
        d0, d1 = share(dense, _rng=self._rng)
        head = array_bytes(idx)
        return head + array_bytes(v0) + array_bytes(d0), head + array_bytes(v1) + array_bytes(d1)


class _TopKServer(FullModelServer):
    proto: TopKProtocol

    def absorb(self, user_id: int, body: memoryview, *, retract: bool = False) -> None:
        """Scatter-add the value shares at the indices (``retract``: subtract them again)."""
        cfg = self._cfg()
        k = self.proto.k(cfg)
        split = cfg.num_items * cfg.width
        idx, off = read_array(body, 0, _U32, (k,))
        if idx.size and int(idx.max()) >= split:
            raise InvalidMessage(f"fedmf-topk upload: an index beyond the {split} entries of the item table")
        vals, off = read_array(body, off, cfg.dtype, (k,))
        dense = read_array(body, off, cfg.dtype, (cfg.dense_size,))[0]
        (np.subtract if retract else np.add).at(self._acc, idx.astype(np.int64), vals)
        _accumulate(self._acc[split:], dense, retract)


class TopKProtocol(FullModelProtocol):
    """Factory of FedMF w/ Top-K roles; ``ratio`` (> 1): the reduction of the item upload
    (Table 9: 16) against the ``basis`` (:data:`BASES`, :func:`top_k_count`)."""

    name = "fedmf-topk"
    capabilities = Capabilities(layouts=("full", "cuckoo"), relay=False, networked=False, options=("ratio", "basis"))
    user_cls, server_cls = _TopKUser, _TopKServer

    def __init__(self, layout: str = "full", relay: bool = False, expansion: float = DEFAULTS.expansion,
                 layout_seed: int = 0,
                 *, ratio: float = 16.0, basis: str = "update") -> None:
        super().__init__(layout, relay, expansion, layout_seed)
        ratio = check_float("ratio", ratio, above=1)
        if basis not in BASES:
            raise InvalidParameters(f"basis must be one of {BASES}, got {basis!r}")
        self.ratio, self.basis = ratio, basis

    def k(self, rc: RoundConfig) -> int:
        """The round's ``K`` (:func:`top_k_count`)."""
        return top_k_count(rc, self.ratio, self.basis)

    def upload_body_bytes(self, rc: RoundConfig, party: int) -> int:
        """``K`` indices, ``K`` value shares, then a share of the dense gradient."""
        k = self.k(rc)
        return 4 * k + (k + rc.dense_size) * rc.dtype.itemsize
