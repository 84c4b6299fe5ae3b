"""SecEA's one-time private entity union (Sec. III-A) through the Bloom-filter PSU of
:mod:`secemb.secagg.psu` (SFSL's Algorithm 3 over Bonawitz secure aggregation), run as the
set-up's exchanges (:mod:`secemb.protocols.secea.staged`).

The paper cites Seo-Cheon-Katz (2012) for this step; the issue allows SFSL's Bloom PSU instead.
What it reveals: the union E (to the server and every client, as in the paper); the server sees
secure-aggregation messages only, and the per-entity counts are hidden by the uniform non-zero
words each client puts at its positions.  With the exact filter (one position per entity id,
``BloomParams.exact``, the default for domains up to 2^22) there are no false positives; with a
hashed filter a false positive only adds an entity no client holds, whose shares are zero and
which no client queries -- it costs bytes, never correctness.
"""

from __future__ import annotations

from secemb.errors import InvalidParameters
from secemb.secagg import BloomParams

__all__ = ["EXACT_DOMAIN", "union_bloom"]

#: domains up to this size use the exact filter (one position per id)
EXACT_DOMAIN = 1 << 22


def union_bloom(domain: int, expected: int) -> BloomParams:
    """The PSU's public Bloom parameters for entity ids in ``[0, domain)``: the exact filter up
    to :data:`EXACT_DOMAIN`, else a hashed one sized for ``expected`` ids in all (the sum of the
    silos' set sizes, or a public bound on it) at a 10^-6 false-positive rate.

    Raises
    ------
    InvalidParameters: ``domain`` or ``expected`` below 1.
    """
    if domain < 1 or expected < 1:
        raise InvalidParameters(f"domain and expected must be >= 1, got {domain} and {expected}")
    return BloomParams.exact(domain) if domain <= EXACT_DOMAIN else BloomParams.for_union(domain, expected, 1e-6)
