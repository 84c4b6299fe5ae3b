"""Shared hypothesis strategies and helpers for the FSS tests (imported by ``test_fss_*.py``;
pytest's default import mode puts this directory on ``sys.path``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from secemb.randomness import CtrDrbg

RINGS = (32, 64)

#: domain sizes around powers of two and the paper's datasets (ML-100K 1682, ML-1M 3883)
EDGE_DOMAINS = (1, 2, 3, 4, 5, 7, 8, 9, 127, 128, 129, 255, 256, 257, 1000, 1682)


def ring_dtype(ring_bits: int) -> np.dtype:
    return np.dtype(np.uint32 if ring_bits == 32 else np.uint64)


def point_function(alphas: np.ndarray, betas: np.ndarray, m: int) -> np.ndarray:
    """The plaintext truth: (K, m, d) with ``betas[i]`` at ``alphas[i]``, zero elsewhere."""
    k, d = betas.shape
    out = np.zeros((k, m, d), betas.dtype)
    out[np.arange(k), np.asarray(alphas, dtype=np.int64)] = betas
    return out


def random_ring(
    gen: np.random.Generator, shape: tuple[int, ...], ring_bits: int
) -> np.ndarray:
    dt = ring_dtype(ring_bits)
    return gen.integers(0, np.iinfo(dt).max, shape, dtype=dt, endpoint=True)


@dataclass(frozen=True)
class DPFCase:
    """One batch of point functions plus a seed for the key generator's ``_rng``."""

    domain_size: int
    ring_bits: int
    alphas: np.ndarray
    betas: np.ndarray
    seed: bytes

    def rng(self) -> CtrDrbg:
        return CtrDrbg(self.seed)

    @property
    def truth(self) -> np.ndarray:
        return point_function(self.alphas, self.betas, self.domain_size)


def domain_sizes(max_size: int = 300) -> st.SearchStrategy[int]:
    return st.one_of(
        st.sampled_from([m for m in EDGE_DOMAINS if m <= max_size]),
        st.integers(1, max_size),
    )


def ring_bits() -> st.SearchStrategy[int]:
    return st.sampled_from(RINGS)


def seeds() -> st.SearchStrategy[bytes]:
    return st.binary(min_size=1, max_size=16)


@st.composite
def dpf_cases(
    draw: st.DrawFn,
    *,
    max_domain: int = 300,
    max_keys: int = 4,
    min_keys: int = 1,
    max_width: int = 5,
) -> DPFCase:
    m = draw(domain_sizes(max_domain))
    k = draw(st.integers(min_keys, max_keys))
    d = draw(st.integers(1, max_width))
    rb = draw(ring_bits())
    alphas = np.array(
        draw(st.lists(st.integers(0, m - 1), min_size=k, max_size=k)), dtype=np.int64
    )
    betas = draw(hnp.arrays(ring_dtype(rb), (k, d)))
    return DPFCase(m, rb, alphas, betas, draw(seeds()))
