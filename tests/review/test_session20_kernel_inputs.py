"""Session 20 review (helper G): no input a device, a peer or a caller can send reaches a compiled
kernel unchecked.

numba's ``@njit`` kernels (:mod:`secemb.fss._numba_kernels`, ``_rangeproof_kernels``,
``_projection_kernels``, ``_shani``, ``_aesni``, :mod:`secemb.privacy.cdt`) index without bounds
checks: an index or a shape that does not fit reads or writes other memory -- a segmentation fault
at best (a server's whole deployment down, its in-memory state lost), silent garbage at worst.
Every attack here runs in a child interpreter (forked from the suite's warm template where it can be:
``_server_template.run_script``), so that a crash shows as a negative
return code instead of killing pytest, on the compiled kernels (and, where both apply, the numpy
reference too).

Wire boundaries (regressions: they pass, and would catch a parser that stopped checking):

* a retrieval request whose key header names another domain, count, payload width or ring than
  the round (every one of them sizes a kernel's walk): refused with ``InvalidMessage`` by the server,
  which then serves the same device's honest request with the right rows (no state changed); over
  HTTP (server 0's app, relay, the cuckoo layout) each such request is a 400 and the round, every
  device's honest request after its hostile ones, commits with every device;
* a device's item ids outside the round's catalogue, negative, or past ``2^62``: refused by
  :func:`secemb.protocols.placement.place` and :meth:`CuckooLayout.assign` with
  ``InvalidParameters`` before ``cuckoo_assign`` indexes its tables by them (helper D's 7414146);
* range-proof messages of the wrong length: refused by :func:`secemb.fss.rangeproof.parse`.

Found and fixed here (the hazmat layer's own arguments, not reachable from bytes: every parser
makes them consistent, but a caller's hand-built batch reached the kernels unchecked):

* G1: a :class:`~secemb.fss.keys.PathKeys` whose correction words have fewer levels than its domain's
  depth (or fewer keys than roots) was walked by ``expand_top`` / ``subtrees`` past the end of its
  correction words: ``eval_full_path`` returned leaves computed from whatever memory followed them
  (no error).  Now :func:`secemb.fss.tree.leaf_groups` refuses it with ``InvalidParameters``.
* G2: :func:`secemb.fss.dpf.eval_full` of keys with fewer output correction words than keys read
  ``convert_eval``'s ``cw[key]`` past the end.  Now refused with ``InvalidParameters``.
* G3: :func:`secemb.fss.rangeproof.verifier_messages` of shares whose witness or proof rows are
  fewer than their devices (``len(shares)``) read ``verifier_core``'s ``x[d]`` / ``proofs[d]`` past
  the end.  Now refused with ``InvalidParameters``.
* G4: :func:`secemb.fss.convert.convert_eval_into` of leaves whose key has no correction word, into an
  ``out`` smaller than its kept leaves, or at a negative position, and ``LeafCheck.add`` (since
  session 29 :meth:`SketchCheck.add <secemb.fss.sketch.SketchCheck.add>`, checked here the same way)
  of rows outside its keys' walk, and ``convert_accumulate`` from a
  negative position, WROTE past the end of ``out`` / the check values / the sums: before the fix
  the child died with glibc's "double free or corruption (out)" (SIGABRT, heap corruption), and
  ``convert_accumulate`` from position ``-2^40`` with a segmentation fault.  Now refused with
  ``InvalidParameters``.
* G5: Half-Tree keys (:mod:`secemb.fss.halftree`) and the GPU walk (:func:`secemb.fss.gpu.evaluate.expand`)
  as G1, and the GPU evaluation's output correction words as G2: one check,
  :func:`secemb.fss.tree.check_fields` (the GPU's checked here before any kernel, on the CPU).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from _server_template import run_script
from child_verdicts import REFUSED, assert_all_refused

from secemb.fss import kernels

pytestmark = pytest.mark.skipif(not kernels.available(), reason="the compiled kernels need numba and AES-NI")

#: what every child starts with: the backend named by argv[1], a helper that prints a refusal
PRELUDE = """
import sys
import numpy as np
from secemb.errors import InvalidKey, InvalidMessage, InvalidParameters
from secemb.fss import kernels
kernels.BACKEND = sys.argv[1]

""" + REFUSED


def _run(body: str, backend: str = "numba", timeout: float = 240) -> list[str]:
    """Run ``PRELUDE + body`` in a child interpreter on ``backend`` (forked from the suite's warm template
    where it can be: :func:`_server_template.run_script`); its output lines, after checking it exited
    normally (a segmentation fault is a negative return code)."""
    code = PRELUDE + textwrap.dedent(body)
    got = run_script(code, backend, timeout=timeout)
    assert got.returncode == 0, f"child exited with {got.returncode}:\n{got.stdout}\n{got.stderr[-3000:]}"
    return got.stdout.splitlines()


# -- a server's retrieval requests ---------------------------------------------------------------

REQUEST_HEADERS = """
from secemb.fss.keys import HEADER_BYTES as KEY_HEADER
from secemb.framing import HEADER_BYTES as FRAME
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol, SecEmbUser
from secemb.randomness import CtrDrbg

layout = sys.argv[2]
proto = SecEmbProtocol(layout=layout, relay=False, verify=True)
cfg = proto.round_config(3, num_items=300, width=2, dense_size=1, m_prime=5)
gen = np.random.default_rng(7)  # public test data
table = gen.integers(0, 1 << 20, (300, 2)).astype(cfg.dtype)
servers = (proto.make_server(0), proto.make_server(1))
for s in servers:
    s.begin_round(cfg, table)
slots = place(cfg, np.array([0, 17, 123, 299]), gen).indices
user = SecEmbUser(cfg, relay=False, verify=True, _rng=CtrDrbg(b"g"))
r0, r1 = user.retrieval_request(slots)
# the key batch's parameters: after the message's frame and the batch's own frame header
at = FRAME + FRAME  # ring_bits u8, domain_size u64, width u32, count u32
fields = {"ring": (at, 1), "domain": (at + 1, 8), "width": (at + 9, 4), "count": (at + 13, 4)}
domain = int.from_bytes(r0[at + 1 : at + 9], "little")
values = {"ring": [0, 64, 255], "domain": [1, domain - 1, domain + 1, 2 * domain, 1 << 40, (1 << 64) - 1],
          "width": [0, 2, 1 << 20, (1 << 32) - 1], "count": [0, cfg.slots - 1, cfg.slots + 1, (1 << 32) - 1]}
for name, vs in values.items():
    lo, size = fields[name]
    for v in vs:
        for party, msg in ((0, r0), (1, r1)):
            bad = msg[:lo] + v.to_bytes(size, "little") + msg[lo + size :]
            refused(f"{name}={v} to {party}", lambda: servers[party].handle_retrieval(5, bad), InvalidMessage)
refused("server 0's request at server 1", lambda: servers[1].handle_retrieval(5, r0), InvalidMessage)
refused("a truncated request", lambda: servers[0].handle_retrieval(5, r0[:-1]), InvalidMessage)
# the same device's honest request afterwards: served, the right rows
rows = user.retrieval_result(servers[0].handle_retrieval(5, r0), servers[1].handle_retrieval(5, r1))
real = slots >= 0
assert np.array_equal(rows[real], table[slots[real]]), "wrong rows after the refusals"
print("SERVED", int(np.isin([0, 17, 123, 299], slots).sum()) >= 3)
"""


@pytest.mark.parametrize("layout", ["full", "cuckoo"])
def test_request_with_another_key_header_is_refused_and_the_server_still_serves(layout: str) -> None:
    lines = _run(REQUEST_HEADERS.replace("sys.argv[2]", repr(layout)))
    assert_all_refused(lines, 2 * (3 + 6 + 4 + 4) + 2)
    assert "SERVED True" in lines


HTTP_REQUESTS = """
sys.path.insert(0, SERVER_TESTS)
from fastapi.testclient import TestClient
from deviation_helpers import FLOOR, RATINGS, USERS, WAIT_S, in_process
from secemb.client.device import Device, DeviceClient
from secemb.framing import HEADER_BYTES as FRAME
from secemb.server.app import create_app
from secemb.sim.local import LocalServerLink
from secemb.transport.signing import sign_headers, user_key

pair, servers = in_process()  # relay: server 0 parses every device's keys
leader, follower = servers.nodes
http = TestClient(create_app(leader), raise_server_exceptions=False)
at = FRAME + FRAME  # the key batch's ring_bits u8, domain_size u64, width u32, count u32
statuses = []

class Hostile(LocalServerLink):
    # server 0's link of a device that first posts its request over HTTP with another key header
    def retrieval(self, round_id, body):
        path = f"/v1/rounds/{round_id}/retrieval"
        domain = int.from_bytes(body[at + 1 : at + 9], "little")
        for lo, size, v in ((at, 1, 64), (at + 1, 8, 1 << 40), (at + 1, 8, domain + 1), (at + 9, 4, 1 << 20),
                            (at + 13, 4, (1 << 32) - 1), (at + 13, 4, 0)):
            bad = body[:lo] + v.to_bytes(size, "little") + body[lo + size :]
            headers = sign_headers(f"user:{self.user}", user_key(leader.cfg.user_secret, self.user), "POST", path, "",
                                   bad)
            statuses.append(http.post(path, content=bad, headers=headers | {
                "Content-Type": "application/octet-stream"}).status_code)
        return super().retrieval(round_id, body)

r = int(leader.open_round(participants=USERS, deadline_s=WAIT_S)["round_id"])
for u in USERS:
    links = (Hostile(leader, u, servers.tp), LocalServerLink(follower, u, servers.tp))
    client = DeviceClient.over(u, links, min_users=FLOOR)
    Device(client, *RATINGS.of(u)).participate(client.round_info())
print("STATUSES", sorted(set(statuses)), len(statuses))
doc = leader.close_round(r)
print("CLOSED", doc["state"], doc["included"] == sorted(USERS))
"""


def test_requests_with_another_key_header_over_http_are_4xx_and_the_round_commits() -> None:
    pytest.importorskip("fastapi")
    server_tests = str(Path(__file__).resolve().parents[1] / "server")
    lines = _run(HTTP_REQUESTS.replace("SERVER_TESTS", repr(server_tests)))
    statuses = next(ln for ln in lines if ln.startswith("STATUSES"))
    assert statuses == "STATUSES [400] 24", lines
    assert "CLOSED committed True" in lines


# -- a device's item ids (data files, CLI) -------------------------------------------------------

ITEM_IDS = """
from secemb.fss.cuckoo import CuckooLayout
from secemb.protocols.placement import place
from secemb.protocols.secemb import SecEmbProtocol

cfg = SecEmbProtocol(layout="cuckoo").round_config(1, num_items=60, width=2, dense_size=1, m_prime=8)
layout = CuckooLayout(60, 12)
gen = np.random.default_rng(3)
for items in ([0, 60], [1681], [-1, 4], [1 << 62], [5, 5, 6]):
    refused(f"place {items}", lambda: place(cfg, np.array(items), gen), InvalidParameters)
for items in ([60], [-1], [1 << 62], [np.iinfo(np.int64).min]):
    refused(f"assign {items}", lambda: layout.assign(np.array(items, np.int64), gen), InvalidParameters)
refused("assign uint64 2^64 - 1", lambda: layout.assign(np.array([2**64 - 1], np.uint64), gen), InvalidParameters)
slots, dropped = layout.assign(np.array([0, 59, 30]), gen)
print("PLACED", sorted(int(s) for s in slots if s >= 0) + sorted(int(d) for d in dropped))
"""


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_item_ids_outside_the_catalogue_are_refused_before_the_cuckoo_kernel(backend: str) -> None:
    lines = _run(ITEM_IDS, backend)
    assert_all_refused(lines, 5 + 4 + 1)
    assert "PLACED [0, 30, 59]" in lines


# -- range-proof messages ------------------------------------------------------------------------

PROOF_LENGTHS = """
from secemb.fss import rangeproof as R

params = R.RangeParams(rows=6, bits=8, ring_bits=32)
for party in (0, 1):
    size = params.message_bytes(party)
    for got in (0, size - 1, size + 1, 8):
        refused(f"party {party}: {got} bytes", lambda: R.parse(params, party, [bytes(size), bytes(got)]),
                InvalidMessage)
refused("an element not below p", lambda: R.parse(params, 0, [b"\\xff" * params.message_bytes(0)]), InvalidMessage)
"""


def test_range_proof_messages_of_another_length_are_refused() -> None:
    assert_all_refused(_run(PROOF_LENGTHS), 2 * 4 + 1)


# -- the hazmat layer's own arguments (G1-G3, fixed) ---------------------------------------------

PATH_SHAPES = """
from secemb import fss
from secemb.fss.keys import DPFKeys, DPFParams, PathKeys

k0, _ = fss.gen(np.array([5, 7]), np.array([[1], [2]], np.uint32), 1 << 12)
p = k0.path
deeper = PathKeys(DPFParams(1 << 16), 0, p.roots, p.cw_seed, p.cw_tl, p.cw_tr)  # 12 levels for a depth of 16
refused("correction words of 12 levels for depth 16", lambda: fss.eval_full_path(deeper, 0), InvalidParameters)
fewer = PathKeys(p.params, 0, p.roots, p.cw_seed[:1], p.cw_tl[:1], p.cw_tr[:1])
refused("one key's corrections for two roots", lambda: fss.eval_full_path(fewer, 0), InvalidParameters)
short_out = DPFKeys(p, k0.cw_out[:1], k0.params)
refused("one output correction word for two keys", lambda: fss.eval_full(short_out, 0), InvalidParameters)
print("LEAVES", fss.eval_full(k0, 0).shape)
"""


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_path_keys_whose_fields_do_not_fit_their_domain_are_refused(backend: str) -> None:
    lines = _run(PATH_SHAPES, backend)
    assert_all_refused(lines, 3)
    assert "LEAVES (2, 4096, 1)" in lines


GPU_PATH = """
import torch
from secemb import fss
from secemb.fss.gpu import evaluate as ev
from secemb.fss.keys import DPFParams, PathKeys

k0, _ = fss.gen(np.array([5, 7]), np.array([[1], [2]], np.uint32), 1 << 12)
p = k0.path
deeper = PathKeys(DPFParams(1 << 16), 0, p.roots, p.cw_seed, p.cw_tl, p.cw_tr)
refused("the GPU walk of 12 levels for depth 16", lambda: ev.expand(deeper, torch.device("cpu")), InvalidParameters)
"""


def test_the_gpu_walk_refuses_path_keys_that_do_not_fit_their_domain() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    assert_all_refused(_run(GPU_PATH), 1)


HAZMAT_ROWS = """
from secemb import fss
from secemb.fss import halftree
from secemb.fss.convert import convert_accumulate, convert_eval_into
from secemb.fss.sketch import SketchCheck, expand

words = np.zeros((8, 2), np.uint64)
cw = np.ones((2, 1), np.uint32)
out = np.zeros((8, 1), np.uint32)
refused("leaves of a third key, two correction words",
        lambda: convert_eval_into(words, cw, 12, 8, 0, "t", np.zeros((8, 1), np.uint32)), InvalidParameters)
refused("out of 4 rows for 8 leaves", lambda: convert_eval_into(words, cw, 0, 8, 0, "t", out[:4]), InvalidParameters)
refused("a negative position", lambda: convert_eval_into(words, cw, -8, 8, 0, "t", out), InvalidParameters)
refused("valid past the period", lambda: convert_eval_into(words, cw, 0, 8, 0, "t", out, valid=9), InvalidParameters)
convert_eval_into(words, cw, 8, 8, 0, "t", out)  # the second key's 8 leaves: fine
key_acc = np.zeros((2, 1), np.uint32)
live = np.ones(8, bool)
refused("sums from a position before the walk",
        lambda: convert_accumulate(words, "t", None, -1 << 40, live, key_acc=key_acc, period=8), InvalidParameters)
refused("words of one column", lambda: convert_accumulate(words[:, :1], "t", out, 0), InvalidParameters)
convert_accumulate(words, "t", None, 8, live, key_acc=key_acc, period=8)

check = SketchCheck(expand([bytes(16)], 16), 2)
leaves = np.zeros((2, 8, 2), np.uint64)  # rows of 8 leaves: 2 rows a key, 4 rows in all
refused("rows [3, 5) of 4", lambda: check.add(3, 5, leaves), InvalidParameters)
refused("rows [-1, 1)", lambda: check.add(-1, 1, leaves), InvalidParameters)
refused("3 rows of leaves for [0, 2)", lambda: check.add(0, 2, np.zeros((3, 8, 2), np.uint64)), InvalidParameters)
refused("rows wider than the domain", lambda: check.add(0, 2, np.zeros((2, 32, 2), np.uint64)), InvalidParameters)
check.add(2, 4, leaves)

k0, _ = halftree.gen(np.array([5, 7]), np.array([[1], [2]], np.uint32), 1 << 12)
p = k0.path
deeper = halftree.HalfTreeKeys(halftree.HalfTreePath(fss.DPFParams(1 << 16), 0, p.roots, p.cw), k0.cw_out,
                               fss.DPFParams(1 << 16, 1, 32))
refused("Half-Tree corrections of 12 levels for depth 16", lambda: halftree.eval_full(deeper, 0), InvalidParameters)
print("HALFTREE", halftree.eval_full(k0, 0).shape)
"""


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_conversion_check_and_half_tree_arguments_that_do_not_fit_are_refused(backend: str) -> None:
    lines = _run(HAZMAT_ROWS, backend)
    assert_all_refused(lines, 11)
    assert "HALFTREE (2, 4096, 1)" in lines


PROOF_ROWS = """
from secemb.fss import rangeproof as R

params = R.RangeParams(rows=6, bits=8, ring_bits=32)
zero = np.zeros(6, np.uint64)
msgs = [R.prove(params, zero, zero, b"ctx") for _ in range(3)]
shares = R.parse(params, 0, [m[0] for m in msgs])
ring = np.zeros((3, params.rows), np.uint64)
seed = bytes(16)
for name, cut in (("inputs", R.ProofShares(0, shares.keys, shares.hints, shares.inputs[:1], shares.proofs)),
                  ("proofs", R.ProofShares(0, shares.keys, shares.hints, shares.inputs, shares.proofs[:1])),
                  ("hints", R.ProofShares(0, shares.keys, shares.hints[:1], shares.inputs, shares.proofs))):
    refused(f"{name} of one device for three", lambda: R.verifier_messages(params, 0, cut, ring, [b"ctx"] * 3, seed),
            InvalidParameters)
print("MESSAGES", R.verifier_messages(params, 0, shares, ring, [b"ctx"] * 3, seed).shape[0])
"""


def test_proof_shares_with_fewer_rows_than_devices_are_refused() -> None:
    lines = _run(PROOF_ROWS)
    assert_all_refused(lines, 3)
    assert "MESSAGES 3" in lines
