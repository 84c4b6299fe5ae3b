"""SecEA's parties: clients (silos) and the relaying server, exchanging bytes only (wire.py).

Per deployment (once): every client sends HELLO (X25519 and Paillier public keys, signed with its
certified identity: :func:`hello_statement`); the server returns the DIRECTORY of every client's
keys, certificate and signature, and a client verifies every entry before it uses any key (so a
server that puts its own key in place of a peer's is caught, not trusted); the entity union
E = {e_1..e_M} is agreed through the PSU (the client is given it with :meth:`SecEAClient.set_union`).  Per round:

1. ``client.upload(round, rows)`` -> UPLOAD: Lagrange shares of the expanded embeddings for every
   other client and the queries for each of its own entities, XOR one-time-padded under a seed the
   two clients derive from X25519 (purpose bound to sender, recipient and round: no pad is reused).
2. ``server.relay(round, uploads)`` -> RELAY per client.
3. ``client.answer(relay)`` -> ANSWER: ``<q, y_v>`` for every requester (itself included),
   Paillier-encrypted under the requester's key.
4. ``server.mask(round, answers)`` -> RESULT per requester that answered: ``Enc(A)^r * Enc(psi + p*u)``.
5. ``client.finish(result)`` -> the averages of its own entities (Eq. 2), exactly.

**Dropouts.**  A client that stops after its upload has contributed its shares; the others still
decode if at least ``D = 2(K+T-1)+1`` clients answered (``D = N`` for odd N with the paper's K,
``N - 1`` for even N; a smaller K buys more tolerance).  With fewer answers the server raises
:class:`secemb.errors.ProtocolError` and the round is aborted for everyone; a client also refuses a
RESULT carrying fewer than D answers.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
from phe.paillier import PaillierPrivateKey, PaillierPublicKey

from secemb.errors import InvalidMessage, InvalidParameters, ProtocolError, check_int
from secemb.framing import HEADER_BYTES
from secemb.protocols.secea import coding, field, wire
from secemb.protocols.secea import paillier as phe_packing
from secemb.protocols.secea.coding import SecEAParams
from secemb.randomness import RandomBytes, random_words, system_rng
from secemb.secagg.identity import CERTIFICATE_BYTES, DEPLOYMENT_BYTES, SIGNATURE_BYTES, Identity, RosterPin, verify
from secemb.secagg.keys import KEY_BYTES, KeyPair, agree, check_public
from secemb.secagg.prg import mask_rows

__all__ = ["HELLO_DOMAIN", "SIGNED_BYTES", "SecEAClient", "SecEAServer", "hello_statement", "verify_hello"]

_PAD_PURPOSE = b"secemb/secea/v1/relay-pad"
#: the domain of a silo's signature over its HELLO keys (:func:`secemb.secagg.identity.signed_bytes`)
HELLO_DOMAIN = b"secemb/secea/v1/hello"
#: what signing adds to a HELLO and to each DIRECTORY entry: the silo's certificate, its signature
SIGNED_BYTES = CERTIFICATE_BYTES + SIGNATURE_BYTES


def hello_statement(deployment: bytes, setup_round: int, num_clients: int, index: int, x25519: bytes,
                    modulus: bytes) -> bytes:
    """What silo ``index`` signs (domain :data:`HELLO_DOMAIN`): ``deployment id (16) || set-up
    round (u64) || N (u16) || index (u16) || X25519 key (32) || Paillier n`` (big-endian, as in
    HELLO), all little-endian: its keys bound to the deployment, the set-up and its seat."""
    if len(deployment) != DEPLOYMENT_BYTES:
        raise InvalidParameters(f"a deployment id is {DEPLOYMENT_BYTES} bytes, got {len(deployment)}")
    return struct.pack(f"<{DEPLOYMENT_BYTES}sQHH", deployment, setup_round, num_clients, index) + x25519 + modulus


def verify_hello(pin: RosterPin, setup_round: int, num_clients: int, index: int, x25519: bytes, modulus: bytes,
                 proof: bytes) -> None:
    """Check silo ``index``'s HELLO ``proof`` (its certificate, then its signature: :data:`SIGNED_BYTES`)
    over its keys ``x25519`` and ``modulus`` in set-up ``setup_round`` (:func:`hello_statement`): the
    certificate of device ``index`` under ``pin`` (its deployment), the signature under the key it
    certifies.  What a silo checks of each DIRECTORY entry and the server of each HELLO.

    Raises
    ------
    InvalidMessage: the certificate or the signature does not verify (the error says which).
    """
    statement = hello_statement(pin.deployment, setup_round, num_clients, index, x25519, modulus)
    cert = pin.certificate(proof[:CERTIFICATE_BYTES], index)
    verify(cert.public, HELLO_DOMAIN, statement, proof[CERTIFICATE_BYTES:], f"silo {index}'s signature")


def _pad_seed(private: bytes, peer_public: bytes, round_id: int, sender: int, receiver: int) -> bytes:
    """The 16-byte seed of the pad on the message ``sender -> receiver`` in ``round_id``; the
    direction is in the purpose, so the two directions of a pair never share a pad."""
    purpose = _PAD_PURPOSE + struct.pack("<HH", sender, receiver)
    return agree(private, peer_public, purpose, round_id, (sender, receiver))


def _padded(seed: bytes, words: np.ndarray) -> bytes:
    """XOR of uint32 ``words`` (1-D) with the seed's pseudorandom words, as bytes."""
    return (words.astype(np.uint32) ^ mask_rows(seed, np.zeros(1, np.int64), words.size)[0]).astype("<u4").tobytes()


def _unpadded(seed: bytes, data: bytes) -> np.ndarray:
    words = np.frombuffer(data, dtype="<u4")
    plain = (words ^ mask_rows(seed, np.zeros(1, np.int64), words.size)[0]).astype(np.uint64)
    if np.any(plain >= field.P):
        raise InvalidMessage("a relayed word is not a field element (wrong pad or corrupted message)")
    return plain


class SecEAClient:
    """One silo.  ``entities`` are its own entity ids (int64, distinct).

    ``query_bound``: if given (``>= len(entities)``), every round sends exactly that many queries,
    the real ones and dummies for uniformly drawn entities whose answers are discarded, so the
    server learns the public bound instead of ``|E_n|`` (each dummy costs what a real query does).

    ``keys``: its X25519 private key (32 bytes) and Paillier private key, kept from an earlier
    run of this silo (:meth:`restore`); ``None``: fresh keys (``key_bits``).

    ``signed`` (default): the silo signs its HELLO keys with its certified identity
    (:mod:`secemb.secagg.identity`; device ``index`` of the deployment's roster) and takes a
    DIRECTORY only if every entry carries the certificate of its silo under the pinned roster and
    that silo's signature over its keys (:func:`hello_statement`).  ``identity``: given here or
    later (:meth:`sign_with`, before its HELLO).  ``signed=False`` is the paper's unsigned
    protocol, explicitly: a server that puts its own key in the directory in place of a peer's
    then removes the pads of this silo's blocks for that peer and reads its shares and queries.

    ``_rng`` (keyword-only, tests only) replaces the OS CSPRNG for every secret the client draws
    except the Paillier primes, which ``phe`` draws from the OS.
    """

    def __init__(self, index: int, params: SecEAParams, entities: np.ndarray, *, key_bits: int = 2048,
                 query_bound: int | None = None, keys: tuple[bytes, PaillierPrivateKey] | None = None,
                 signed: bool = True, identity: Identity | None = None, _rng: RandomBytes | None = None) -> None:
        if not 0 <= index < params.num_clients:
            raise InvalidParameters(f"client index must be in [0, {params.num_clients}), got {index}")
        ids = np.asarray(entities, dtype=np.int64)
        if ids.ndim != 1 or np.unique(ids).size != ids.size:
            raise InvalidParameters("entities must be a 1-D array of distinct ids")
        if query_bound is not None and query_bound < ids.size:
            raise InvalidParameters(f"query_bound must be >= the {ids.size} entities, got {query_bound}")
        self.index, self.params, self.entities, self.query_bound = index, params, ids, query_bound
        self.signed = signed
        self._identity: Identity | None = None
        self._rng = system_rng if _rng is None else _rng
        if keys is None:
            self._x25519 = KeyPair.generate(_rng=self._rng)
            self._paillier_public, self._paillier_private = phe_packing.generate_keypair(key_bits)
        else:
            self._x25519 = KeyPair.from_private(keys[0])
            self._paillier_public, self._paillier_private = phe_packing.PublicKey(keys[1].public_key), keys[1]
        self._directory: bytes | None = None
        self._unchecked: bytes | None = None  # a restored signed directory, checked once the identity is given
        self._setup_round = 0  # the set-up whose HELLO it signed (its statement names it)
        self._peers: dict[int, tuple[bytes, phe_packing.PublicKey]] = {}
        self._pools: dict[int, list[int]] = {}
        self._own: np.ndarray | None = None
        self._union: np.ndarray | None = None
        self._num_entities = 0
        self._round: tuple[int, str] | None = None
        self._kept: tuple[np.ndarray, np.ndarray] | None = None
        self._last_upload = -1  # the last round padded: a pad (keys, round, direction) is used once
        if identity is not None:
            self.sign_with(identity)

    def renewed(self) -> SecEAClient:
        """This silo as a new client (the same index, parameters, entities, ``query_bound``,
        ``signed`` and identity) with fresh keys of this client's size and no directory or union:
        what a new set-up starts from (its pads then differ from every pad of the old keys,
        whatever the round ids)."""
        return SecEAClient(self.index, self.params, self.entities, key_bits=self._paillier_public.key.n.bit_length(),
                           query_bound=self.query_bound, signed=self.signed, identity=self._identity, _rng=self._rng)

    @property
    def identity(self) -> Identity | None:
        """The identity it signs with (``None``: none given yet, or an unsigned client)."""
        return self._identity

    def sign_with(self, identity: Identity) -> None:
        """Take this silo's certified identity (e.g. its credentials'); a directory restored before
        it (:meth:`restore`) is verified now.

        Raises
        ------
        InvalidParameters: an unsigned client, the identity of another device, or a restored
        directory with an entry that does not verify (the client then holds no directory).
        """
        if not self.signed:
            raise InvalidParameters(f"client {self.index} is unsigned (signed=False): it takes no identity")
        if identity.user != self.index:
            raise InvalidParameters(f"client {self.index} was given the identity of device {identity.user}")
        self._identity = identity
        unchecked, self._unchecked = self._unchecked, None
        if unchecked is not None:
            try:
                self.receive_directory(unchecked)
            except InvalidMessage as exc:
                self._peers = {}
                raise InvalidParameters(f"SecEA silo state: {exc}") from None

    @property
    def set_up(self) -> bool:
        """Whether the directory (verified, if signed) and the union are set (the client can take
        part in rounds)."""
        return self._own is not None and self._directory is not None

    @property
    def paillier_key(self) -> phe_packing.PublicKey:
        """This client's Paillier public key (what its answers are encrypted under)."""
        return self._paillier_public

    def precompute(self, counts: dict[int, int]) -> None:
        """Offline phase: ``counts[n]`` encryption randomizers under requester n's key (its
        queries times its ciphertexts per answer), used by :meth:`answer` before fresh ones."""
        for n, count in counts.items():
            self._pools.setdefault(n, []).extend(self._peers[n][1].obfuscators(count, self._rng))

    def hello(self, setup_round: int = 0) -> bytes:
        """HELLO for the set-up round ``setup_round``: this client's public keys, signed:
        ``X25519 key (32) || certificate (120) || signature (64) || Paillier n``; unsigned:
        ``X25519 key || Paillier n``.

        The round is kept: the directory is verified for it (:meth:`receive_directory`); a
        directory of another set-up that did not complete (no union) is dropped.

        Raises
        ------
        ProtocolError: a signed client without its identity (:meth:`sign_with`), or a client set
        up in another set-up (a new one takes new keys: :meth:`renewed`).
        """
        setup_round = check_int("setup_round", setup_round, low=0, high=2**64 - 1)
        if setup_round != self._setup_round:
            if self.set_up:
                raise ProtocolError(f"silo {self.index} was set up in set-up {self._setup_round}: set-up "
                                    f"{setup_round} takes new keys")
            self._directory = self._unchecked = None
            self._peers = {}
        modulus = self._paillier_public.to_bytes()
        proof = b""
        if self.signed:
            if self._identity is None:
                raise ProtocolError(f"silo {self.index} has no identity to sign its keys with")
            pin = self._identity.pin
            statement = hello_statement(pin.deployment, setup_round, self.params.num_clients, self.index,
                                        self._x25519.public, modulus)
            proof = self._identity.certificate.to_bytes() + self._identity.sign(HELLO_DOMAIN, statement)
        self._setup_round = setup_round
        header = wire.Header(wire.HELLO, 0, self.index, wire.SERVER)
        return wire.pack(header, self._x25519.public + proof + modulus)

    def receive_directory(self, data: bytes) -> None:
        """Store every client's public keys from the server's DIRECTORY, a signed client only
        after it verified every entry: the certificate of silo ``i`` under its pinned roster (this
        deployment, device ``i``) and silo ``i``'s signature over the keys the entry gives it
        (:func:`hello_statement`, this client's set-up round).

        Raises
        ------
        InvalidMessage: malformed, without this client's own keys, with a key the deployment
        never admits (the server refuses such a HELLO: :class:`~secemb.protocols.secea.staged.SecEANode`):
        an X25519 key no agreement can use, or a Paillier modulus of another size than this
        client's (every key of a deployment has one size; a larger one would make this client's
        answers under it cost what that size costs, without bound), or (signed) an entry whose
        certificate or signature does not verify -- the error names the silo and says the server
        deviated from the protocol.  Nothing is stored then.
        ProtocolError: a signed client without its identity.
        """
        if self.signed and self._identity is None:
            raise ProtocolError(f"silo {self.index} has no identity to verify the directory with")
        peers = self._read_directory(data)
        if self._identity is not None:
            self._verify(peers)
        self._peers, self._directory = {i: (x, key) for i, (x, key, _) in peers.items()}, bytes(data)

    def _read_directory(self, data: bytes) -> dict[int, tuple[bytes, phe_packing.PublicKey, bytes]]:
        """The entries of a DIRECTORY message (keys, certificate and signature) with every check
        of :meth:`receive_directory` but the signatures."""
        _, body = wire.unpack(data, wire.DIRECTORY, 0, self.index)
        peers = _parse_directory(body, self.params.num_clients, self.signed)
        x25519, paillier_key, _ = peers[self.index]
        if x25519 != self._x25519.public or paillier_key.key.n != self._paillier_public.key.n:
            raise InvalidMessage("the directory does not carry this client's own keys")
        bits = self._paillier_public.key.n.bit_length()
        for i, (x, key, _) in peers.items():
            check_public(x)
            if key.key.n.bit_length() != bits:
                raise InvalidMessage(f"the directory gives client {i} a {key.key.n.bit_length()}-bit Paillier "
                                     f"modulus, not the deployment's {bits} bits")
        return peers

    def _verify(self, peers: dict[int, tuple[bytes, phe_packing.PublicKey, bytes]]) -> None:
        """Every entry's certificate and signature (:meth:`receive_directory`), in silo order."""
        assert self._identity is not None
        pin = self._identity.pin
        for i, (x25519, key, proof) in sorted(peers.items()):
            try:
                verify_hello(pin, self._setup_round, self.params.num_clients, i, x25519, key.to_bytes(), proof)
            except InvalidMessage as exc:
                raise InvalidMessage(f"the directory gives silo {i} keys not signed by silo {i} ({exc}): the server "
                                     "deviated from the protocol") from None

    def set_union(self, union: np.ndarray) -> None:
        """Fix the entity union ``E`` (sorted, distinct int64 ids; the PSU's output)."""
        union = np.asarray(union, dtype=np.int64)
        if union.ndim != 1 or union.size == 0 or np.any(np.diff(union) <= 0):
            raise InvalidParameters("the union must be a non-empty sorted array of distinct ids")
        pos = np.searchsorted(union, self.entities)
        if np.any(pos >= union.size) or np.any(union[np.minimum(pos, union.size - 1)] != self.entities):
            raise InvalidParameters("the union does not contain all of this client's entities")
        self._own, self._num_entities, self._union = pos.astype(np.int64), int(union.size), union.copy()

    def answer_bytes(self, kind: int) -> int:
        """The longest ``kind`` message (:data:`~secemb.protocols.secea.wire.DIRECTORY`,
        ``RELAY`` or ``RESULT``) an honest server sends this client, from the public parameters
        (N clients, width ``w``), its own key (every key of a deployment has its size: the
        server refuses another) and, for a round's messages, the union's size ``M``:

        * DIRECTORY: ``32 + 2 + N (2 + 32 + 2 + bytes(n))``, signed ``+ N (120 + 64)``;
        * RELAY: ``32 + 8 + (N - 1)(6 + 4 (M w + M M))`` (a sender's queries are at most ``M``);
        * RESULT: ``32 + 8 + N (2 + E C ciphertexts)``, ``E`` this client's queries, ``C`` its
          ciphertexts per answer.

        Raises
        ------
        ProtocolError: a round's message before the union is set.  ValueError: another kind.
        """
        p, key = self.params, self._paillier_public
        if kind == wire.DIRECTORY:
            proof = SIGNED_BYTES if self.signed else 0
            return HEADER_BYTES + 2 + p.num_clients * (2 + KEY_BYTES + proof + 2 + len(key.to_bytes()))
        if kind not in (wire.RELAY, wire.RESULT):
            raise ValueError(f"no SecEA server message of kind {kind}")
        if self._own is None:
            raise ProtocolError("a round's answer before the union is set")
        m, w = self._num_entities, p.width
        if kind == wire.RELAY:
            return HEADER_BYTES + 8 + (p.num_clients - 1) * (6 + 4 * (m * w + m * m))
        queries = self.query_bound or self._own.size
        return HEADER_BYTES + 8 + p.num_clients * (2 + queries * key.chunks(w) * key.ciphertext_bytes)

    @property
    def last_upload(self) -> int:
        """The last round this client padded an upload for (-1: none)."""
        return self._last_upload

    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """What :meth:`restore` needs, once the set-up is over: its two private keys (secrets),
        the DIRECTORY message, the set-up round it signed its keys for, the union and the last
        round it padded.

        Raises
        ------
        ProtocolError: before the directory and the union are set.
        """
        if self._own is None or self._directory is None or self._union is None:
            raise ProtocolError("no directory and union yet: nothing to keep")
        private = self._paillier_private
        meta = {"x25519": self._x25519.private.hex(), "paillier_p": format(private.p, "x"),
                "paillier_q": format(private.q, "x"), "last_upload": self._last_upload,
                "setup_round": self._setup_round}
        return meta, {"directory": np.frombuffer(self._directory, np.uint8), "union": self._union.copy()}

    @classmethod
    def restore(cls, index: int, params: SecEAParams, entities: np.ndarray, meta: Mapping[str, Any],
                arrays: Mapping[str, np.ndarray], *, key_bits: int, signed: bool = True,
                identity: Identity | None = None, _rng: RandomBytes | None = None) -> SecEAClient:
        """The client :meth:`state` described, checked in full: keys of ``key_bits`` bits that
        the directory lists as this client's, a union holding its ``entities``.  A signed
        client's directory is verified with ``identity``, or when it is given (:meth:`sign_with`):
        until then the client takes part in nothing.

        Raises
        ------
        InvalidParameters: any part missing, malformed or inconsistent, or an entry of the
        directory that ``identity`` does not verify.
        """
        try:
            x25519 = bytes.fromhex(str(meta["x25519"]))
            p, q = int(str(meta["paillier_p"]), 16), int(str(meta["paillier_q"]), 16)
            last, setup_round = meta["last_upload"], meta["setup_round"]
        except (KeyError, ValueError, TypeError):
            raise InvalidParameters("SecEA silo state: keys missing or malformed") from None
        last = check_int("SecEA silo state: last_upload", last, low=-1)
        setup_round = check_int("SecEA silo state: setup_round", setup_round, low=0, high=2**64 - 1)
        if p == q or min(p, q) < 3 or (p * q).bit_length() != key_bits:
            raise InvalidParameters(f"SecEA silo state: the Paillier key is not a {key_bits}-bit key of two primes")
        try:
            private = PaillierPrivateKey(PaillierPublicKey(p * q), p, q)
        except (ValueError, ArithmeticError):
            raise InvalidParameters("SecEA silo state: the Paillier key is malformed") from None
        directory, union = arrays.get("directory"), arrays.get("union")
        if not isinstance(directory, np.ndarray) or directory.dtype != np.uint8 or directory.ndim != 1:
            raise InvalidParameters("SecEA silo state: the directory must be a uint8 vector")
        if not isinstance(union, np.ndarray) or union.dtype != np.int64 or union.ndim != 1:
            raise InvalidParameters("SecEA silo state: the union must be an int64 vector")
        client = cls(index, params, entities, key_bits=key_bits, keys=(x25519, private), signed=signed, _rng=_rng)
        client._setup_round = setup_round
        raw = directory.tobytes()
        try:
            client._read_directory(raw)
        except InvalidMessage as exc:
            raise InvalidParameters(f"SecEA silo state: {exc}") from None
        if not signed:
            client.receive_directory(raw)
        else:
            client._unchecked = raw
            if identity is not None:
                client.sign_with(identity)
        client.set_union(union)
        client._last_upload = last
        return client

    def upload(self, round_id: int, rows: np.ndarray) -> bytes:
        """UPLOAD for ``round_id``: ``rows`` (float, shape ``(len(entities), d)``) are this
        client's local embeddings, in the order of ``entities``.

        Raises
        ------
        ProtocolError
            Before the set-up, or ``round_id`` not after the last round this client uploaded in:
            the pads are bound to (keys, round, direction), so a second upload of a round -- a
            server that opens a round id again, e.g. after its restart -- would reuse them.
        """
        if self._own is None or len(self._peers) != self.params.num_clients:
            raise ProtocolError("upload before the directory and the union are set")
        if round_id <= self._last_upload:
            raise ProtocolError(f"round {round_id} is not after round {self._last_upload}, the last this client "
                                "uploaded in: its pads are used once")
        p, m, own = self.params, self._num_entities, self._own
        shares = coding.share(p, coding.expand(p, m, own, rows), self._rng)
        dummies = random_words(self._rng, ((self.query_bound or own.size) - own.size,), np.uint64) % np.uint64(m)
        targets = np.concatenate([own, dummies.astype(np.int64)])
        asks = coding.queries(p, targets, m, self._rng)
        self._kept = (shares[self.index], asks[self.index])
        body = [struct.pack("<IHIH", m, p.width, targets.size, p.num_clients - 1)]
        for v in range(p.num_clients):
            if v != self.index:
                seed = _pad_seed(self._x25519.private, self._peers[v][0], round_id, self.index, v)
                body += [struct.pack("<H", v), _padded(seed, np.concatenate([shares[v].ravel(), asks[v].ravel()]))]
        self._round, self._last_upload = (round_id, "uploaded"), round_id
        return wire.pack(wire.Header(wire.UPLOAD, round_id, self.index, wire.SERVER), b"".join(body))

    def answer(self, data: bytes) -> bytes:
        """ANSWER to the server's RELAY: encrypted ``<q_{n,v,e}, y_v>`` for every requester ``n``."""
        if self._round is None or self._round[1] != "uploaded" or self._kept is None:
            raise ProtocolError("answer before upload")
        round_id = self._round[0]
        _, body = wire.unpack(data, wire.RELAY, round_id, self.index)
        p, m, w = self.params, self._num_entities, self.params.width
        rd = wire.Reader(body)
        if rd.u32() != m or rd.u16() != w:
            raise InvalidMessage("RELAY dimensions differ from this client's union and parameters")
        own_share, own_query = self._kept
        stored, asks = own_share.copy(), {self.index: own_query}
        for _ in range(rd.u16()):
            n, e = rd.u16(), rd.u32()
            if n >= p.num_clients or n == self.index or n in asks or e > m:
                raise InvalidMessage(f"RELAY block from sender {n} with {e} queries refused")
            seed = _pad_seed(self._x25519.private, self._peers[n][0], round_id, n, self.index)
            words = _unpadded(seed, rd.take(4 * (m * w + e * m)))
            stored = (stored + words[: m * w].reshape(m, w)) % np.uint64(field.P)
            asks[n] = words[m * w :].reshape(e, m)
        rd.done()
        body_out = [struct.pack("<H", len(asks))]
        for n in sorted(asks):
            key = self._peers[n][1]
            cts = key.encrypt(coding.answer(asks[n], stored), self._rng, self._pools.get(n))
            size = key.ciphertext_bytes
            body_out.append(struct.pack("<HIH", n, asks[n].shape[0], key.chunks(w)))
            body_out += [c.to_bytes(size, "big") for c in cts]
        self._round = (round_id, "answered")
        return wire.pack(wire.Header(wire.ANSWER, round_id, self.index, wire.SERVER), b"".join(body_out))

    def finish(self, data: bytes) -> np.ndarray:
        """The averages (float64, shape ``(len(entities), d)``) from the server's RESULT.

        Raises
        ------
        ProtocolError
            If fewer than ``2(K+T-1)+1`` answers arrived (the round is aborted).
        """
        if self._round is None or self._round[1] != "answered" or self._own is None:
            raise ProtocolError("finish before answer")
        _, body = wire.unpack(data, wire.RESULT, self._round[0], self.index)
        key, p, e = self._paillier_public, self.params, self.query_bound or self._own.size
        rd = wire.Reader(body)
        if rd.u32() != e or rd.u16() != key.chunks(p.width):
            raise InvalidMessage("RESULT dimensions differ from this client's queries")
        answered, values = [], []
        size, count = key.ciphertext_bytes, e * key.chunks(p.width)
        for _ in range(rd.u16()):
            v = rd.u16()
            if v >= p.num_clients or v in answered:
                raise InvalidMessage(f"RESULT names answerer {v} twice or out of range")
            cts = [int.from_bytes(rd.take(size), "big") for _ in range(count)]
            plain = phe_packing.decrypt(self._paillier_private, cts)
            answered.append(v)
            values.append(phe_packing.unpack(plain, e, p.width, key.slots))
        rd.done()
        self._round = None
        order = np.argsort(answered)
        decoded = coding.decode(p, np.stack([values[i] for i in order]), [answered[i] for i in order])
        return coding.decode_average(p, decoded[: self._own.size])[1]  # dummy answers discarded


class SecEAServer:
    """The relaying server: routes padded shares and queries, masks the encrypted answers.

    It learns the number of entities each client retrieves (the count of its queries) and who
    dropped out; nothing about which entities or their embeddings.  ``signed`` (default): the
    clients' HELLOs carry a certificate and signature, which the DIRECTORY relays (the clients
    verify them; here only their length is checked -- the node checks them under the roster at
    receipt when it has the pin: :class:`~secemb.protocols.secea.staged.SecEANode`).  ``_rng`` as for the client.
    """

    def __init__(self, params: SecEAParams, *, signed: bool = True, _rng: RandomBytes | None = None) -> None:
        self.params, self.signed = params, signed
        self._rng = system_rng if _rng is None else _rng
        self._keys: dict[int, phe_packing.PublicKey] = {}
        self._pools: dict[int, list[int]] = {}
        self._pending: dict[int, int] = {}
        self._round: int | None = None

    def read_hello(self, client: int, data: bytes, key_bits: int | None = None) -> tuple[bytes, phe_packing.PublicKey,
                                                                                       bytes]:
        """Client ``client``'s HELLO checked in full: its X25519 key, Paillier public key and
        (signed) certificate and signature, as they are (``b""`` unsigned).  ``key_bits``: the
        deployment's modulus size, checked by the modulus's length before the key is built.

        Raises
        ------
        InvalidMessage
            Malformed (a signed one too short for its certificate and signature), a round id
            other than 0, a low-order X25519 key, a modulus longer than
            :data:`~secemb.protocols.secea.paillier.MAX_KEY_BITS` or (``key_bits``) of another
            length, or sent by another client.
        """
        header, payload = wire.unpack(data, wire.HELLO, 0, wire.SERVER)
        proof = SIGNED_BYTES if self.signed else 0
        if header.sender != client or len(payload) <= KEY_BYTES + proof:
            raise InvalidMessage(f"HELLO of client {client} refused")
        return (check_public(payload[:KEY_BYTES]),
                phe_packing.public_key_from_bytes(payload[KEY_BYTES + proof:], key_bits),
                payload[KEY_BYTES:KEY_BYTES + proof])

    def directory(self, hellos: dict[int, bytes]) -> dict[int, bytes]:
        """DIRECTORY for every client from all N HELLO messages (each entry: id, X25519 key,
        signed: the certificate and signature, then the modulus)."""
        n = self.params.num_clients
        if sorted(hellos) != list(range(n)):
            raise ProtocolError(f"setup needs HELLO from all {n} clients, got {sorted(hellos)}")
        body = [struct.pack("<H", n)]
        for i in range(n):
            x25519, key, proof = self.read_hello(i, hellos[i])
            self._keys[i] = key
            modulus = key.to_bytes()
            body += [struct.pack("<H", i), x25519, proof, struct.pack("<H", len(modulus)), modulus]
        directory = b"".join(body)
        return {i: wire.pack(wire.Header(wire.DIRECTORY, 0, wire.SERVER, i), directory) for i in range(n)}

    def precompute(self, counts: dict[int, int]) -> None:
        """Offline phase: ``counts[n]`` encryption randomizers under client n's key for the
        noise terms of :meth:`mask` (N times its queries times its ciphertexts per answer)."""
        for n, count in counts.items():
            self._pools.setdefault(n, []).extend(self._keys[n].obfuscators(count, self._rng))

    def read_upload(self, round_id: int, client: int, data: bytes) -> tuple[int, int, list[tuple[int, bytes]]]:
        """Client ``client``'s UPLOAD of ``round_id`` checked in full: ``(M, |E_n|, blocks)``,
        ``blocks`` the ``(recipient, padded words)`` pairs, one per other client.

        Raises
        ------
        InvalidMessage
            Malformed, another round or sender, dimensions off the parameters, a recipient
            out of range, repeated or the sender itself.
        """
        p = self.params
        header, body = wire.unpack(data, wire.UPLOAD, round_id, wire.SERVER)
        rd = wire.Reader(body)
        m, w, e, count = rd.u32(), rd.u16(), rd.u32(), rd.u16()
        if header.sender != client or w != p.width or e > m or count != p.num_clients - 1:
            raise InvalidMessage(f"UPLOAD of client {client} refused (dimensions)")
        blocks: list[tuple[int, bytes]] = []
        for _ in range(count):
            v = rd.u16()
            block = rd.take(4 * (m * w + e * m))
            if v >= p.num_clients or v == client or any(v == u for u, _ in blocks):
                raise InvalidMessage(f"UPLOAD of client {client} addresses client {v}")
            blocks.append((v, block))
        rd.done()
        return m, e, blocks

    def relay(self, round_id: int, uploads: dict[int, bytes]) -> dict[int, bytes]:
        """RELAY for every uploader: the padded blocks addressed to it by the other uploaders."""
        if not self._keys:
            raise ProtocolError("relay before setup")
        if self._round is not None and round_id <= self._round:
            raise ProtocolError(f"round {round_id} is not after round {self._round}")
        read = {n: self.read_upload(round_id, n, data) for n, data in sorted(uploads.items())}
        if len({m for m, _, _ in read.values()}) > 1:
            raise InvalidMessage("UPLOADs of different union sizes refused")
        blocks: dict[int, list[bytes]] = {v: [] for v in uploads}
        for n, (_, e, parts) in read.items():
            for v, block in parts:
                if v in blocks:
                    blocks[v].append(struct.pack("<HI", n, e) + block)
        self._pending = {n: e for n, (_, e, _) in read.items()}
        self._round = round_id
        head = struct.pack("<IH", next(iter(read.values()))[0] if read else 0, self.params.width)
        return {
            v: wire.pack(wire.Header(wire.RELAY, round_id, wire.SERVER, v),
                         head + struct.pack("<H", len(parts)) + b"".join(parts))
            for v, parts in blocks.items()
        }

    def read_answer(self, round_id: int, client: int, data: bytes) -> dict[int, list[int]]:
        """Client ``client``'s ANSWER to the RELAY of ``round_id`` checked in full: its
        ciphertexts per requester (every uploader of the round, once each).

        Raises
        ------
        ProtocolError
            No round ``round_id`` relayed.
        InvalidMessage
            Malformed, another sender, a requester block off what the requester uploaded, or a
            ciphertext outside ``(0, n^2)`` of the requester's key.
        """
        if round_id != self._round or not self._pending:
            raise ProtocolError(f"no round {round_id} in progress")
        p = self.params
        header, body = wire.unpack(data, wire.ANSWER, round_id, wire.SERVER)
        rd = wire.Reader(body)
        if header.sender != client or rd.u16() != len(self._pending):
            raise InvalidMessage(f"ANSWER of client {client} refused (requesters)")
        out: dict[int, list[int]] = {}
        for _ in range(len(self._pending)):
            n, e, c = rd.u16(), rd.u32(), rd.u16()
            key = self._keys.get(n)
            if key is None or n in out or self._pending.get(n) != e or c != key.chunks(p.width):
                raise InvalidMessage(f"ANSWER of client {client} refused (block for {n})")
            cts = [int.from_bytes(rd.take(key.ciphertext_bytes), "big") for _ in range(e * c)]
            n2 = key.key.nsquare
            if not all(0 < ct < n2 for ct in cts):  # refused at receipt: at the mask step it would abort the round
                raise InvalidMessage(f"ANSWER of client {client} refused (a ciphertext for {n} outside (0, n^2))")
            out[n] = cts
        rd.done()
        return out

    def mask(self, round_id: int, answers: dict[int, bytes]) -> dict[int, bytes]:
        """RESULT for every client that uploaded and answered, from the ANSWER messages that
        arrived (a missing one is a client that dropped out after sharing).

        Raises
        ------
        ProtocolError
            Fewer than ``2(K+T-1)+1`` answers: the round is aborted.
        """
        if round_id != self._round:
            raise ProtocolError(f"no round {round_id} in progress")
        p = self.params
        answered = sorted(v for v in answers if v in self._pending)
        if len(answered) < p.needed_answers:
            self._pending = {}
            raise ProtocolError(
                f"round {round_id} aborted: {len(answered)} of {p.num_clients} clients answered, "
                f"{p.needed_answers} = 2(K+T-1)+1 are needed"
            )
        per_requester: dict[int, dict[int, list[int]]] = {n: {} for n in answered}
        for v in answered:
            for n, cts in self.read_answer(round_id, v, answers[v]).items():
                if n in per_requester:
                    per_requester[n][v] = cts
        out = {}
        for n, by_answerer in per_requester.items():
            key, e = self._keys[n], self._pending[n]
            r, psi = coding.server_noise(p, e, self._rng)
            parts = [struct.pack("<IHH", e, key.chunks(p.width), len(by_answerer))]
            for v in sorted(by_answerer):
                masked = key.mask(by_answerer[v], r, psi[v], self._rng, self._pools.get(n))
                parts += [struct.pack("<H", v)] + [c.to_bytes(key.ciphertext_bytes, "big") for c in masked]
            out[n] = wire.pack(wire.Header(wire.RESULT, round_id, wire.SERVER, n), b"".join(parts))
        self._pending = {}
        return out


def _parse_directory(body: bytes, n: int, signed: bool) -> dict[int, tuple[bytes, phe_packing.PublicKey, bytes]]:
    """Per client: its X25519 key, Paillier key and (``signed``) certificate and signature,
    :data:`SIGNED_BYTES`, unchecked (``b""`` unsigned)."""
    rd = wire.Reader(body)
    if rd.u16() != n:
        raise InvalidMessage(f"DIRECTORY must list {n} clients")
    peers = {}
    for i in range(n):
        if rd.u16() != i:
            raise InvalidMessage("DIRECTORY clients out of order")
        x25519 = rd.take(KEY_BYTES)
        proof = rd.take(SIGNED_BYTES) if signed else b""
        peers[i] = (x25519, phe_packing.public_key_from_bytes(rd.take(rd.u16())), proof)
    rd.done()
    return peers
