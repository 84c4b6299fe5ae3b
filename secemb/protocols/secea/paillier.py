"""Paillier encryption of packed field vectors for SecEA's answers (paper Eq. 13), on ``phe``.

``python-paillier`` (``phe``) supplies key generation, CRT decryption and the modular arithmetic
(gmpy2 when installed); this module packs several field elements into one plaintext, applies the
server's masking homomorphically, and encrypts as ``phe`` does (``g = n + 1``: ``(1 + n m) r^n mod
n^2``) with the randomizer ``r^n`` optionally computed ahead (:meth:`PublicKey.obfuscators`, the
paper's offline phase).

**Slots and statistical masking.**  A client decrypts ``r*A + psi`` as an *integer* in ``Z_n``,
not as an element of Z_p: the paper's field masking would then leak the carry
``floor((r*A + psi)/p)``, i.e. the top bits of ``r*A``.  The server therefore adds ``p*u`` with
``u`` uniform in ``[0, 2^(sigma+31))``: the residue mod p is unchanged and the integer is within
statistical distance ``2^-sigma`` of one that depends on the residue alone (``sigma`` =
:data:`SIGMA` = 40).  A slot's value is below ``p^2 + p + 2^(sigma+62) < 2^(sigma+63)``, so a slot is
:data:`SLOT_BITS` = 103 bits and nothing carries between slots; a 2048-bit key holds 19 slots.
The paper's condition "modulus > p^2 + p" is the one-slot, no-flooding case of this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from phe import paillier
from phe.util import mulmod, powmod

from secemb.errors import InvalidMessage, InvalidParameters
from secemb.protocols.secea.field import P
from secemb.randomness import RandomBytes

__all__ = ["SIGMA", "SLOT_BITS", "MIN_KEY_BITS", "MAX_KEY_BITS", "PublicKey", "generate_keypair",
           "public_key_from_bytes"]

SIGMA = 40
"""Statistical security of the integer flooding (bits)."""
SLOT_BITS = SIGMA + 63
"""Bits per packed field element."""
MIN_KEY_BITS = 1024
"""Smallest modulus accepted (tests use it; the default of the parties is 2048)."""
MAX_KEY_BITS = 16384
"""Largest modulus accepted: a longer one is refused by its length, before it is read as a number
(building a key squares its modulus: seconds for a megabyte; finding S41-R1)."""

_SLOT_MASK = (1 << SLOT_BITS) - 1


@dataclass(frozen=True)
class PublicKey:
    """A Paillier public key with SecEA's packing (``g = n + 1``)."""

    key: paillier.PaillierPublicKey

    @property
    def slots(self) -> int:
        """Field elements per ciphertext: ``floor((bits(n) - 1) / SLOT_BITS)``."""
        return (self.key.n.bit_length() - 1) // SLOT_BITS

    @property
    def ciphertext_bytes(self) -> int:
        """Bytes of one ciphertext on the wire (an element of ``Z_{n^2}``, big-endian)."""
        return (self.key.nsquare.bit_length() + 7) // 8

    def to_bytes(self) -> bytes:
        """``n`` big-endian, ``ceil(bits(n)/8)`` bytes."""
        return self.key.n.to_bytes((self.key.n.bit_length() + 7) // 8, "big")

    def chunks(self, width: int) -> int:
        """Ciphertexts per answer vector of ``width`` elements."""
        return -(-width // self.slots)

    def _random_unit(self, rng: RandomBytes) -> int:
        n = self.key.n
        while True:
            r = int.from_bytes(rng((n.bit_length() + 7) // 8 + 16), "big") % n
            if r > 1:
                return r

    def obfuscators(self, count: int, rng: RandomBytes) -> list[int]:
        """``count`` encryption randomizers ``r^n mod n^2`` (``r`` from ``rng``): the expensive
        part of an encryption, independent of the message, so it can be computed offline (the
        paper's offline phase, Sec. IV-B).  Each is used once."""
        n, n2 = self.key.n, self.key.nsquare
        return [powmod(self._random_unit(rng), n, n2) for _ in range(count)]

    def _encrypt(self, m: int, rng: RandomBytes, pool: list[int] | None) -> int:
        """``(1 + n m) * r^n mod n^2`` (g = n + 1, as ``phe``), the randomizer from ``pool`` when
        one is left, else fresh."""
        obf = pool.pop() if pool else powmod(self._random_unit(rng), self.key.n, self.key.nsquare)
        return mulmod(1 + self.key.n * m, obf, self.key.nsquare)

    def encrypt(self, values: np.ndarray, rng: RandomBytes, pool: list[int] | None = None) -> list[int]:
        """Encrypt field elements (uint64, shape ``(E, w)``) packed ``slots`` to a ciphertext:
        returns ``E * chunks(w)`` ciphertexts, row-major; randomizers from ``pool``
        (:meth:`obfuscators`, consumed) while it lasts, else fresh from ``rng``."""
        return [self._encrypt(m, rng, pool) for m in _pack(values, self.slots)]

    def mask(self, ciphertexts: list[int], factors: np.ndarray, noise: np.ndarray, rng: RandomBytes,
             pool: list[int] | None = None) -> list[int]:
        """The server's step (Eq. 13): ``Enc(A)^r * Enc(psi + p*u)`` slot-wise.

        ``ciphertexts``: ``E * chunks(w)`` encryptions of answers; ``factors``: the ``E`` values of
        ``r`` (uint64, in Z_p^*); ``noise``: ``psi`` at this answerer's alpha, shape ``(E, w)``.
        Fresh encryption randomness (from ``pool`` while it lasts) re-randomizes each result, so
        the answerer's randomness does not carry over to the client that decrypts.
        """
        width = noise.shape[1]
        chunks = self.chunks(width)
        if len(ciphertexts) != noise.shape[0] * chunks:
            raise InvalidMessage(f"expected {noise.shape[0] * chunks} ciphertexts, got {len(ciphertexts)}")
        flood_bytes = (SIGMA + 31 + 7) // 8
        bound = 1 << (SIGMA + 31)
        floods = np.array(
            [int.from_bytes(rng(flood_bytes), "big") % bound * P for _ in range(noise.size)], dtype=object
        ).reshape(noise.shape)
        plain = _pack(noise.astype(object) + floods, self.slots)
        n2 = self.key.nsquare
        out = []
        for i, (ct, m) in enumerate(zip(ciphertexts, plain, strict=True)):
            if not 0 < ct < n2:
                raise InvalidMessage("a ciphertext is out of range for the recipient's key")
            scaled = powmod(ct, int(factors[i // chunks]), n2)
            out.append(mulmod(scaled, self._encrypt(m, rng, pool), n2))
        return out


def _pack(values: np.ndarray, slots: int) -> list[int]:
    """Rows of non-negative integers (shape ``(E, w)``, any integer or object dtype), ``slots``
    per plaintext of ``SLOT_BITS`` bits each: ``E * ceil(w / slots)`` ints, row-major."""
    e, w = values.shape
    return [
        sum(int(values[i, j]) << (SLOT_BITS * (j - c * slots)) for j in range(c * slots, min(w, (c + 1) * slots)))
        for i in range(e)
        for c in range(-(-w // slots))
    ]


def unpack(plaintexts: list[int], count: int, width: int, slots: int) -> np.ndarray:
    """Field elements (uint64, shape ``(count, width)``, reduced mod p) from decrypted packs."""
    chunks = -(-width // slots)
    if len(plaintexts) != count * chunks:
        raise InvalidMessage(f"expected {count * chunks} plaintexts, got {len(plaintexts)}")
    out = np.empty((count, width), dtype=np.uint64)
    for i in range(count):
        for j in range(width):
            out[i, j] = (plaintexts[i * chunks + j // slots] >> (SLOT_BITS * (j % slots)) & _SLOT_MASK) % P
    return out


def generate_keypair(bits: int = 2048) -> tuple[PublicKey, paillier.PaillierPrivateKey]:
    """A fresh Paillier key pair of ``bits``-bit modulus (``phe``; primes from the OS CSPRNG)."""
    if bits < MIN_KEY_BITS:
        raise InvalidParameters(f"Paillier modulus must be >= {MIN_KEY_BITS} bits, got {bits}")
    public, private = paillier.generate_paillier_keypair(n_length=bits)
    return PublicKey(public), private


def public_key_from_bytes(data: bytes, bits: int | None = None) -> PublicKey:
    """Parse :meth:`PublicKey.to_bytes`; refuses a modulus under :data:`MIN_KEY_BITS` or an even one,
    and, by its length before it is read, one of more than :data:`MAX_KEY_BITS` bits or (``bits``)
    of another length than a ``bits``-bit modulus's ``ceil(bits / 8)`` bytes."""
    most = -(-MAX_KEY_BITS // 8) if bits is None else -(-bits // 8)
    if len(data) > most or (bits is not None and len(data) != most):
        raise InvalidMessage(f"Paillier modulus refused ({len(data)} bytes; "
                             + (f"at most {most})" if bits is None else f"a {bits}-bit one has {most})"))
    n = int.from_bytes(data, "big")
    if n.bit_length() < MIN_KEY_BITS or n % 2 == 0:
        raise InvalidMessage(f"Paillier modulus refused ({n.bit_length()} bits, must be odd and >= {MIN_KEY_BITS})")
    return PublicKey(paillier.PaillierPublicKey(n))


def decrypt(private: paillier.PaillierPrivateKey, ciphertexts: list[int]) -> list[int]:
    """CRT decryption of raw ciphertexts (``phe``)."""
    n2 = private.public_key.nsquare
    if any(not 0 < c < n2 for c in ciphertexts):
        raise InvalidMessage("a ciphertext is out of range for this key")
    return [private.raw_decrypt(c) for c in ciphertexts]

