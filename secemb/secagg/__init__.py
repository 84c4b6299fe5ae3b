"""One-server secure aggregation with dropout recovery (Bonawitz et al., CCS 2017: semi-honest,
and with ``SecAggConfig(signed=True)`` the active-server variant: certified identities
(:mod:`~secemb.secagg.identity`), signed keys, a consistency round, authenticated common rows)
and the Bloom-filter private set union of secure federated submodel learning (Algorithm 3).

Knows nothing of models or transport: parties are objects that exchange bytes
(``docs/secagg.md``).  The hazmat layer is :mod:`~secemb.secagg.shamir` (t-of-n over
GF(2^256 + 297)), :mod:`~secemb.secagg.keys` (X25519, HKDF-SHA256, AES-GCM) and
:mod:`~secemb.secagg.prg` (AES-CTR masks with random row access).
"""

from secemb.secagg.client import SecAggClient
from secemb.secagg.config import SecAggAborted, SecAggConfig, default_threshold
from secemb.secagg.keys import KeyPair, agree
from secemb.secagg.local import STAGES, Transcript, run_round
from secemb.secagg.prg import mask_rows
from secemb.secagg.psu import BloomParams, PsuResult, psu_input, psu_union, read_union, run_psu, union_message
from secemb.secagg.server import SecAggServer

__all__ = [
    "SecAggClient",
    "SecAggServer",
    "SecAggConfig",
    "SecAggAborted",
    "default_threshold",
    "KeyPair",
    "agree",
    "mask_rows",
    "STAGES",
    "Transcript",
    "run_round",
    "BloomParams",
    "psu_input",
    "psu_union",
    "union_message",
    "read_union",
    "PsuResult",
    "run_psu",
]
