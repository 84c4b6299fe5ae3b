"""A SecEmb device never uploads a gradient for a slot it did not request (an empty cuckoo
bucket): :meth:`SecEmbUser.upload` refuses rows of empty slots that are not zero, and the
batched :meth:`SecEmbUser.uploads` (issue 37: checked for all users at once) refuses exactly
those users, with the same error, and gives every other user the same bytes as its own call."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidParameters
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.randomness import CtrDrbg

USERS = 5
FILLED = (1, 3)  # the users whose gradient has a non-zero row in an empty slot


def _round(relay: bool) -> tuple[list[SecEmbUser], list[SecEmbUser], list[tuple[np.ndarray, np.ndarray]]]:
    """Two copies of one round's users with the same keys (retrieval requests made, a reply's sketch
    seed given), and their
    gradients: zero rows in empty slots except for the users of :data:`FILLED`."""
    proto = SecEmbProtocol(layout="cuckoo", relay=relay)
    cfg = proto.round_config(2, 300, 5, 7, 12, 32)
    gen = np.random.default_rng(3)
    indices = [cfg.cuckoo().assign(gen.choice(cfg.num_items, 12, replace=False), gen)[0] for _ in range(USERS)]
    copies = []
    for _ in range(2):
        users = [proto.make_user(cfg, _rng=CtrDrbg(b"user/%d" % u)) for u in range(USERS)]
        assert all(not isinstance(r, Exception)
                   for r in SecEmbUser.retrieval_requests(users, indices, _rng=CtrDrbg(b"keys")))
        for u in users:  # the sketch seed a retrieval reply would carry (verified uploads: no upload before it)
            u._sketch_seed = bytes(16)
        copies.append(users)
    gradients = []
    for u in range(USERS):
        rows = gen.integers(0, 2**32, (cfg.slots, cfg.width), dtype=np.uint32)
        empty = np.nonzero(indices[u] < 0)[0]
        assert empty.size  # 12 items in 15 buckets
        rows[empty] = 0
        if u in FILLED:
            rows[empty[-1], 0] = 1
        gradients.append((rows, gen.integers(0, 2**32, cfg.dense_size, dtype=np.uint32)))
    return copies[0], copies[1], gradients


@pytest.mark.parametrize("relay", [False, True])
def test_a_batch_refuses_exactly_the_users_with_rows_in_empty_slots(relay: bool) -> None:
    single, batch, gradients = _round(relay)
    got = SecEmbUser.uploads(batch, gradients)
    for u in range(USERS):
        if u in FILLED:
            assert isinstance(got[u], InvalidParameters) and str(got[u]) == "rows of empty slots must be zero"
            with pytest.raises(InvalidParameters, match="rows of empty slots must be zero"):
                single[u].upload(*gradients[u])
            assert batch[u]._state is not None  # refused: its round state unchanged
        else:  # the same bytes as its own call (dense shares from the user's own seeded randomness)
            assert got[u] == single[u].upload(*gradients[u])
