"""Session 25 (helper H): a mutation fuzz of the one-server exchange app (secemb.server.exchange_app)
from the bytes a device can send.

Honest rounds are played in process through the app (Starlette's test client, signed requests:
:class:`test_exchange_attacks.Http`) -- SFSL (CPP2, a signed round, the node pinned to the roster)
and SecEA (its signed set-up, then an aggregation round).  At every stage one device of the round
(a different one each stage) first sends mutated copies of its genuine message:

* the empty body, the header alone, truncations at every field boundary of the body and at
  random points (each as cut, and with the header's body length made to match, so that the
  body's own parser must see it);
* each header byte flipped (``^ 0x01`` and ``^ 0xFF``);
* each count and length field set to 0, one less, one more, ``2^15``, ``2^31`` and its type's
  largest value; each record id set to the sender, to a device outside the round, to the
  previous record's (a duplicate) and to the largest value;
* extensions (a byte cut on, a zero byte and a zero word with the header made to match);
* the device's genuine message of every other stage and of an earlier round, another device's
  message of the stage (where the message names its sender); a body over the app's limit;
* the genuine message at another round's path, and sent and fetched at paths whose round id is
  no canonical numeral or off the node's range, or whose stage is none.

Every mutation must be answered 4xx (413 for the body over the limit) with the app's
``{"error", "detail"}`` document, never a 5xx or a traceback; then the genuine message must be
accepted.  The round is played in lockstep on a twin
node given only the genuine messages: every answer the app gives a device must equal the twin's,
byte for byte, and the round commits the same model (SFSL) or the same averages (SecEA) -- a
refused message changed nothing.  The mutations' bytes come from a seeded DRBG (the test's own
choice of cut points; no secret is drawn from it).

Then the mutations a node may take (``test_*_well_formed_flips_*``): a byte flipped in a field no
parser can check (a share's ciphertext, a masked input word, an unmask share, the requested goods,
a signature, a Paillier modulus or ciphertext, a padded share word): refused, or taken and the round
commits or aborts, never a 5xx, only the flipping device found cheating, and the next round of the
same devices commits (SecEA: with the exact averages).

Found: nothing -- no 5xx, no traceback, no refused message that changed the round (session 25).
"""

from __future__ import annotations

import json
import struct
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))
from test_net_fuzz import _BAD_NUMERALS  # type: ignore[import-not-found]  # noqa: E402
from test_exchange_attacks import LIMIT, SETS, Http, http_of, play_stage  # type: ignore[import-not-found]  # noqa: E402

from secemb.data.ctr import TaobaoShaped, split_clicks  # noqa: E402
from secemb.errors import SecembError  # noqa: E402
from secemb.framing import HEADER_BYTES  # noqa: E402
from secemb.protocols.exchange import ExchangeRun  # noqa: E402
from secemb.protocols.secea.coding import SecEAParams  # noqa: E402
from secemb.protocols.secea.parties import SecEAClient  # noqa: E402
from secemb.protocols.secea.staged import SECEA_ROUND_PLAN, SECEA_SETUP_PLAN, SecEANode, SecEAParty, SecEASetupParty  # noqa: E402
from secemb.protocols.secea.union import union_bloom  # noqa: E402
from secemb.protocols.sfsl.protocol import SFSLProtocol  # noqa: E402
from secemb.protocols.sfsl.staged import SFSLNode  # noqa: E402
from secemb.protocols.stages import RoundPlan  # noqa: E402
from secemb.randomness import CtrDrbg  # noqa: E402
from secemb.secagg.identity import Roster  # noqa: E402

torch.set_num_threads(1)

USERS = [0, 1, 2]
#: a device id no round here has
STRANGER = 1000
#: byte sizes of the fixed fields (docs/secagg.md, docs/secea.md)
KEY, COMMITMENT, CERTIFICATE, SIGNATURE, SHARE, SHARE_COMMITMENT = 32, 32, 120, 64, 33, 16
#: a Paillier ciphertext of a 1024-bit modulus: ceil(bits(n^2) / 8)
PAILLIER_CT = 256
KEY_BITS = 1024


@dataclass(frozen=True)
class Field:
    """A field of a message body: ``at`` (offset in the body), ``size`` (bytes), ``role``
    (``count``: a count or length; ``id``: a device id of a record; ``data``)."""

    at: int
    size: int
    role: str


class Layout:
    """The fields of a body, read from the spec's layout (docs/secagg.md, docs/secea.md,
    docs/sfsl.md) -- the test's own reading, not the parsers under test."""

    def __init__(self, body: bytes) -> None:
        self.body, self.pos = body, 0
        self.fields: list[Field] = []

    def take(self, size: int, role: str = "data") -> int:
        assert self.pos + size <= len(self.body), (self.pos, size, len(self.body))
        self.fields.append(Field(self.pos, size, role))
        self.pos += size
        return int.from_bytes(self.body[self.pos - size:self.pos], "little")

    def rest(self) -> list[Field]:
        assert self.pos == len(self.body), f"the layout read {self.pos} of {len(self.body)} bytes"
        return self.fields


def _rows(lay: Layout) -> None:
    """``count`` then ``count`` uint32 (row numbers, goods ids): one field, not ``count`` (the cuts
    at its start and middle; a cut at every row would send thousands)."""
    lay.take(4 * lay.take(4, "count"))


def layout(stage: str, body: bytes) -> list[Field]:
    """The fields of ``body``, the message of ``stage`` (header cut off) in a signed round (every
    round here is one)."""
    lay = Layout(body)
    step = stage.split("-")[-1]
    if stage == "download":  # sfsl request: count, count x goods id
        _rows(lay)
    elif stage == "secea-keys":  # HELLO: X25519 key, certificate, signature, Paillier n (the rest)
        lay.take(KEY)
        lay.take(CERTIFICATE)
        lay.take(SIGNATURE)
        lay.take(len(body) - lay.pos)
    elif stage == "secea-share":  # UPLOAD: u32 M, u16 w, u32 E, u16 count, count x (u16 v, (M w + E M) u32)
        m, w, e = lay.take(4, "count"), lay.take(2, "count"), lay.take(4, "count")
        for _ in range(lay.take(2, "count")):
            lay.take(2, "id")
            lay.take(4 * (m * w + e * m))
    elif stage == "secea-answer":  # ANSWER: u16 count, count x (u16 n, u32 E_n, u16 C_n, E_n C_n ciphertexts)
        for _ in range(lay.take(2, "count")):
            lay.take(2, "id")
            e, c = lay.take(4, "count"), lay.take(2, "count")
            lay.take(e * c * PAILLIER_CT)
    elif step == "advertise":  # key(c) key(s) commitment certificate signature [rows]
        for size in (KEY, KEY, COMMITMENT, CERTIFICATE, SIGNATURE):
            lay.take(size)
        if lay.pos < len(body):
            _rows(lay)
    elif step == "shares":  # count, count x (id ciphertext commitment(s) commitment(b)), 2 commitments
        count = lay.take(4, "count")
        record = (len(body) - 4 - 2 * SHARE_COMMITMENT) // count
        for _ in range(count):
            lay.take(4, "id")
            lay.take(record - 4)
        lay.take(2 * SHARE_COMMITMENT)
    elif step == "masked":  # k x width uint32
        lay.take(len(body))
    elif step == "consistency":
        lay.take(SIGNATURE)
    elif step == "unmask":  # count, count x (id share), twice
        for _ in range(2):
            for _ in range(lay.take(4, "count")):
                lay.take(4, "id")
                lay.take(SHARE)
    else:
        raise AssertionError(f"no layout for stage {stage}")
    return lay.rest()


def reframed(msg: bytes, body: bytes) -> bytes:
    """``msg``'s header with ``body`` and the header's body length made to match."""
    return msg[:24] + struct.pack("<Q", len(body)) + body


def mutations(msg: bytes, fields: list[Field], sender: int, rng: CtrDrbg) -> Iterator[tuple[str, bytes]]:
    """The structural mutations of ``msg`` (a genuine message whose body has ``fields``), named."""
    body = msg[HEADER_BYTES:]
    yield "empty", b""
    yield "the header alone", msg[:HEADER_BYTES]
    cuts = sorted({f.at for f in fields} | {f.at + f.size // 2 for f in fields} | {len(body) - 1}
                  | {int.from_bytes(rng(4), "little") % max(len(body), 1) for _ in range(4)})
    for cut in cuts:
        if 0 <= cut < len(body):
            yield f"cut at body byte {cut}", msg[:HEADER_BYTES + cut]
            yield f"cut at body byte {cut}, the header made to match", reframed(msg, body[:cut])
    for off in range(HEADER_BYTES):
        for x in (0x01, 0xFF):
            bad = bytearray(msg)
            bad[off] ^= x
            yield f"header byte {off} ^ {x:#x}", bytes(bad)
    previous_id = None
    for f in fields:
        if f.role == "data":
            continue
        top = (1 << (8 * f.size)) - 1
        value = int.from_bytes(body[f.at:f.at + f.size], "little")
        if f.role == "count":
            values = {0, value - 1, value + 1, 1 << 15, top} | ({1 << 31} if f.size == 4 else set())
        else:
            values = {sender, STRANGER, top} | ({previous_id} if previous_id is not None else set())
            previous_id = value
        for v in sorted(values - {value}):
            if 0 <= v <= top:
                yield (f"{f.role} at body byte {f.at} {value} -> {v}",
                       msg[:HEADER_BYTES + f.at] + v.to_bytes(f.size, "little") + msg[HEADER_BYTES + f.at + f.size:])
    yield "a byte cut on", msg + b"\x00"
    yield "a zero byte cut on, the header made to match", reframed(msg, body + b"\x00")
    yield "a zero word cut on, the header made to match", reframed(msg, body + bytes(4))


#: request paths no device message may be taken at (the round id's part; with a "/", the round id and
#: stage): non-canonical numerals, round ids off the node's range, stage names that are none
BAD_PATHS = [*_BAD_NUMERALS, "-1", str(2**62), str(2**64), "1/nope", "1/psu-advertise%20", "1/%00", "1/" + "x" * 1000,
             "1/sum-advertise/x"]


@dataclass
class Tally:
    """What the fuzz sent: mutations refused (by status) and what was not refused."""

    refused: dict[int, int]
    wrong: list[str]

    def check(self, status: int, text: str, what: str, want: int | None = None) -> None:
        ok = 400 <= status < 500 and (want is None or status == want) and "Traceback" not in text
        if ok:  # a refusal is {"error", "detail"} (secemb.server.gate)
            doc = json.loads(text) if text.startswith("{") else None
            ok = isinstance(doc, dict) and set(doc) == {"error", "detail"} and bool(doc["detail"])
        if ok:
            self.refused[status] = self.refused.get(status, 0) + 1
        else:
            self.wrong.append(f"{what}: {status} {text[:160]}")


class Twin:
    """The node the genuine messages alone go to (the lockstep reference)."""

    def __init__(self, node: Any) -> None:
        self.node = node

    def stage(self, round_id: int, stage: str, messages: Mapping[int, bytes]) -> None:
        for u, body in messages.items():
            self.node.receive(round_id, stage, u, body)
        self.node.close(round_id, stage)


def fuzz_message(http: Http, tally: Tally, victim: int, round_id: int, stage: str, msg: bytes,
                 others: list[tuple[str, bytes]], rng: CtrDrbg, paths: bool) -> None:
    """Device ``victim`` sends the mutations of ``msg``, its genuine message of ``stage``, then
    ``others`` (named messages that are not its message of the stage), a body over the limit and
    ``msg`` at another round's path (with ``paths``, at the :data:`BAD_PATHS` too, where it also
    fetches); each must be a 4xx (:class:`Tally`)."""
    path = f"/v1/exchange/rounds/{round_id}/{stage}"

    def send(body: bytes, what: str, want: int | None = None, to: str = path) -> None:
        resp = http.call(victim, "POST", to, body)
        tally.check(resp.status_code, resp.text, f"{stage} from {victim}: {what}", want)

    for what, body in [*mutations(msg, layout(stage, msg[HEADER_BYTES:]), victim, rng), *others]:
        send(body, what)
    send(bytes(LIMIT + 1), "a body over the limit", 413)
    send(msg, "another round's path", to=f"/v1/exchange/rounds/{round_id + 1}/{stage}")
    send(msg, "an earlier round's path", to=f"/v1/exchange/rounds/{round_id - 1}/{stage}")
    for bad in BAD_PATHS if paths else []:
        to = f"/v1/exchange/rounds/{bad}" if "/" in bad else f"/v1/exchange/rounds/{bad}/{stage}"
        send(msg, f"path {to}", to=to)
        resp = http.call(victim, "GET", to)
        tally.check(resp.status_code, resp.text, f"{stage} from {victim}: its answer at path {to}")


def fuzz_round(http: Http, twin: Twin, plan: RoundPlan, round_id: int, parties: Mapping[int, Any],
               earlier: dict[int, dict[int, bytes]], tally: Tally, rng: CtrDrbg,
               names_sender: Callable[[str], bool] = lambda stage: True, server_closes: bool = False) -> None:
    """Play round ``round_id`` (opened at both nodes) through the app and the twin: at stage
    ``k`` device ``USERS[k % 3]`` sends its mutations first (:func:`fuzz_message`, at the first
    stage at the bad paths too; its other
    messages: each device's genuine messages so far in ``earlier``, by round id * 100 + stage
    index, added to as the round goes, and, where ``names_sender(stage)``, the next device's
    message of the stage), then every device its genuine message; each stage's answers from the
    app must be the twin's.  ``server_closes``: the app closes each stage itself once every device
    has sent (``stage_deadline_s``), which must be after the last genuine message, not before (a
    refused message is no device's message of the stage); else the operator closes it."""
    for k, stage in enumerate(plan.stages):
        genuine = {u: p.message(stage) for u, p in parties.items()}
        victim, other = USERS[k % len(USERS)], USERS[(k + 1) % len(USERS)]
        msg = genuine[victim]
        others = [(f"its message of round {key // 100}'s stage {key % 100}", body)
                  for key, body in earlier.get(victim, {}).items() if body != msg]
        if names_sender(stage):
            others.append((f"device {other}'s message", genuine[other]))
        fuzz_message(http, tally, victim, round_id, stage, msg, others, rng, paths=k == 0)
        for u, body in genuine.items():
            assert http.call(u, "GET", "/v1/exchange/round").json()["stage"] == stage
            resp = http.call(u, "POST", f"/v1/exchange/rounds/{round_id}/{stage}", body)
            assert resp.status_code == 204, (stage, u, resp.status_code, resp.text)
            earlier.setdefault(u, {})[round_id * 100 + k] = body
        twin.stage(round_id, stage, genuine)
        if server_closes:
            following = plan.stages[k + 1] if k + 1 < len(plan.stages) else None
            assert http.call(victim, "GET", "/v1/exchange/round").json()["stage"] == following
        else:
            assert http.close(round_id, stage) == 200
        if plan.replies(stage):
            for u, party in parties.items():
                got = http.fetch(u, round_id, stage)
                assert got == twin.node.reply(round_id, stage, u), (stage, u)
                if got is not None:
                    party.accept(stage, got)


def _outcome(out: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in out.items() if k != "server_s"}


@pytest.fixture(scope="module")
def sfsl() -> SFSLProtocol:
    clicks = split_clicks(TaobaoShaped("taobao-mini", seed=3).clients(np.arange(8)))
    return SFSLProtocol(ExchangeRun("taobao-mini", users_per_round=3), sfsl_preset="CPP2", batch=8, data=clicks)


def test_sfsl_refuses_every_mutation_with_a_4xx_and_its_rounds_commit_as_the_twins(sfsl: SFSLProtocol) -> None:
    """SFSL CPP2, two signed rounds, the node pinned to the roster: every mutation of every
    stage's message is a 4xx; every answer equals the twin's; both rounds commit the twin's
    model (which moved)."""
    node, twin_node = sfsl.make_server().node, sfsl.make_server().node
    assert isinstance(node, SFSLNode) and isinstance(twin_node, SFSLNode)
    node.pin = twin_node.pin = sfsl.roster.pin
    start = node.server.table.copy()
    http = http_of(node, num_users=8)
    twin, tally, rng = Twin(twin_node), Tally({}, []), CtrDrbg(25)
    devices = {u: sfsl.make_device(u) for u in USERS}
    earlier: dict[int, dict[int, bytes]] = {}
    for round_id in (1, 2):
        doc = http.open(round_id, USERS)
        assert twin_node.open_round(round_id, USERS) == {k: v for k, v in doc.items() if k != "refused"}
        parties = {u: devices[u].party(doc) for u in USERS}
        # a download request names no device: another device's is a valid request of its own
        fuzz_round(http, twin, node.plan, round_id, parties, earlier, tally, rng,
                   names_sender=lambda stage: stage != "download")
        assert http.outcome(round_id)["state"] == "committed"
        assert _outcome(http.outcome(round_id)) == _outcome(twin_node.outcome(round_id))
        assert np.array_equal(node.server.table, twin_node.server.table)
        assert np.array_equal(node.server.dense, twin_node.server.dense)
    assert not np.array_equal(node.server.table, start)  # the rounds moved the model
    assert not tally.wrong, "\n".join(tally.wrong)
    assert sum(tally.refused.values()) > 2000 and tally.refused[413] == 2 * len(node.plan.stages)


@pytest.mark.parametrize("server_closes", [False, True], ids=["operator-closes", "server-closes"])
def test_secea_refuses_every_mutation_with_a_4xx_and_its_rounds_commit_as_the_twins(server_closes: bool) -> None:
    """SecEA, its signed set-up (the node pinned to the roster) then an aggregation round: every
    mutation of every stage's message is a 4xx; every answer equals the twin's; the silos'
    averages are exact.  The stages closed by the operator, or by the app itself once every silo
    has sent (``stage_deadline_s``, as ``secemb serve`` runs: never on a refused message)."""
    params = SecEAParams(3, 1, dim=2)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()
    rng = CtrDrbg(7)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]

    def node() -> SecEANode:
        return SecEANode(params, bloom, key_bits=KEY_BITS, pin=roster.pin, _rng=CtrDrbg(8))

    fuzzed, twin_node = node(), node()
    http = http_of(fuzzed, stage_deadline_s=3600.0 if server_closes else None)
    twin, tally, drbg = Twin(twin_node), Tally({}, []), CtrDrbg(25)
    earlier: dict[int, dict[int, bytes]] = {}
    doc = http.open(1, USERS)
    assert twin_node.open_round(1, USERS) == {k: v for k, v in doc.items() if k != "refused"}
    setup = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(100 + i)) for i, c in enumerate(clients)}
    fuzz_round(http, twin, SECEA_SETUP_PLAN, 1, setup, earlier, tally, drbg, server_closes=server_closes)
    assert _outcome(http.outcome(1)) == _outcome(twin_node.outcome(1)) and http.outcome(1)["state"] == "committed"
    rows = [np.full((len(s), 2), float(v + 1)) for v, s in enumerate(SETS)]
    doc = http.open(2, USERS)
    assert twin_node.open_round(2, USERS) == {k: v for k, v in doc.items() if k != "refused"}
    parties = {i: SecEAParty(c, 2, rows[i]) for i, c in enumerate(clients)}
    fuzz_round(http, twin, SECEA_ROUND_PLAN, 2, parties, earlier, tally, drbg, server_closes=server_closes)
    assert _outcome(http.outcome(2)) == _outcome(twin_node.outcome(2)) and http.outcome(2)["state"] == "committed"
    # entity 4 is held by silos 0 and 1 (rows 1.0 and 2.0): the average is 1.5
    assert parties[0].average is not None and parties[0].average[1].tolist() == [1.5, 1.5]
    assert not tally.wrong, "\n".join(tally.wrong)
    assert sum(tally.refused.values()) > 1000
    assert tally.refused[413] == len(SECEA_SETUP_PLAN.stages) + len(SECEA_ROUND_PLAN.stages)


def flipped(msg: bytes, stage: str, nth: int) -> bytes:
    """``msg`` with the middle byte of its ``nth`` data field (:func:`layout`) flipped: a message
    still well formed, which the node may take (a key, a ciphertext, a masked word: what no parser
    can check)."""
    f = [f for f in layout(stage, msg[HEADER_BYTES:]) if f.role == "data"][nth]
    at = HEADER_BYTES + f.at + f.size // 2
    return msg[:at] + bytes([msg[at] ^ 0x01]) + msg[at + 1:]


def play_flipped(http: Http, plan: RoundPlan, round_id: int, parties: Mapping[int, Any], stage: str, victim: int,
                 nth: int) -> tuple[bool, dict[str, Any]]:
    """Play round ``round_id`` (opened) through the app, device ``victim`` sending
    ``flipped(..., nth)`` of its message of ``stage`` first, then (accepted or not) its genuine
    one.  A device that refuses an answer or its own next message (a :class:`SecembError`: it
    saw the deviation) or gets none stops, as a dropout; no request is answered 5xx.  Returns
    whether the flipped message was accepted and the round's outcome."""
    live, accepted = dict(parties), False
    for s in plan.stages:
        for u in list(live):
            try:
                body = live[u].message(s)
            except SecembError:
                del live[u]
                continue
            if (s, u) == (stage, victim):
                status = http.send(u, round_id, s, flipped(body, s, nth))
                assert status == 204 or 400 <= status < 500, status
                accepted = status == 204
            status = http.send(u, round_id, s, body)
            # the genuine message after an accepted flip: a duplicate; any message once the round aborted: 409
            assert status == (400 if accepted and (s, u) == (stage, victim) else 204) or status == 409, (s, u, status)
        assert http.close(round_id, s) in (200, 409)
        if http.outcome(round_id)["state"] == "aborted":
            break
        for u in list(live) if plan.replies(s) else []:
            got = http.fetch(u, round_id, s)
            try:
                assert got is not None
                live[u].accept(s, got)
            except (AssertionError, SecembError):
                del live[u]
    return accepted, http.outcome(round_id)


def test_sfsl_well_formed_flips_are_taken_or_refused_and_the_round_ends_cleanly(sfsl: SFSLProtocol) -> None:
    """SFSL (CPP2, pinned): one device's message with a byte of a field no parser can check
    flipped -- a share's ciphertext, a masked input word, an unmask share, the requested goods, a
    consistency signature.  Each is refused (4xx) or taken (204: the genuine one is then a 400
    duplicate); the round commits or aborts, never a 5xx, and only the flipping device can be
    found cheating (``proven_bad_shares``); the next round of the same devices commits."""
    node = sfsl.make_server().node
    assert isinstance(node, SFSLNode)
    node.pin = sfsl.roster.pin
    http = http_of(node, num_users=8)
    devices = {u: sfsl.make_device(u) for u in USERS}
    seen: dict[str, tuple[bool, str, list[int], dict[str, list[int]]]] = {}
    cases = [("psu-shares", 1, 0), ("sum-masked", 2, 0), ("sum-unmask", 0, 0), ("download", 1, 0),
             ("sum-consistency", 2, 0)]
    for round_id, (stage, victim, nth) in enumerate(cases, start=1):
        doc = http.open(round_id, USERS)
        parties = {u: devices[u].party(doc) for u in USERS}
        accepted, out = play_flipped(http, node.plan, round_id, parties, stage, victim, nth)
        assert out["state"] in ("committed", "aborted"), out
        assert set(out["proven_bad_shares"]) <= {victim}, (stage, out)
        seen[stage] = (accepted, out["state"], out["proven_bad_shares"], out["complaints"])
    # device 0 cannot open device 1's flipped share to it: its complaint, unverifiable, strikes none; the
    # threshold holds without it.  A masked input is the device's own: SecAgg sums what it is given.  A
    # flipped unmask share is not the one its dealer committed to: device 0 is proven to cheat, and the
    # other holders' shares open the sum.  A consistency signature verifies under the pinned roster or is
    # refused.  A flipped goods id is another valid request or one out of order (S'' is drawn afresh).
    assert {s: v for s, v in seen.items() if s != "download"} == {
        "psu-shares": (True, "committed", [], {"0": [1]}), "sum-masked": (True, "committed", [], {}),
        "sum-unmask": (True, "committed", [0], {}), "sum-consistency": (False, "committed", [], {})}
    assert seen["download"][1:] == ("committed", [], {})
    doc = http.open(len(cases) + 1, USERS)  # the devices after every deviation: an honest round
    play_stage_all(http, node.plan, len(cases) + 1, {u: devices[u].party(doc) for u in USERS})
    assert http.outcome(len(cases) + 1)["state"] == "committed"


def play_stage_all(http: Http, plan: RoundPlan, round_id: int, parties: dict[int, Any]) -> None:
    """Every stage of ``plan``, honestly (:func:`test_exchange_attacks.play_stage`)."""
    for stage in plan.stages:
        play_stage(http, plan, round_id, stage, parties)


def test_secea_well_formed_flips_are_taken_or_refused_and_the_honest_silos_average_exactly_after() -> None:
    """SecEA (signed set-up, pinned): a silo's HELLO with its Paillier modulus flipped is refused
    (the signature covers it) and the set-up commits with its genuine one; a flipped padded share
    word and a flipped answer ciphertext are taken (no one can check them: the round commits,
    docs/security.md, "Integrity"), never a 5xx; the next round of the same silos gives the
    exact averages."""
    params = SecEAParams(3, 1, dim=2)
    bloom = union_bloom(16, sum(len(s) for s in SETS))
    roster = Roster.generate()
    rng = CtrDrbg(9)
    clients = [SecEAClient(i, params, np.array(s), key_bits=KEY_BITS, identity=roster.enroll(i), _rng=rng)
               for i, s in enumerate(SETS)]
    http = http_of(SecEANode(params, bloom, key_bits=KEY_BITS, pin=roster.pin, _rng=CtrDrbg(10)))
    http.open(1, USERS)
    setup = {i: SecEASetupParty(c, bloom, 1, _rng=CtrDrbg(200 + i)) for i, c in enumerate(clients)}
    accepted, out = play_flipped(http, SECEA_SETUP_PLAN, 1, setup, "secea-keys", 1, 3)  # data field 3: n
    assert (accepted, out["state"]) == (False, "committed")
    rows = [np.full((len(s), 2), float(v + 1)) for v, s in enumerate(SETS)]
    for round_id, (stage, victim) in enumerate([("secea-share", 0), ("secea-answer", 2)], start=2):
        http.open(round_id, USERS)
        parties = {i: SecEAParty(c, round_id, rows[i]) for i, c in enumerate(clients)}
        accepted, out = play_flipped(http, SECEA_ROUND_PLAN, round_id, parties, stage, victim, 0)
        assert (accepted, out["state"]) == (True, "committed"), (stage, out)
    http.open(4, USERS)
    parties = {i: SecEAParty(c, 4, rows[i]) for i, c in enumerate(clients)}
    play_stage_all(http, SECEA_ROUND_PLAN, 4, parties)
    # entity 4 is held by silos 0 and 1 (rows 1.0 and 2.0): the average is 1.5
    assert parties[0].average is not None and parties[0].average[1].tolist() == [1.5, 1.5]
