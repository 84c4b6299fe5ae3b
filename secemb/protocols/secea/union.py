"""SecEA's one-time private entity union (Sec. III-A) through the Bloom-filter PSU of
:mod:`secemb.secagg.psu` (SFSL's Algorithm 3 over Bonawitz secure aggregation).

The paper cites Seo-Cheon-Katz (2012) for this step; the issue allows SFSL's Bloom PSU instead.
What it reveals: the union E (to the server and every client, as in the paper); the server sees
secure-aggregation messages only, and the per-entity counts are hidden by the uniform non-zero
words each client puts at its positions.  With the exact filter (one position per entity id,
``BloomParams.exact``, the default for domains up to 2^22) there are no false positives; with a
hashed filter a false positive only adds an entity no client holds, whose shares are zero and
which no client queries -- it costs bytes, never correctness.
"""

from __future__ import annotations

import numpy as np

from secemb.errors import InvalidParameters, ProtocolError
from secemb.randomness import RandomBytes
from secemb.secagg import BloomParams, default_threshold, run_psu

__all__ = ["private_union"]

_EXACT_DOMAIN = 1 << 22


def private_union(sets: list[np.ndarray], domain: int, *, _rng: RandomBytes | None = None
                  ) -> tuple[np.ndarray, dict[int, int], dict[int, int]]:
    """The union of the clients' entity sets (ids in ``[0, domain)``) by the Bloom PSU.

    Returns ``(union, upload_bytes, download_bytes)``: the sorted int64 union and ``len()`` of
    the PSU messages per client.

    Raises
    ------
    InvalidParameters
        An id outside ``[0, domain)``.
    ProtocolError
        A client is missing from the union's survivors (SecEA needs every silo's set).
    """
    for s in sets:
        if s.size and (int(s.min()) < 0 or int(s.max()) >= domain):
            raise InvalidParameters(f"entity ids must be in [0, {domain})")
    if domain <= _EXACT_DOMAIN:
        params = BloomParams.exact(domain)
    else:
        params = BloomParams.for_union(domain, int(sum(s.size for s in sets)), 1e-6)
    res = run_psu(params, {i: np.sort(s) for i, s in enumerate(sets)}, default_threshold(len(sets)), _rng=_rng)
    if sorted(res.transcript.survivors) != list(range(len(sets))):
        raise ProtocolError("the entity union is missing a silo")
    return res.union.astype(np.int64), dict(res.transcript.upload_bytes), dict(res.transcript.download_bytes)
