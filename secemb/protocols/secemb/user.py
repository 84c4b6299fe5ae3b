"""SecEmb's user role: one device's side of one round -- its retrieval keys (generated as a
batch for many devices), the check of the rows it gets back, and its upload."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np

from secemb import fss
from secemb.errors import InvalidParameters, ProtocolError, RetrievalTampered, SecembError
from secemb.fss.fused import AGGREGATION_TAG, RETRIEVAL_TAG
from secemb.fss.verify import corrections
from secemb.protocols.base import RoundConfig, UserRole
from secemb.protocols.secemb.checks import key_digest, row_tags
from secemb.protocols.secemb.relay import relay_prg, upload_mac
from secemb.protocols.secemb.sizes import MAC_KEY_BYTES, NAME, answer_bytes, checks_bytes, key_params, tag_words
from secemb.protocols.wire import array_bytes, frame, open_message, read_array
from secemb.randomness import SEED_BYTES, RandomBytes, random_words, system_rng
from secemb.sharing import reconstruct, share

__all__ = ["SecEmbUser"]


def _inverse_odd(x: np.ndarray) -> np.ndarray:
    """``x^{-1} mod 2^k`` of odd ring words (uint32/uint64 array): Newton's iteration
    ``y <- y (2 - x y)``, exact to 3 bits at ``y = x`` and doubling them each step."""
    y = x.copy()
    two = x.dtype.type(2)
    for _ in range(6):  # 3 -> 96 bits >= 64
        y *= two - x * y
    return y


class SecEmbUser(UserRole):
    """One user's side of one SecEmb round."""

    def __init__(self, config: RoundConfig, *, relay: bool = False, verify: bool = True,
                 _rng: RandomBytes | None = None) -> None:
        self.config = config
        self.relay = relay
        self.verify = verify  # send check correction words (verified uploads)
        self._rng = _rng or system_rng
        self._state: fss.GenState | None = None
        self._real: np.ndarray | None = None
        self._items: np.ndarray | None = None  # int64 (S,): the slots' items (-1: empty bucket)
        self._unmask: np.ndarray | None = None  # ring (S,): inverses of the secret odd retrieval payloads (0: empty)
        self._seeds: tuple[bytes, bytes] | None = None
        self._mac_key: bytes | None = None  # relay: server 1's key for the upload's tag
        self._tampered = False  # a retrieval answer failed its check: no upload this round

    def _alphas(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Key points of users' checked slots (int64 (U, S)): item ids (full layout) or
        positions inside each bucket (cuckoo; any point for an empty one); and per user
        whether every item is in its slot's bucket (bool (U,); cuckoo: a placement not made
        by the layout fails)."""
        cfg = self.config
        if cfg.layout == "full":
            return slots, np.ones(slots.shape[0], bool)
        real = slots >= 0
        buckets = np.broadcast_to(np.arange(cfg.slots), slots.shape)
        alphas = np.zeros(slots.shape, np.int64)  # empty buckets: any point, payload 0
        found = np.ones(slots.shape, bool)
        alphas[real], found[real] = cfg.cuckoo().find(slots[real], buckets[real])
        return alphas, np.all(found, axis=1)

    def _slots(self, indices: np.ndarray) -> np.ndarray:
        """The checked request slots, int64 (S,) (see :meth:`retrieval_request`)."""
        cfg = self.config
        slots = np.asarray(indices)
        if slots.shape != (cfg.slots,):
            raise InvalidParameters(f"indices must have shape ({cfg.slots},), got {slots.shape}")
        if not np.issubdtype(slots.dtype, np.integer):
            raise TypeError(f"indices must be integers, got dtype {slots.dtype}")
        if self._state is not None:
            raise ProtocolError("retrieval_request called twice in one round")
        slots = slots.astype(np.int64)
        bad = slots[(slots < -1) | (slots >= cfg.num_items)]
        if bad.size:
            raise InvalidParameters(
                f"item index {int(bad[0])} is outside the domain [0, {cfg.num_items}) (or -1 for an empty slot)"
            )
        if cfg.layout == "full" and np.any(slots < 0):
            raise InvalidParameters("the full layout has no empty slots (-1)")
        return slots

    def retrieval_request(self, indices: np.ndarray) -> tuple[bytes, bytes]:
        out = self.retrieval_requests([self], [indices], _rng=self._rng)[0]
        if isinstance(out, Exception):
            raise out
        return out

    @classmethod
    def retrieval_requests(cls, users: Sequence[UserRole], indices: Sequence[np.ndarray], *,
                           _rng: RandomBytes | None = None) -> list[tuple[bytes, bytes] | Exception]:
        """The users' keys generated as one batch (one tree walk, one conversion, one
        serialization for all), from fresh OS randomness (``_rng``: a test's source); the
        users must be SecEmb users of one round with one relay setting."""
        mine = [u for u in users if isinstance(u, SecEmbUser)]
        first = mine[0] if mine else None
        if first is None or len(mine) != len(users) or any(
                (u.config, u.relay, u.verify) != (first.config, first.relay, first.verify) for u in mine):
            raise InvalidParameters("a batch of retrieval requests needs SecEmb users of one round")
        cfg, relay = first.config, first.relay
        out: list[tuple[bytes, bytes] | Exception | None] = [None] * len(users)
        ok: list[tuple[int, SecEmbUser, np.ndarray]] = []
        for i, (user, idx) in enumerate(zip(mine, indices, strict=True)):
            try:
                ok.append((i, user, user._slots(idx)))
            except (SecembError, TypeError) as exc:
                out[i] = exc
        alphas, placed = first._alphas(np.stack([s for _, _, s in ok]) if ok else np.zeros((0, cfg.slots), np.int64))
        for i, _, _ in (c for c, fits in zip(ok, placed, strict=True) if not fits):
            out[i] = InvalidParameters("an item was assigned to a bucket that does not hold it")
        ok = [c for c, fits in zip(ok, placed, strict=True) if fits]
        if ok:
            n, rng, params = len(ok), _rng or system_rng, key_params(cfg)
            slots = np.stack([s for _, _, s in ok])  # (n, S)
            alphas = alphas[placed]
            p0, p1, state = fss.gen_path(alphas.reshape(-1), params.domain_size, _rng=rng)
            real = slots >= 0
            # each real slot retrieves beta T_alpha for a secret uniform odd beta (verified
            # retrieval, docs/security.md); an empty bucket's payload stays 0
            betas = np.where(real, random_words(rng, real.shape, cfg.dtype) | cfg.dtype.type(1), cfg.dtype.type(0))
            cw = fss.convert_gen(state, betas.reshape(-1, 1), ring_bits=cfg.ring_bits, tag=RETRIEVAL_TAG)
            unmask = _inverse_odd(betas)  # what each user multiplies its rows by (0 stays 0)
            keys0 = fss.DPFKeys(p0, cw, params)
            msgs0 = keys0.to_bytes_split(n)
            # the keys' check correction words (verified uploads): the same for both servers
            size = checks_bytes(cfg, first.verify)
            checks = array_bytes(corrections(alphas.reshape(-1), state.leaf0, state.leaf1)) if size else b""
            if relay:
                direct = 2 * SEED_BYTES + MAC_KEY_BYTES
                secrets_ = rng(direct * n)
                roots1 = array_bytes(p1.roots)
                per_user = 16 * cfg.slots
            else:
                keys1 = fss.DPFKeys(p1, cw, params).to_bytes_split(n)
            for j, (i, user, _) in enumerate(ok):
                sl = slice(j * cfg.slots, (j + 1) * cfg.slots)
                # copies: a user keeps its own secret state, no view of the batch's (other users')
                user._state = fss.GenState(params.domain_size, state.leaf0[sl].copy(), state.leaf1[sl].copy())
                user._real, user._items, user._unmask = real[j].copy(), slots[j].copy(), unmask[j].copy()
                own_checks = checks[size * j : size * (j + 1)]
                msg0 = frame(NAME, "retrieval_request", 0, cfg.round_id, msgs0[j], own_checks)
                if not relay:
                    out[i] = (msg0, frame(NAME, "retrieval_request", 1, cfg.round_id, keys1[j], own_checks))
                    continue
                own = secrets_[direct * j : direct * (j + 1)]
                user._seeds = (own[:SEED_BYTES], own[SEED_BYTES : 2 * SEED_BYTES])
                user._mac_key = own[2 * SEED_BYTES :]
                # the digest of the exact bytes server 0 forwards (its parse re-serializes them
                # canonically: DPFKeys.shared_bytes of the same keys)
                digest = key_digest(keys0[sl].shared_bytes(), own_checks)
                out[i] = (msg0, frame(NAME, "retrieval_request", 1, cfg.round_id,
                                      roots1[per_user * j : per_user * (j + 1)], *user._seeds, user._mac_key, digest))
        done = cast("list[tuple[bytes, bytes] | Exception]", out)  # every entry is set above
        return [got if isinstance(got, Exception) else user._sending(got) for user, got in zip(mine, done, strict=True)]

    def _sending(self, messages: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
        """The request messages this device sends for the ones it made: the same for an honest
        device (a simulated malicious one rewrites them, :mod:`secemb.protocols.adversary`)."""
        return messages

    def retrieval_result(self, reply0: bytes, reply1: bytes | None) -> np.ndarray:
        """The requested rows, ring (S, width) (zero rows for empty buckets), once they pass
        their integrity check.

        Raises
        ------
        InvalidMessage: a reply is malformed.
        RetrievalTampered: a server altered its answer share (the rows' tags do not verify,
            or an empty bucket's answer is not zero); no rows are returned and the user does
            not upload this round.
        """
        cfg = self.config
        if self._state is None:
            raise ProtocolError("retrieval_result before retrieval_request")
        shape = (cfg.slots, cfg.width + tag_words(cfg))
        size = answer_bytes(cfg)
        body0 = open_message(reply0, NAME, "retrieval_reply", 0, cfg.round_id, size)
        first = read_array(body0, 0, cfg.dtype, shape)[0]
        if self.relay:
            if reply1 is not None:
                raise ProtocolError("with relay, server 1 sends no retrieval reply")
            assert self._seeds is not None  # drawn by a relay retrieval_request
            return self._verified(first - relay_prg(self._seeds[0], shape, cfg.dtype))
        if reply1 is None:
            raise ProtocolError("missing server 1's retrieval reply")
        body1 = open_message(reply1, NAME, "retrieval_reply", 1, cfg.round_id, size)
        return self._verified(reconstruct(first, read_array(body1, 0, cfg.dtype, shape)[0]))

    def _verified(self, answers: np.ndarray) -> np.ndarray:
        """The rows of the reconstructed ``answers`` (ring (S, width + T): ``beta_i T[alpha_i]``
        plus any server's offset), after checking every real slot's tag against its row
        (unmasked by ``beta_i^{-1}``) and every empty bucket's answer is zero."""
        cfg = self.config
        real, items, unmask = self._real, self._items, self._unmask
        assert real is not None and items is not None and unmask is not None  # set with _state
        unmasked = answers[real] * unmask[real][:, None]
        rows = unmasked[:, : cfg.width]
        if np.any(answers[~real]) or not np.array_equal(unmasked[:, cfg.width :],
                                                        row_tags(cfg.round_id, items[real], rows)):
            self._tampered = True
            raise RetrievalTampered(
                f"round {cfg.round_id}: the retrieved rows failed their integrity check, a server altered its "
                "answer share; the rows are discarded and this device does not upload"
            )
        out = np.zeros((cfg.slots, cfg.width), cfg.dtype)
        out[real] = rows
        return out

    def upload(self, rows: np.ndarray, dense: np.ndarray) -> tuple[bytes, bytes | None]:
        cfg = self.config
        if self._tampered:
            raise ProtocolError("the retrieval failed its integrity check: no upload this round")
        if self._state is None:
            raise ProtocolError("upload before retrieval_request")
        if rows.dtype != cfg.dtype or rows.shape != (cfg.slots, cfg.width):
            raise InvalidParameters(
                f"rows must be {cfg.dtype} of shape ({cfg.slots}, {cfg.width}), got {rows.dtype} {rows.shape}"
            )
        if dense.dtype != cfg.dtype or dense.shape != (cfg.dense_size,):
            raise InvalidParameters(
                f"dense must be {cfg.dtype} of shape ({cfg.dense_size},), got {dense.dtype} {dense.shape}"
            )
        assert self._real is not None  # set with _state
        if np.any(rows[~self._real]):
            raise InvalidParameters("rows of empty slots must be zero")
        cw = fss.convert_gen(self._state, rows, ring_bits=cfg.ring_bits, tag=AGGREGATION_TAG)
        self._state = None  # one upload per round
        cw_bytes = array_bytes(cw)
        if self.relay:
            assert self._seeds is not None and self._mac_key is not None  # drawn by a relay retrieval_request
            d1 = relay_prg(self._seeds[1], dense.shape, cfg.dtype)
            tag = upload_mac(self._mac_key, cfg.round_id, cw_bytes)
            return frame(NAME, "upload", 0, cfg.round_id, cw_bytes, array_bytes(dense - d1), tag), None
        d0, d1 = share(dense, _rng=self._rng)
        return (
            frame(NAME, "upload", 0, cfg.round_id, cw_bytes, array_bytes(d0)),
            frame(NAME, "upload", 1, cfg.round_id, cw_bytes, array_bytes(d1)),
        )

