"""Function secret sharing: batched distributed point functions (hazmat layer).

Public API::

    keys0, keys1 = gen(alphas, betas, domain_size, ring_bits=32)
    eval_full(keys, party)            # (K, m, d)
    eval_points(keys, party, xs)      # (K, len(xs), d)
    keys.to_bytes(); DPFKeys.from_bytes(data)

Path sharing (SecEmb §4.3.2): :func:`gen_path` + :func:`convert_gen` on the user side,
:func:`eval_full_path` + :func:`convert_eval` on the server side.
"""

from secemb.fss.dpf import (
    DEFAULT_TAG,
    GenState,
    convert_eval,
    convert_gen,
    eval_full,
    eval_full_dot,
    eval_full_path,
    eval_points,
    gen,
    gen_path,
)
from secemb.fss.keys import DPFKeys, DPFParams, PathKeys
from secemb.fss.linalg import ring_matmul

__all__ = [
    "DEFAULT_TAG",
    "DPFKeys",
    "DPFParams",
    "GenState",
    "PathKeys",
    "convert_eval",
    "convert_gen",
    "eval_full",
    "eval_full_dot",
    "eval_full_path",
    "eval_points",
    "gen",
    "gen_path",
    "ring_matmul",
]
