"""Session 32, helper U: the bound's bookkeeping at a server -- the proof contexts of a batch made
together (:func:`bounds.contexts`).  Expected values are the context's bytes as its docstring
defines them, written out here, not computed by the code under test."""

from __future__ import annotations

import struct

import pytest

from secemb.protocols.secemb.bounds import context, contexts


def test_contexts_are_each_devices_context_bytes():
    challenges = [bytes([i]) * 16 for i in range(3)]
    digests = [bytes([0x40 + i]) * 32 for i in range(3)]
    want = [b"secemb-bound-proof" + struct.pack("<Q", 7) + c + k for c, k in zip(challenges, digests, strict=True)]
    assert contexts(7, challenges, digests) == want
    assert [context(7, c, k) for c, k in zip(challenges, digests, strict=True)] == want
    assert contexts(7, [], []) == []
    with pytest.raises(ValueError):
        contexts(7, challenges, digests[:2])
