"""The round's update as both servers compute it (issue 33, "one model, agreed"): this
server's aggregate share over the agreed users, noised with its own central-DP noise before
it leaves; the ring sum with the other server's share plus its own noise again; the same
deterministic optimizer step on copies.  From the same shares both servers get the same
``(table, dense, model_sha256, optimizer)``.

Party: both servers; server 0 calls it from :mod:`.close`, server 1 from :mod:`.follower`
(``peer_share``, ``peer_agree``).  It runs without the node's lock while the round is closing
(the role takes no more messages) and commits nothing.
"""

from __future__ import annotations

import copy

import numpy as np

from secemb.digest import model_sha256
from secemb.privacy.noise import add_to_share
from secemb.protocols.base import ServerRole
from secemb.round.optimizer import ServerAdam
from secemb.round.update import mean_gradient
from secemb.server.rounds import Round
from secemb.server.state import NodeState

__all__ = ["Combine"]


class Combine(NodeState):
    """The round's update as both servers compute it: this server's noised aggregate share,
    the reconstruction from both shares and the optimizer step."""

    def _own_share(self, rnd: Round, include: list[int]) -> bytes:
        """This server's aggregate share of round ``rnd`` over ``include``, noised (central
        DP) before it leaves -- the other server cannot take this noise out; the noise is kept
        in ``rnd.share_noise`` for this server's own reconstruction (:meth:`_reconstruct`)."""
        share = self.role.aggregate_share(include=include)
        if self.noise is None:
            return share
        rc = rnd.rc
        rnd.share_noise = self.noise.draw(rc.num_items * rc.width + rc.dense_size)
        return add_to_share(share, rnd.share_noise)

    def _reconstruct(self, rnd: Round, role: ServerRole, peer_share: bytes, include: list[int], opt: ServerAdam,
                     table: np.ndarray, dense: np.ndarray) -> tuple[np.ndarray, np.ndarray, str, ServerAdam]:
        """The round's update, as both servers compute it: the ring sum of this server's
        aggregate over ``include`` and ``peer_share`` (the other server's, noised), plus this
        server's own noise (:meth:`_own_share`); the optimizer step applied to ``table`` and
        ``dense`` (copies, changed in place) with a copy of ``opt``.  Deterministic: both
        servers get the same ``(table, dense, model_sha256, optimizer)``.

        Raises
        ------
        InvalidMessage, ProtocolError: ``peer_share`` is malformed or covers other users.
        """
        sparse_sum, dense_sum = rnd.busy(role.combine, peer_share, include=include)
        noise = rnd.share_noise
        if noise is not None:  # the same ring sum as both noised shares: each server adds its own noise once
            sparse_sum = sparse_sum + noise[: sparse_sum.size].reshape(sparse_sum.shape)
            dense_sum = dense_sum + noise[sparse_sum.size :]
        # apply_aggregate in two calls: the ring sums go before the optimizer's copy and step
        # (0.45 GB a server for DeepFM's dense vector at d = 512 in a 32-bit ring)
        grads = rnd.busy(mean_gradient, self.fp, sparse_sum, dense_sum, len(include), optimizer=True)
        del sparse_sum, dense_sum
        opt = copy.deepcopy(opt)
        rnd.busy(opt.step, table, dense, *grads, optimizer=True)
        return table, dense, model_sha256(table, dense), opt
