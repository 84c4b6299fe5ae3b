"""The SecEmb roles' batched glue (issue 37, goal 1): server 1's masks expanded as one batch,
and server 0 parsing each relayed request once for its forward and its evaluation."""

from __future__ import annotations

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.base import RoundConfig
from secemb.protocols.secemb import SecEmbProtocol


def _ring(gen: np.random.Generator, shape: tuple[int, ...], cfg: RoundConfig) -> np.ndarray:
    return gen.integers(0, np.iinfo(cfg.dtype).max, shape, dtype=cfg.dtype, endpoint=True)



def test_relay_prgs_expand_each_seed_as_relay_prg_does() -> None:
    from secemb.protocols.secemb import relay_prg, relay_prgs

    seeds = [bytes(range(16)), bytes(16), bytes(range(16, 32))]
    got = relay_prgs(seeds, (3, 7), np.dtype(np.uint32))
    assert got.shape == (3, 3, 7) and got.dtype == np.uint32
    for seed, row in zip(seeds, got, strict=True):
        assert np.array_equal(row, relay_prg(seed, (3, 7), np.dtype(np.uint32)))
    assert relay_prgs([], (2,), np.dtype(np.uint64)).shape == (0, 2)
    with pytest.raises(InvalidParameters):
        relay_prgs([bytes(16), b"short"], (3,), np.dtype(np.uint32))


def test_server0_evaluates_the_bytes_it_gets_not_the_ones_it_forwarded_before() -> None:
    """With relay, server 0 parses each request once for its forward and its evaluation; a
    user whose bytes differ at the evaluation is parsed again: its reply forwards the new keys
    (what a server 0 given only the new request forwards), and a malformed one is refused."""
    proto = SecEmbProtocol(layout="cuckoo", relay=True)
    cfg = proto.round_config(3, 300, 4, 5, 12, 32)
    gen = np.random.default_rng(9)
    table = _ring(gen, (cfg.num_items, cfg.width), cfg)

    def request() -> bytes:
        return proto.make_user(cfg).retrieval_request(cfg.cuckoo().assign(gen.choice(300, 12, replace=False),
                                                                          gen)[0])[0]

    first, second, other = request(), request(), request()
    s0, fresh = proto.make_server(0), proto.make_server(0)
    s0.begin_round(cfg, table)
    fresh.begin_round(cfg, table)
    forwards = s0.relay_forwards([(1, first), (2, other)])
    assert forwards is not None and all(isinstance(f, bytes) for f in forwards)
    out = s0.handle_retrieval_many([(1, second), (2, other), (3, b"junk")])
    assert out[0] == fresh.handle_retrieval(1, second) and out[0] != forwards[0]
    assert out[1] == forwards[1]
    assert isinstance(out[2], InvalidMessage)
