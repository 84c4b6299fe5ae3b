"""Session 26 (issue 34, finding R6): ``SecAggConfig.min_row_holders`` in a signed sparse round.

A row's sum over the survivors holding it is revealed; with ``min_row_holders = m`` no revealed
row sum is over fewer than ``m`` devices: a device contributes zero on a row fewer than ``m``
devices of its U2 hold (their signed row sets), and unmasks only where no row a dropped device of
its U2 holds is left with ``1 .. m - 1`` surviving holders and no row a survivor that did not sign
the survivor list holds has fewer than ``m`` signers among its surviving holders (docs/secagg.md,
"Rows of few holders").  Each attack is played by a server written here
(it builds every message itself) against the real :class:`~secemb.secagg.SecAggClient`; expected
sums come from numpy over the test's inputs, never from the code under test.
"""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.secagg import SecAggAborted, SecAggClient, SecAggConfig, SecAggServer, keys, messages, run_round
from secemb.secagg.client import share_record_bytes, short_row
from secemb.secagg.config import sign
from secemb.secagg.identity import Roster
from secemb.secagg.prg import mask_rows

H = messages.HEADER_BYTES


def _cfg(n: int, threshold: int, length: int = 6, m: int = 2, round_id: int = 26) -> SecAggConfig:
    return SecAggConfig(length=length, threshold=threshold, round_id=round_id, sparse=True, signed=True,
                        min_row_holders=m)


def _inputs(rows: dict[int, list[int]], seed: int) -> dict[int, np.ndarray]:
    g = np.random.default_rng(seed)  # test inputs, not secrets
    return {u: g.integers(1, 2**32, len(r), dtype=np.uint64).astype(np.uint32) for u, r in rows.items()}


def _row_sums(rows: dict[int, list[int]], x: dict[int, np.ndarray], who: list[int], length: int,
              m: int, counted: list[int]) -> np.ndarray:
    """numpy's sum over ``who`` of each row held by at least ``m`` devices of ``counted``."""
    held = np.zeros(length, np.int64)
    for u in counted:
        held[rows[u]] += 1
    total = np.zeros(length, np.uint64)
    for u in who:
        keep = held[rows[u]] >= m
        np.add.at(total, np.asarray(rows[u])[keep], x[u][keep].astype(np.uint64))
    return (total % 2**32).astype(np.uint32)


class Deviant:
    """A server that sends each device what the test chooses (key list: every device's entry)."""

    def __init__(self, cfg: SecAggConfig, rows: dict[int, list[int]], x: dict[int, np.ndarray]) -> None:
        roster = Roster.generate()
        self.cfg, self.rows, self.x = cfg, rows, x
        self.ids = sorted(rows)
        self.clients = {u: SecAggClient(u, cfg, identity=roster.enroll(u)) for u in self.ids}
        self.server = SecAggServer(cfg)  # only to build the key list (it checks the advertised rows)
        for u, c in self.clients.items():
            self.server.receive_advertise(u, c.advertise(np.array(rows[u])))
        km = self.server.keys_messages()
        self.records: dict[tuple[int, int], bytes] = {}  # (sender, recipient) -> relayed record
        size = 4 + share_record_bytes(cfg)
        for u, c in self.clients.items():
            body = c.share_keys(km[u])[H:]
            for i in range(struct.unpack_from("<I", body)[0]):
                rec = body[4 + i * size : 4 + (i + 1) * size]
                self.records[(u, int.from_bytes(rec[:4], "little"))] = rec[4:]
        self.masked: dict[int, np.ndarray] = {}
        self.sigs: dict[int, bytes] = {}
        self.refused: dict[int, str] = {}
        self.unmasked: dict[int, bytes] = {}

    def relay(self, senders_for: dict[int, list[int]]) -> None:
        """Device ``v`` gets the shares of ``senders_for[v]`` (default every other device)."""
        for v, c in self.clients.items():
            senders = [u for u in senders_for.get(v, self.ids) if u != v]
            msg = messages.frame("relayed", self.cfg.round_id, messages.SERVER, len(senders).to_bytes(4, "little"),
                                 *(u.to_bytes(4, "little") + self.records[(u, v)] for u in senders))
            self.masked[v] = np.frombuffer(c.masked_input(msg, self.x[v])[H:], "<u4").copy()

    def survivors(self, u3: list[int], shown: list[int] | None = None) -> None:
        """``shown`` (default ``u3``) get the survivor list ``u3``; each signs it or refuses."""
        msg = messages.frame("survivors", self.cfg.round_id, messages.SERVER, messages.ids_bytes(u3))
        for u in u3 if shown is None else shown:
            try:
                self.sigs[u] = self.clients[u].consistency(msg)[H:]
            except InvalidMessage as exc:
                self.refused[u] = str(exc)

    def unmask(self, to: list[int], signers: list[int] | None = None) -> None:
        """Each of ``to`` gets the signatures of ``signers`` (default every one the server holds);
        keep its unmask message or refusal."""
        chosen = sorted(self.sigs if signers is None else signers)
        msg = messages.frame("signatures", self.cfg.round_id, messages.SERVER, len(chosen).to_bytes(4, "little"),
                             *(v.to_bytes(4, "little") + self.sigs[v] for v in chosen))
        for u in to:
            try:
                self.unmasked[u] = self.clients[u].unmask(msg)
            except InvalidMessage as exc:
                self.refused[u] = str(exc)

    def read_with_secrets(self, u3: list[int], dropped: list[int], row: int) -> int:
        """What the server reads on ``row`` once it holds the seeds ``b`` of ``u3`` and the mask keys
        of ``dropped`` (taken here from the clients: what ``threshold`` unmask messages would open)."""
        total = 0
        for u in u3:
            if row not in self.rows[u]:
                continue
            c, at = self.clients[u], self.rows[u].index(row)
            total += int(self.masked[u][at]) - int(mask_rows(c._b, np.array([row]), 1)[0, 0])
            for v in dropped:
                if row in self.rows[v] and v in c._u2:
                    seed = keys.agree(self.clients[v]._s.private, c._s.public, keys.MASK, self.cfg.round_id,
                                      (v, u))
                    total -= sign(u, v) * int(mask_rows(seed, np.array([row]), 1)[0, 0])
        return total % 2**32


# ------------------------------------------------------------------ R6: the server discards the co-holder

R6_ROWS = {0: [1, 2, 3], 1: [1, 2, 3], 2: [0, 5], 3: [4, 5]}


def test_r6_a_discarded_co_holder_makes_every_survivor_refuse_and_the_server_opens_nothing() -> None:
    """R6 (session 22): devices 0 and 1 hold rows 1-3; the server discards device 1's masked
    input (a dropout nobody can tell apart).  With ``min_row_holders = 2`` every survivor
    refuses at Unmasking naming the rule, no share leaves, and the round aborts."""
    cfg = _cfg(4, 3)
    x = _inputs(R6_ROWS, 6)
    adv = Deviant(cfg, R6_ROWS, x)
    adv.relay({})
    adv.survivors([0, 2, 3])
    adv.unmask([0, 2, 3])
    assert adv.unmasked == {}
    assert all("row 1 has 1 surviving holder(s), fewer than min_row_holders 2, and client 1" in adv.refused[u]
               for u in (0, 2, 3))
    # without the refusals the rows would be device 0's values: the attack is real
    assert [adv.read_with_secrets([0, 2, 3], [1], r) for r in (1, 2, 3)] == x[0].tolist()


def test_r6_through_the_honest_server_does_not_commit() -> None:
    """The same dropout in :func:`run_round` (an honest server: device 1 drops after ShareKeys):
    the round does not commit, and the reason names the rule (every survivor refuses at
    Unmasking, ``InvalidMessage``; a server that checks the rule itself aborts first,
    ``SecAggAborted``)."""
    cfg = _cfg(4, 3)
    with pytest.raises((InvalidMessage, SecAggAborted), match="min_row_holders 2"):
        run_round(cfg, _inputs(R6_ROWS, 7), rows={u: np.array(r) for u, r in R6_ROWS.items()}, drop_after={1: 2})


def test_limit_min_row_holders_1_keeps_the_r6_leak() -> None:
    """The old behaviour, kept as an explicit setting: with ``min_row_holders = 1`` the round
    commits and its sums on rows 1-3 are device 0's values."""
    cfg = _cfg(4, 3, m=1)
    x = _inputs(R6_ROWS, 8)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in R6_ROWS.items()}, drop_after={1: 2})
    assert tr.survivors == [0, 2, 3]
    assert np.array_equal(tr.total[[1, 2, 3], 0], x[0])


# ------------------------------------------------------------------ rule 1: rows of one holder contribute zero

def test_rows_fewer_devices_hold_contribute_zero_and_the_rest_sum_exactly() -> None:
    """No dropout: rows 0 and 4 have one holder each (zero), rows 1-3 and 5 two (exact sums)."""
    cfg = _cfg(4, 3)
    x = _inputs(R6_ROWS, 9)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in R6_ROWS.items()})
    ids = sorted(R6_ROWS)
    assert np.array_equal(tr.total[:, 0], _row_sums(R6_ROWS, x, ids, 6, 2, ids))
    assert tr.total[0, 0] == 0 and tr.total[4, 0] == 0 and tr.total[5, 0] != 0


def test_a_dropout_before_sharing_keys_loses_its_rows_not_the_round() -> None:
    """Device 1 is in the key list but sends no shares (not in U2): rows 1-3 now have one holder
    in U2, so device 0 contributes zero there and the round commits with the other rows exact."""
    cfg = _cfg(4, 3)
    x = _inputs(R6_ROWS, 10)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in R6_ROWS.items()}, drop_after={1: 1})
    assert tr.survivors == [0, 2, 3]
    assert np.array_equal(tr.total[:, 0], _row_sums(R6_ROWS, x, [0, 2, 3], 6, 2, [0, 2, 3]))
    assert not tr.total[[1, 2, 3], 0].any()


def test_a_dropout_whose_rows_keep_two_survivors_commits_exactly() -> None:
    rows = {0: [1, 2], 1: [1, 2], 2: [1, 2, 5], 3: [0, 5], 4: [0, 5]}
    cfg = _cfg(5, 3)
    x = _inputs(rows, 11)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in rows.items()}, drop_after={2: 2})
    assert tr.survivors == [0, 1, 3, 4]
    assert np.array_equal(tr.total[:, 0], _row_sums(rows, x, [0, 1, 3, 4], 6, 2, list(rows)))


def test_a_survivor_that_does_not_sign_is_harmless_where_each_of_its_rows_has_two_signers() -> None:
    """Device 4 drops after its masked input (it never signs): each of its rows has at least
    two signers among its surviving holders, so the others unmask and the sum (device 4's input
    included: it is a survivor) is exact."""
    rows = {0: [0, 1], 1: [0, 1], 2: [1, 2], 3: [2, 3], 4: [0, 1, 2], 5: [3]}
    cfg = _cfg(6, 4)
    x = _inputs(rows, 15)
    tr = run_round(cfg, x, rows={u: np.array(r) for u, r in rows.items()}, drop_after={4: 3})
    assert tr.survivors == [0, 1, 2, 3, 4, 5]
    assert np.array_equal(tr.total[:, 0], _row_sums(rows, x, list(rows), 6, 2, list(rows)))


# ------------------------------------------------------------------ the adversary's other moves

SPLIT_ROWS = {0: [1], 1: [1], 2: [1], 3: [0], 4: [0], 5: [0], 6: [0]}


def test_split_relays_that_make_a_co_holder_zero_its_row_are_refused_for_missing_signatures() -> None:
    """The server shows device 2 a U2 without devices 0 and 1 (so 2 holds row 1 alone there and
    contributes zero, masking with neither) and device 0 a U2 without device 2, then discards
    device 1: row 1 has two surviving holders, 0 and 2, but only device 0's value in it.  The
    other devices see everyone and would unmask; devices 0 and 2 do not sign (each sees a survivor
    outside its U2), and row 1, which they hold, has no signer among its surviving holders: the
    others refuse."""
    cfg = _cfg(7, 4)
    x = _inputs(SPLIT_ROWS, 12)
    adv = Deviant(cfg, SPLIT_ROWS, x)
    ids = adv.ids
    adv.relay({2: [u for u in ids if u not in (0, 1)], 0: [u for u in ids if u != 2]})
    u3 = [0, 2, 3, 4, 5, 6]
    adv.survivors(u3)
    assert sorted(adv.sigs) == [3, 4, 5, 6] and {0, 2} <= set(adv.refused)
    adv.unmask([3, 4, 5, 6])
    assert adv.unmasked == {}
    assert all("row 1 has 2 surviving holder(s), 0 of them signers, fewer than min_row_holders 2, and client 0, "
               "which holds it, did not sign the survivor list" in adv.refused[u] for u in (3, 4, 5, 6))
    # the dropout check alone would not catch it (two surviving holders), and the read is device 0's value
    assert short_row(cfg, lambda u: np.array(SPLIT_ROWS[u]), u3, dropped=[1]) is None
    assert adv.read_with_secrets(u3, [1], 1) == int(x[0][0])


def test_a_dropped_co_holder_relayed_to_the_victim_alone_keeps_its_mask_key_closed() -> None:
    """The server relays device 1's shares to device 0 only (the others' U2 lacks device 1, so
    they see no dropout and unmask) and discards device 1's masked input: device 0 contributed on
    row 1 (two holders in its U2) and masked it with device 1, and refuses; the others send no
    share of device 1's mask key (it is not in their U2), so that mask never comes off and the
    row stays masked, though device 0's seed opens."""
    rows = {0: [1], 1: [1], 2: [0], 3: [0], 4: [0]}
    cfg = _cfg(5, 3)
    x = _inputs(rows, 16)
    adv = Deviant(cfg, rows, x)
    adv.relay({u: [v for v in adv.ids if v != 1] for u in (2, 3, 4)})
    u3 = [0, 2, 3, 4]
    adv.survivors(u3)
    adv.unmask(u3)
    assert "row 1 has 1 surviving holder(s)" in adv.refused[0] and sorted(adv.unmasked) == [2, 3, 4]
    assert all(struct.unpack_from("<I", adv.unmasked[u], H)[0] == 0 for u in (2, 3, 4))  # no mask-key share
    # with device 1's mask key the row would be device 0's value; without it, it is masked
    assert adv.read_with_secrets(u3, [1], 1) == int(x[0][0])


def test_two_survivor_lists_cannot_hide_the_discarded_co_holder() -> None:
    """Devices 1-6 are told that device 1 survived (no row of one holder), device 0 that it
    dropped: device 0 cannot gather ``threshold`` signatures of its list (each device signs one
    list), and in the others' list, in which device 1 survives (its mask key is never asked
    for), row 1 has one signer among its two surviving holders (device 0 did not sign it)."""
    rows = {0: [1], 1: [1], 2: [0], 3: [0], 4: [0], 5: [0], 6: [0]}
    cfg = _cfg(7, 4)
    adv = Deviant(cfg, rows, _inputs(rows, 13))
    adv.relay({})
    adv.survivors([0, 2, 3, 4, 5, 6], shown=[0])
    adv.survivors(adv.ids, shown=[1, 2, 3, 4, 5, 6])
    adv.unmask([0], signers=[0])
    adv.unmask([1, 2, 3, 4, 5, 6], signers=[1, 2, 3, 4, 5, 6])
    assert "1 survivors signed the survivor list, fewer than the threshold 4" in adv.refused[0]
    assert all("row 1 has 2 surviving holder(s), 1 of them signers" in adv.refused[u] for u in range(1, 7))
    assert adv.unmasked == {}


def test_the_rule_is_in_every_signature_a_device_with_another_setting_is_refused() -> None:
    """``min_row_holders`` is in the round's header, which every advertise signature covers: a
    device that signed its keys under ``m = 1`` is refused in a round of ``m = 2`` (so no device
    of a round runs a weaker rule than the others)."""
    base = _cfg(3, 2)
    weaker = replace(base, min_row_holders=1)
    assert base.header() != weaker.header()
    device = SecAggClient(2, weaker, identity=Roster.generate().enroll(2))
    with pytest.raises(InvalidMessage, match="signature"):
        SecAggServer(base).receive_advertise(2, device.advertise(np.array([1])))


# ------------------------------------------------------------------ the setting

@pytest.mark.parametrize("fields, message", [
    ({"sparse": True}, "signed sparse round"),
    ({"signed": True}, "signed sparse round"),
    ({"sparse": True, "signed": True, "min_row_holders": 4},
     r"min_row_holders \(at most the round's threshold\) must be an int in \[1, 3\], got 4"),
    ({"sparse": True, "signed": True, "min_row_holders": 0},
     r"min_row_holders \(at most the round's threshold\) must be an int in \[1, 3\], got 0"),
])
def test_the_setting_is_checked(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidParameters, match=message):
        SecAggConfig(length=4, threshold=3, **{"min_row_holders": 2, **fields})  # type: ignore[arg-type]


def test_an_sfsl_secure_sum_has_min_row_holders_2_by_default() -> None:
    from secemb.protocols.sfsl.parties import RowSpace, TrainingSettings
    from secemb.protocols.sfsl.staged import sum_config

    m = TrainingSettings().min_row_holders
    assert m == 2
    cfg = sum_config(RowSpace(goods=10, categories=2, dim=2, mlp_size=3), 2, 1, (0, 3, 10), min_row_holders=m)
    assert cfg.min_row_holders == 2 and cfg.signed and cfg.sparse
