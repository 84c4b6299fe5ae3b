"""Session 41 red team (helper R): the one-server deployment (``secemb serve`` of SFSL and SecEA:
:mod:`secemb.server.exchange_app`, the nodes it serves) against a malicious device, and the device SDK
(:mod:`secemb.client`, :mod:`secemb.transport`) against a deviating server.  Each test asserts the safe
behaviour; a strict xfail was a finding.

Findings (all six fixed by the lead in session 41; their tests were strict xfails at 13cd7ad and are plain
tests since: S41-R1 ``public_key_from_bytes`` refuses a modulus by its length -- the deployment's
``ceil(key_bits / 8)`` bytes, at most ``MAX_KEY_BITS`` -- before it is read; S41-R2 round documents read
to ``ROUND_DOCUMENT_BYTES`` (1 MiB); S41-R3 ``infer_remote`` refuses a model without GREC inference before
sizing it; S41-R4 ``RoundInfo.from_doc`` refuses more than ``MAX_ITEMS`` items or ``MAX_EXPANSION``
buckets a row; S41-R5 ``SFSLServer.reply`` takes the round's union and refuses goods outside it; S41-R6
``SecEAServer.read_answer`` refuses a ciphertext outside ``(0, n^2)`` at receipt)
--------
* **S41-R1 (low-medium: availability; any enrolled SecEA silo, during a set-up's ``secea-keys``).**
  :meth:`SecEANode.receive <secemb.protocols.secea.staged.SecEANode.receive>` checks a HELLO's Paillier
  modulus against the deployment's size (``key_bits``) only after
  :meth:`SecEAServer.read_hello <secemb.protocols.secea.parties.SecEAServer.read_hello>` has built the key
  from it (``phe``'s ``PaillierPublicKey``: ``n * n``, Karatsuba in CPython, ``O(len^1.585)``).  The
  modulus is the rest of the body (no length field), so it may be as long as the body limit:
  ``secea_items=0`` (documented: every item) over a 1,682-item catalogue (ML-100K's; the synthetic
  dataset) gives a 22.8 MB limit, ``secea_items=500`` 2 MB, the default (20) 42 kB.  Measured in process
  (``SecEANode(key_bits=1024)``, 2-core VM shared with other helpers, load average 3.2): a 1 MiB HELLO
  refused in 1.9 s, 2 MiB 5.6 s (a genuine one: ~3 ms); ``PaillierPublicKey`` alone at 4 MiB 17.8 s (load
  2.7-3.7), so ~4 minutes at 22.8 MB by Karatsuba's 3x a doubling (an extrapolation).  All of it under
  the app's one lock: every silo's poll and the operator's status wait, and the refused silo may send it
  again at its rate limit.  (A silo can abort a set-up anyway -- it needs every silo -- so what this adds
  is the server's lock held for seconds to minutes per request.)  A silo's own HELLO never has more than
  ``key_bits / 8`` bytes of modulus.
  ``test_a_hello_whose_modulus_is_not_the_deployments_size_builds_no_key``.
* **S41-R2 (low-medium: a device's memory; a deviating server).**  A device reads every round
  document (``HttpStageLink.round_info``, polled every 0.1-0.2 s by ``take_part`` and ``secemb client``;
  ``DeviceClient.round_info`` likewise) up to :data:`~secemb.transport.limits.ANSWER_FLOOR_BYTES`
  (64 MiB) and decodes it whole; JSON decoding multiplies the bytes: measured with ``tracemalloc``, 8 MiB
  of ``[{},{},...]`` peaks at 212 MB (25x), of ``[[],...]`` 189 MB, of ``[0,...]`` 43 MB -- so a 64 MiB
  document costs ~1.7 GB of a phone's memory per poll.  An honest document of a deployment of ``U``
  devices a round is ~0.4 kB + ~8 B a device (0.4 kB here: SFSL, taobao-mini, 3 devices).  The same
  floor bounds the read's time: a server dripping a document at the paced minimum
  (:data:`~secemb.transport.paced.MIN_ANSWER_RATE`, 32 KiB/s) holds the device ~34 min in one poll,
  past any ``--wait`` (documented in ``paced.py``; a document limit near an honest document's size
  bounds both).
  ``test_a_round_document_far_longer_than_an_honest_one_is_refused_undecoded``.
* **S41-R3 (low: an undocumented error, a traceback from ``secemb infer``; a deviating server 0).**
  :func:`~secemb.client.inference.infer_remote` sizes ``np.zeros(model.dense_size)`` of the model the
  server's description announces before it checks that the model has GREC inference
  (:func:`~secemb.inference.representation.representation_for`).  A DIN whose private size is the
  device's (``dim``) with 10^12 categories: ``MemoryError`` (``secemb infer`` catches RemoteError,
  Unreachable and InvalidMessage only); with fewer, gigabytes are allocated (lazily) for nothing.
  ``test_an_inference_description_of_a_model_without_grec_inference_is_refused_before_its_dense_is_sized``.
* **S41-R4 (low: an undocumented error; two servers announcing the same sizes, the model of
  ``tests/client/test_round_document_mutations.py``).**  A two-server round document's
  ``config.num_items`` and ``config.num_buckets`` are bounded by nothing but ``RoundConfig``'s
  consistency checks: :meth:`RoundSession.prepare <secemb.client.device.RoundSession.prepare>` then
  builds the cuckoo layout (48 B an item) or a bucket array (8 B a bucket) of the announced size --
  ``MemoryError`` at 2^50 (below it, gigabytes; 2^30 buckets over 40 items: 8 GiB), where the
  inference description refuses more than ``MAX_ITEMS`` = 2^26 items and an honest ``num_buckets``
  is ``ceil(expansion * m')``.
  ``test_a_round_document_announcing_a_layout_beyond_any_deployment_is_refused_cleanly``.
* **S41-R5 (low: the server's memory; any device of an SFSL round).**  :meth:`SFSLNode.receive
  <secemb.protocols.sfsl.staged.SFSLNode.receive>` answers a ``download`` request for any goods below the
  catalogue's size, though an honest request (Algorithm 2's S'') is a subset of the round's PSU union, and
  keeps the reply until the next stage closes.  A request for every goods is answered with the whole
  table: on Taobao (143,534 goods, 4,815 categories, d = 18; ``reply_bytes``) a 574 kB request is kept
  as a 10.9 MB reply (19x; an honest one is ~0.2 MB, the dense layers), per device of the round.
  ``test_an_sfsl_download_request_outside_the_rounds_union_is_refused``.
* **S41-R6 (low-medium: availability; any silo of a SecEA round).**
  :meth:`SecEAServer.read_answer <secemb.protocols.secea.parties.SecEAServer.read_answer>` (the node's
  check at receipt) reads an ANSWER's ciphertexts without checking them against the requester's key;
  the server's mask at the close does (``0 < c < n^2``) and raises InvalidMessage, which aborts the
  round for every silo: "round 1 aborted at secea-answer: a ciphertext is out of range for the
  recipient's key" -- naming no silo, striking none.  With more silos than the ``2(K+T-1)+1`` answers
  needed, a silo that sends nothing is a dropout and the round commits; one that sends a ciphertext 0
  aborts every round it is in, unattributed.  (SecEA's threat model is honest-but-curious silos; the
  deployment's node refuses every other malformed message at receipt, and this check is as cheap.)
  ``test_a_secea_answer_with_a_ciphertext_out_of_range_is_refused_at_receipt_and_the_round_commits``.

Held (plain tests)
------------------
* A HELLO with a modulus of another size is refused (InvalidMessage) and nothing is kept: the genuine
  HELLO is taken after it -- with the deployment's roster pin and without it (the size check then the
  only one in the way).
* Over the app (``secemb serve``'s, in process): at every SFSL stage each of three devices sends its
  message four times at once, the server closing the stages itself -- one copy a device taken (204), the
  others 400/409, never a 5xx, each stage closed once all had sent, the round committed with all three.
* An honest round document is read whole, and one past the answer limit is refused undecoded.
* A small description of a model without GREC inference is refused with a documented error.
* Every server answer of an SFSL round and of a SecEA set-up and round, mutated -- cut to its header,
  cut by a byte, eight bytes appended, and each u16 and u32 field of its body's first 16 and last 8
  bytes set to 0, 1, 2^16 - 1, 2^32 - 1 (not in SFSL's submodel: values only, any of which is a model
  the server may announce) -- is taken or refused with a :class:`~secemb.errors.SecembError` by the
  device's party when it reads it (its ``accept`` and the next stage's ``message``), never another
  exception.  (A well-formed change -- another union, another model row -- is a deviating server's
  choice the device cannot check; in the signed stages it is refused.)

Tried and dropped (no finding): SecEA's ANSWER and UPLOAD parsers (every count checked against the round
before a loop or an allocation); a DIRECTORY modulus at the silo (a u16 length: 64 KiB at most, ~20 ms);
SecAgg's message parsers (counts checked against the remaining bytes, framing lengths first); SecAgg's
robust opening with one device's unmask shares all corrupted (signed, 40 devices: 3 ms, as honest); a
SecEA RELAY claiming ``M`` queries from every peer (the silo encrypts up to ``M`` answers a peer: the
documented honest bound, since a peer's query count is not public); a two-server round's sizes from one
deviating server (``DeviceClient.round_info`` compares both servers' announcements before it builds
anything).

Mutations (a scratch copy of the package, one at a time, restored; which tests failed)
--------------------------------------------------------------------------------------
* M1 ``SecEANode.receive`` without its key-size check: the two "no pin" cases of
  ``test_a_hello_of_another_modulus_size_is_refused_and_the_genuine_one_taken_after`` (the 127-byte
  modulus stays refused: ``public_key_from_bytes``' 1,024-bit floor).
* M2 ``Reader.increasing`` without its ``< limit`` check (a union id past the goods): the SFSL fuzz
  (``IndexError`` in ``categories_of``; with mutations of the body's first 16 bytes only, no test failed:
  the tail mutations were added for it).
* M3 ``ApiClient._capped`` reading twice its limit: ``test_a_round_document_past_the_answer_limit_is_refused_undecoded``
  (disabling one of its two checks alone is equivalent: the other holds).
* M4 ``representation_for`` taking any model: the small-DIN test (``AttributeError``).
* M5 ``SecEAClient.answer`` without ``n >= num_clients``: the SecEA fuzz (``KeyError``).
* M6 ``SecAggServer._sender`` without its duplicate check, M7 ``StageCloser.receive`` without its
  close once every device sent: the concurrent-copies test.
* The six findings' fixes sketched in the scratch copy (the HELLO's length checked before
  ``read_hello``, a 1 MiB round-document limit, a model check before the dense vector, a bound on
  ``num_items`` / ``num_buckets`` in ``RoundInfo.from_doc``, the download request checked against the
  union, the ANSWER's ciphertexts checked in ``read_answer``): each strict xfail XPASSed, every held
  test still passed.
Network: none (the exchange app in process behind Starlette's test client, the device's HTTP client
over ``httpx.MockTransport``).
"""

from __future__ import annotations

import copy
import json
import os
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from secemb.client.device import DeviceClient, RoundSession
from secemb.client.inference import infer_remote
from secemb.errors import InvalidMessage, InvalidParameters, SecembError
from secemb.framing import HEADER_BYTES
from secemb.inference.mechanism import GaussianLDP
from secemb.models import get_model
from secemb.protocols import get_protocol
from secemb.protocols.secea import paillier as secea_paillier
from secemb.protocols.secea import wire as secea_wire
from secemb.protocols.secea.coding import SecEAParams
from secemb.protocols.secea.parties import SIGNED_BYTES, SecEAClient
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEANode, SecEAParty, SecEASetupParty
from secemb.protocols.secea.union import union_bloom
from secemb.protocols.sfsl import wire as sfsl_wire
from secemb.protocols.sfsl.protocol import SFSLProtocol
from secemb.protocols.sfsl.staged import SFSL_PLAN, SFSLNode
from secemb.protocols.stages import RoundPlan
from secemb.secagg.identity import Roster
from secemb.secagg.keys import KEY_BYTES
from secemb.secagg.psu import read_union
from secemb.sim.local import InProcessServers, LocalServerLink
from secemb.transport import network
from secemb.transport.http import HttpStageLink
from secemb.transport.limits import ANSWER_FLOOR_BYTES
from secemb.transport.network import ApiClient

sys.path[:0] = [str(Path(__file__).parents[1] / "server")]  # the exchange app's signed test client
from test_exchange_attacks import http_of  # type: ignore[import-not-found]  # noqa: E402

KEY_BITS = 1024  # the smallest Paillier modulus a deployment takes
SETS = [[1, 4, 9], [4, 7], [1, 7, 9, 12]]
SILOS = [0, 1, 2]


# ------------------------------------------------------------------ S41-R1: a HELLO's modulus

def _node(pinned: Roster | None) -> SecEANode:
    node = SecEANode(SecEAParams(3, 1, dim=2), union_bloom(16, 9), key_bits=KEY_BITS,
                     pin=None if pinned is None else pinned.pin)
    node.open_round(0, SILOS)
    return node


def _with_modulus(hello: bytes, modulus_bytes: int) -> bytes:
    """Silo 0's signed ``hello`` with its Paillier modulus replaced by an odd one of ``modulus_bytes``
    bytes (its X25519 key, certificate and signature kept)."""
    header, payload = secea_wire.unpack(hello, secea_wire.HELLO)
    n = int.from_bytes(os.urandom(modulus_bytes), "big") | 1 | (1 << (8 * modulus_bytes - 1))
    return secea_wire.pack(header, payload[:KEY_BYTES + SIGNED_BYTES] + n.to_bytes(modulus_bytes, "big"))


@pytest.fixture(scope="module")
def hello() -> tuple[Roster, bytes]:
    """A roster and silo 0's genuine signed HELLO of set-up 0 under it."""
    roster = Roster.generate()
    silo = SecEAClient(0, SecEAParams(3, 1, dim=2), np.array(SETS[0]), key_bits=KEY_BITS, identity=roster.enroll(0))
    return roster, silo.hello(0)


@pytest.mark.parametrize("pinned", [True, False], ids=["roster pinned", "no pin"])
@pytest.mark.parametrize("modulus_bytes", [KEY_BITS // 8 - 1, KEY_BITS // 8 + 1, 4 * KEY_BITS // 8])
def test_a_hello_of_another_modulus_size_is_refused_and_the_genuine_one_taken_after(
        hello: tuple[Roster, bytes], pinned: bool, modulus_bytes: int) -> None:
    roster, genuine = hello
    node = _node(roster if pinned else None)
    with pytest.raises(InvalidMessage):
        node.receive(0, "secea-keys", 0, _with_modulus(genuine, modulus_bytes))
    node.receive(0, "secea-keys", 0, genuine)  # nothing kept of the refused one: not a duplicate


def test_a_hello_whose_modulus_is_not_the_deployments_size_builds_no_key(
        hello: tuple[Roster, bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """The cost of refusing a HELLO must not grow with its modulus: a modulus of another size than
    the deployment's is refused before any key is built of it (``n * n`` of a 22 MB modulus --
    ``secea_items=0`` on ML-100K -- is minutes of the server's one lock).  Spied at the key's
    constructor: every key built has the deployment's size."""
    roster, genuine = hello
    built: list[int] = []
    real = secea_paillier.paillier.PaillierPublicKey

    class Spy(real):  # type: ignore[misc, valid-type]
        def __init__(self, n: int) -> None:
            built.append(n.bit_length())
            super().__init__(n)

    monkeypatch.setattr(secea_paillier.paillier, "PaillierPublicKey", Spy)
    node = _node(roster)
    with pytest.raises(InvalidMessage):
        node.receive(0, "secea-keys", 0, _with_modulus(genuine, 4 * KEY_BITS // 8))
    assert all(bits == KEY_BITS for bits in built), f"keys built of moduli of {built} bits"


# ------------------------------------------------------------------ S41-R2: the round document's size

def _document(users: list[int]) -> dict[str, Any]:
    """A current round document as an SFSL server of 3 devices a round serves it."""
    return {"round_id": 3, "users": users, "threshold": 2, "stages": list(SFSL_PLAN.stages),
            "settings": {"lr": 1.0, "batch": 8, "epochs": 1, "bound": 1.0, "levels": 32768, "max_weight": 1310,
                         "min_row_holders": 2}, "stage": "psu-advertise", "state": "open"}


def _link(body: bytes, decoded: list[int], monkeypatch: pytest.MonkeyPatch) -> HttpStageLink:
    """Device 0's stage link to a server answering every request with ``body`` (JSON), over
    ``httpx.MockTransport`` (no socket); ``decoded`` gets the length of each answer the client
    hands the JSON decoder."""
    real = network.answer_document

    def spy(raw: bytes) -> Any:
        decoded.append(len(raw))
        return real(raw)

    monkeypatch.setattr(network, "answer_document", spy)
    http = httpx.Client(transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=body, headers={"content-type": "application/json"})))
    return HttpStageLink(0, ApiClient("https://deviating.invalid", "user:0", os.urandom(32), http=http))


def test_an_honest_round_document_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[int] = []
    doc = _document([0, 1, 2])
    assert _link(json.dumps(doc).encode(), decoded, monkeypatch).round_info() == doc
    assert len(decoded) == 1


def test_a_round_document_past_the_answer_limit_is_refused_undecoded(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[int] = []
    link = _link(b" " * (ANSWER_FLOOR_BYTES + 1), decoded, monkeypatch)
    with pytest.raises(InvalidMessage, match="longer than"):
        link.round_info()
    assert decoded == []


def test_a_round_document_far_longer_than_an_honest_one_is_refused_undecoded(monkeypatch: pytest.MonkeyPatch) -> None:
    """8 MiB of round document (its ``users`` a list of 4 million zeros; an honest one here is
    0.4 kB, and one of 100,000 devices a round ~0.8 MB) is refused before the JSON decoder sees it:
    JSON decoding costs ~5-25x the bytes (the module docstring's S41-R2)."""
    decoded: list[int] = []
    body = json.dumps(_document([0] * (4 << 20))).encode()
    assert len(body) > 8 << 20
    with pytest.raises(InvalidMessage):
        _link(body, decoded, monkeypatch).round_info()
    assert decoded == [], f"decoded answers of {decoded} bytes"


# ------------------------------------------------------------------ S41-R3: the inference description's model

class _Describing:
    """A server 0 whose inference description announces ``model`` (an MF device of private size 16
    reads it); no request is expected."""

    def __init__(self, model: dict[str, Any]) -> None:
        self.model = model

    def inference_info(self) -> dict[str, Any]:
        return {"model": self.model, "rows": 1, "dim": 16, "num_items": 100, "candidates": None,
                "num_candidates": 100}

    def inference(self, body: bytes) -> tuple[bytes, int]:
        raise AssertionError("the device sent a request for a model it cannot score")


def _infer(model: dict[str, Any]) -> None:
    infer_remote(_Describing(model), np.zeros(16), GaussianLDP(1.0, 1e-5, 1.0), None)


def test_a_small_description_of_a_model_without_grec_inference_is_refused_with_a_documented_error() -> None:
    with pytest.raises((InvalidMessage, InvalidParameters), match="din"):
        _infer({"name": "din", "hparams": {"dim": 16, "num_categories": 1}})


def test_an_inference_description_of_a_model_without_grec_inference_is_refused_before_its_dense_is_sized() -> None:
    """DIN's private size is its ``dim`` (16: the device's), its dense size grows with the announced
    categories: 10^12 of them are 1.6 * 10^13 dense values (128 TB), beyond any host -- a
    documented error, not ``MemoryError``."""
    with pytest.raises((InvalidMessage, InvalidParameters)):
        _infer({"name": "din", "hparams": {"dim": 16, "num_categories": 10**12}})


# ------------------------------------------------------------------ S41-R4: a two-server round's layout sizes

@pytest.mark.parametrize("field,value", [("num_items", 2**50), ("num_buckets", 2**50)])
def test_a_round_document_announcing_a_layout_beyond_any_deployment_is_refused_cleanly(field: str, value: int) -> None:
    """Both servers announce a cuckoo round of 2^50 items (the layout: 48 B an item) or 2^50
    buckets over 40 items (8 B a bucket): what ``Device.participate`` builds before its first
    request refuses it with a :class:`~secemb.errors.SecembError` (as the inference description
    refuses more than ``MAX_ITEMS`` items), never ``MemoryError``."""
    settings = {"num_items": 40, "num_users": 30, "model": "mf", "model_hparams": {"dim": 4}, "m_prime": 4,
                "protocol": "secemb", "layout": "cuckoo", "relay": True, "min_users": 2,
                "protocol_options": {"bound": False}}
    servers = InProcessServers(settings, get_protocol("secemb", layout="cuckoo", relay=True), get_model("mf", dim=4))
    servers.nodes[0].open_round(participants=[1, 2])
    doc = copy.deepcopy(servers.nodes[0].round_info(1))
    doc["config"][field] = value

    class Announcing(LocalServerLink):
        def round_info(self) -> dict[str, Any]:
            return copy.deepcopy(doc)

    client = DeviceClient.over(1, (Announcing(servers.nodes[0], 1, servers.tp),
                                   Announcing(servers.nodes[1], 1, servers.tp)), min_users=2)
    with pytest.raises(SecembError):
        info = client.round_info()
        model = info.make_model()
        info.check_model(model)
        session = RoundSession(client, info, protocol=info.make_protocol(), task=model.task, clip=info.clip())
        session.prepare(np.array([1, 2, 3]), np.array([4.0, 3.0, 5.0], dtype=np.float32))


# ------------------------------------------------------------------ S41-R5: SFSL's download request

def _sfsl_node(sfsl: SFSLProtocol) -> SFSLNode:
    """A fresh node of ``sfsl``'s deployment (tests/review/conftest.py's: taobao-mini, 3 devices a
    round), pinning the run's roster."""
    node = sfsl.make_server().node
    assert isinstance(node, SFSLNode)
    node.pin = sfsl.roster.pin
    return node


def _sfsl_round(sfsl: SFSLProtocol) -> tuple[SFSLNode, dict[int, Party]]:
    """A node (:func:`_sfsl_node`) with round 1 of :data:`SILOS` open, and their parties."""
    node = _sfsl_node(sfsl)
    doc = node.open_round(1, SILOS)
    return node, {u: sfsl.make_device(u).party(doc) for u in SILOS}


def test_an_sfsl_download_request_outside_the_rounds_union_is_refused(sfsl: SFSLProtocol) -> None:
    """An honest request S'' is a subset of the PSU's union (Algorithm 2); device 0 asking for every
    goods is refused (InvalidMessage) and nothing kept -- its genuine request is taken after."""
    node, parties = _sfsl_round(sfsl)
    stages = list(SFSL_PLAN.stages)
    for stage in stages[:stages.index("download")]:
        for u, party in parties.items():
            node.receive(1, stage, u, party.message(stage))
        node.close(1, stage)
        for u, party in parties.items():
            party.accept(stage, node.reply(1, stage, u))
    goods = node.server.space.goods
    union = read_union(node.reply(1, "psu-unmask", 0), 2, goods)
    assert union.size < goods
    every = sfsl_wire.request(1, np.arange(goods))
    assert len(sfsl_wire.reply(1, np.zeros((goods, node.server.space.dim)), np.zeros((0, 0)), np.zeros(0))) > \
        16 * len(every)  # what the node would keep for it: the table's rows alone
    with pytest.raises(InvalidMessage):
        node.receive(1, "download", 0, every)
    node.receive(1, "download", 0, parties[0].message("download"))


# ------------------------------------------------------------------ S41-R6: a SecEA ANSWER's ciphertexts

def _zero_first_ciphertext(answer: bytes) -> bytes:
    """A silo's ANSWER with its first ciphertext (of its block for the first requester) made 0, out
    of every key's range: body ``u16 requesters``, then a block ``u16 requester, u32 queries, u16
    chunks`` and its ciphertexts, each ``2 * KEY_BITS / 8`` bytes (the key's ``n^2``)."""
    header, body = secea_wire.unpack(answer, secea_wire.ANSWER)
    first = 2 + 2 + 4 + 2
    return secea_wire.pack(header, body[:first] + bytes(KEY_BITS // 4) + body[first + KEY_BITS // 4:])


def test_a_secea_answer_with_a_ciphertext_out_of_range_is_refused_at_receipt_and_the_round_commits() -> None:
    """Four silos, three answers needed (``2(K+T-1)+1``): silo 3 answers with a ciphertext 0 (the
    server's mask refuses it: out of the key's range).  The node can see that at receipt, so it
    refuses it there (InvalidMessage, nothing kept), and the round commits with the three others, as
    when silo 3 sends nothing -- rather than keeping it and aborting every silo's round at the close."""
    roster, sets = Roster.generate(), [*SETS, [4, 9]]
    params, bloom = SecEAParams(4, 1, dim=2), union_bloom(16, sum(map(len, sets)))
    assert params.needed_answers == 3
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i))
               for i, s in enumerate(sets)]
    node = SecEANode(params, bloom, key_bits=KEY_BITS, pin=roster.pin)
    silos = list(range(4))
    node.open_round(0, silos)
    _play(node, SECEA_SETUP_PLAN, 0, {i: SecEASetupParty(c, bloom, 0) for i, c in enumerate(clients)})
    node.open_round(1, silos)
    parties = {i: SecEAParty(c, 1, np.ones((len(sets[i]), 2))) for i, c in enumerate(clients)}
    for u, party in parties.items():
        node.receive(1, "secea-share", u, party.message("secea-share"))
    node.close(1, "secea-share")
    for u, party in parties.items():
        party.accept("secea-share", node.reply(1, "secea-share", u))
    answers = {u: party.message("secea-answer") for u, party in parties.items()}
    with pytest.raises(InvalidMessage):
        node.receive(1, "secea-answer", 3, _zero_first_ciphertext(answers[3]))
    for u in (0, 1, 2):
        node.receive(1, "secea-answer", u, answers[u])
    node.close(1, "secea-answer")
    assert node.outcome(1)["state"] == "committed" and node.outcome(1)["answered"] == [0, 1, 2]


# ------------------------------------------------------------------ held: concurrent duplicates over HTTP

def _copies_at_once(http: Any, stage: str, bodies: dict[int, bytes], copies: int) -> list[tuple[int, int]]:
    """Each device's body of round 1's ``stage`` sent ``copies`` times at once (a thread a copy);
    ``(device, status)`` of each."""
    sent: list[tuple[int, int]] = []

    def send(u: int) -> None:
        sent.append((u, http.send(u, 1, stage, bodies[u])))

    threads = [threading.Thread(target=send, args=(u,)) for u in bodies for _ in range(copies)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return sent


def test_concurrent_copies_of_each_message_under_a_stage_deadline_take_one_and_the_round_commits(
        sfsl: SFSLProtocol) -> None:
    """Over the app (in process, signed requests): at every stage each device sends its message four
    times at once from four threads, the server closing each stage itself once every device has
    sent (``stage_deadline_s``).  Exactly one copy a device is taken (204), the others refused with
    a 4xx (400 duplicate; 409 once the stage closed), never a 5xx; the round commits with every device."""
    http = http_of(_sfsl_node(sfsl), num_users=8, stage_deadline_s=60.0)
    doc = http.open(1, SILOS)
    parties = {u: sfsl.make_device(u).party(doc) for u in SILOS}
    for stage in SFSL_PLAN.stages:
        sent = _copies_at_once(http, stage, {u: party.message(stage) for u, party in parties.items()}, 4)
        assert len(sent) == 12 and sorted(u for u, status in sent if status == 204) == SILOS, (stage, sent)
        assert all(status in (204, 400, 409) for _, status in sent), (stage, sent)
        now = http.call(0, "GET", "/v1/exchange/round").json()
        assert now["stage"] != stage, (stage, now)  # closed by the server once all three had sent
        if SFSL_PLAN.replies(stage):
            for u, party in parties.items():
                party.accept(stage, http.fetch(u, 1, stage))
    assert http.outcome(1)["state"] == "committed" and http.outcome(1)["survivors"] == SILOS


# ------------------------------------------------------------------ held: a device reading mutated answers

def _mutations(msg: bytes, fields: bool) -> Iterator[tuple[str, bytes]]:
    """``msg`` cut and lengthened and (``fields``) with each u16 and u32 field of its body's first 16
    and last 8 bytes set to extremes."""
    yield "cut to its header", msg[:HEADER_BYTES]
    yield "cut by a byte", msg[:-1]
    yield "eight bytes appended", msg + bytes(8)
    if not fields:
        return
    head = range(HEADER_BYTES, min(len(msg), HEADER_BYTES + 16))
    for off in sorted({*head, *range(max(HEADER_BYTES, len(msg) - 8), len(msg))}):
        for fmt, values in (("<H", (0, 1, 0xFFFF)), ("<I", (0, 1, 0xFFFF, 0xFFFFFFFF))):
            if off + struct.calcsize(fmt) <= len(msg):
                for v in values:
                    out = bytearray(msg)
                    struct.pack_into(fmt, out, off, v)
                    yield f"{fmt}@{off - HEADER_BYTES}={v:#x}", bytes(out)


Party = Any


def _play(node: Any, plan: RoundPlan, round_id: int, parties: dict[int, Party]) -> dict[str, tuple[Party, bytes]]:
    """Round ``round_id`` of ``parties`` at ``node``, each stage closed by the test; per stage with
    an answer, a copy of party 0 just before it read it, and its genuine answer."""
    kept: dict[str, tuple[Party, bytes]] = {}
    for stage in plan.stages:
        for u, party in parties.items():
            node.receive(round_id, stage, u, party.message(stage))
        node.close(round_id, stage)
        if plan.replies(stage):
            answer = node.reply(round_id, stage, 0)
            assert answer is not None
            kept[stage] = (copy.deepcopy(parties[0]), answer)
            for u, party in parties.items():
                party.accept(stage, node.reply(round_id, stage, u))
    assert node.outcome(round_id)["state"] == "committed"
    return kept


def _escaped(kept: dict[str, tuple[Party, bytes]], after: Callable[[str], str | None],
             values: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """For each stage's answer mutated: the mutations whose reading (the party's ``accept``, then its
    message of the stage ``after`` it, if any) raised something else than a SecembError.  The answers
    of the stages ``values`` are values only (SFSL's submodel: any float is a model the server may
    announce, and the device trains on it): cut and lengthened only."""
    out = []
    for stage, (before, genuine) in kept.items():
        for name, body in _mutations(genuine, stage not in values):
            party = copy.deepcopy(before)
            try:
                party.accept(stage, body)
                if (nxt := after(stage)) is not None:
                    party.message(nxt)
            except SecembError:
                pass
            except Exception as exc:  # noqa: BLE001 -- what the test looks for
                out.append((stage, name, repr(exc)[:160]))
    return out


def _next_of(plan: RoundPlan) -> Callable[[str], str | None]:
    stages = list(plan.stages)
    return lambda s: stages[stages.index(s) + 1] if stages.index(s) + 1 < len(stages) else None


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a mutated float32 may be a NaN (refused)
def test_an_sfsl_device_reads_every_mutated_answer_without_an_undocumented_error(sfsl: SFSLProtocol) -> None:
    node, parties = _sfsl_round(sfsl)
    kept = _play(node, SFSL_PLAN, 1, parties)
    assert len(kept) == 10
    assert not (escaped := _escaped(kept, _next_of(SFSL_PLAN), values=("download",))), escaped[:10]


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # a mutated ciphertext decodes to any float
def test_a_secea_silo_reads_every_mutated_answer_without_an_undocumented_error() -> None:
    roster = Roster.generate()
    params, bloom = SecEAParams(3, 1, dim=2), union_bloom(16, 9)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i))
               for i, s in enumerate(SETS)]
    node = SecEANode(params, bloom, key_bits=KEY_BITS, pin=roster.pin)
    node.open_round(0, SILOS)
    setup = _play(node, SECEA_SETUP_PLAN, 0, {i: SecEASetupParty(c, bloom, 0) for i, c in enumerate(clients)})
    assert not (escaped := _escaped(setup, _next_of(SECEA_SETUP_PLAN))), escaped[:10]
    node.open_round(1, SILOS)
    rows = [np.random.default_rng(i).normal(size=(len(s), 2)) for i, s in enumerate(SETS)]
    rounds = _play(node, SECEA_ROUND_PLAN, 1, {i: SecEAParty(c, 1, rows[i]) for i, c in enumerate(clients)})
    assert not (escaped := _escaped(rounds, _next_of(SECEA_ROUND_PLAN))), escaped[:10]
