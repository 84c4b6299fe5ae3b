"""A deployed device's durable state file (``secemb client`` of a protocol whose devices keep
state across their own restart, e.g. a SecEA silo: :class:`DurableDevices`).

The file holds the device's secrets, so it is written atomically and durably with mode 0600
(:func:`secemb.outputs.atomic_write_bytes`) and authenticated: an HMAC-SHA256 under a key
derived from the device's credential secret (one per deployment and device) covers every byte,
and the file names the public *binding* it was written for (the device id, the deployment's
protocol, run and options, the server's CA certificate digest).  So a file of another device,
of another deployment, or altered by anyone without the device's credentials is refused when
read, before any of it is used.  Layout::

    MAGIC (8) | u32 length of meta | meta (JSON, UTF-8) | NPZ of the arrays | HMAC-SHA256 (32)

``meta`` is ``{"binding": ..., "meta": ...}`` (canonical JSON: sorted keys) and the NPZ is
uncompressed, both packed by :mod:`secemb.packing`; the arrays are read without pickle.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from secemb.errors import InvalidParameters
from secemb.outputs import atomic_write_bytes
from secemb.packing import MalformedPack, arrays_bytes, arrays_from_bytes, meta_bytes, meta_from_bytes
from secemb.protocols.exchange import ExchangeDevice

__all__ = ["CorruptDeviceState", "DeviceStateFile", "DurableDevices"]

_MAGIC = b"SEDSTAT1"
_TAG = 32
_KEY_PURPOSE = b"secemb/device-state/v1/mac"
#: the largest state file read (a silo's model and keys are a few MB at most)
MAX_STATE_BYTES = 1 << 30


class CorruptDeviceState(InvalidParameters):
    """A device state file that cannot be used: unreadable, malformed, altered, or written for
    another device or deployment (the command line: exit 2, nothing overwritten)."""


@dataclass(frozen=True)
class DeviceStateFile:
    """Device state at ``path``, authenticated under ``secret`` (the device's credential key)
    and bound to ``binding`` (JSON-able public facts of the device and its deployment)."""

    path: Path
    secret: bytes = field(repr=False)
    binding: Mapping[str, Any]

    def _mac(self, data: bytes) -> bytes:
        key = hmac.new(self.secret, _KEY_PURPOSE, hashlib.sha256).digest()
        return hmac.new(key, data, hashlib.sha256).digest()

    def exists(self) -> bool:
        """Whether a state file is there (to read with :meth:`load`)."""
        return self.path.exists()

    def save(self, meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
        """Replace the file by ``meta`` (JSON-able) and ``arrays`` (no object arrays), atomically,
        mode 0600.

        Raises
        ------
        OSError: the disk refused (the file is as it was).
        """
        head = meta_bytes({"binding": dict(self.binding), "meta": dict(meta)})
        body = _MAGIC + struct.pack("<I", len(head)) + head + arrays_bytes(arrays)
        atomic_write_bytes(self.path, body + self._mac(body), mode=0o600)

    def load(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """``(meta, arrays)`` as :meth:`save` wrote them.

        Raises
        ------
        CorruptDeviceState: unreadable, not such a file, written for another device or
        deployment, or altered (the message says which, and holds none of the file's content).
        """
        try:
            size = os.stat(self.path).st_size
            if size > MAX_STATE_BYTES:
                raise CorruptDeviceState(f"device state {self.path}: {size} bytes, more than a state file holds")
            data = self.path.read_bytes()
        except OSError as exc:
            raise CorruptDeviceState(f"device state {self.path}: cannot be read ({exc.strerror or exc})") from None
        if len(data) < len(_MAGIC) + 4 + _TAG or not data.startswith(_MAGIC):
            raise CorruptDeviceState(f"device state {self.path}: not a device state file (or truncated)")
        body, tag = data[:-_TAG], data[-_TAG:]
        (length,) = struct.unpack_from("<I", body, len(_MAGIC))
        start = len(_MAGIC) + 4
        head: dict[str, Any] | None
        try:
            head = meta_from_bytes(body[start:start + length])
            binding = head["binding"]
        except (MalformedPack, KeyError):  # read before the tag checks
            head = binding = None
        if isinstance(binding, dict) and binding != dict(self.binding):
            differ = sorted(k for k in set(binding) | set(self.binding) if binding.get(k) != self.binding.get(k))
            raise CorruptDeviceState(f"device state {self.path}: written for another device or deployment "
                                     f"({', '.join(differ)} differ{'s' if len(differ) == 1 else ''})")
        if not hmac.compare_digest(tag, self._mac(body)):
            raise CorruptDeviceState(f"device state {self.path}: its authentication tag does not match (altered, "
                                     "or written under another device's credentials)")
        if head is None or not isinstance(head.get("meta"), dict):
            raise CorruptDeviceState(f"device state {self.path}: malformed header")
        try:
            arrays = arrays_from_bytes(body[start + length:])
        except MalformedPack:
            raise CorruptDeviceState(f"device state {self.path}: malformed arrays") from None
        return head["meta"], arrays


@runtime_checkable
class DurableDevices(Protocol):
    """A one-server protocol whose devices keep durable state in a :class:`DeviceStateFile`
    (``secemb client`` gives it one: :func:`secemb.client.stages.make_device`)."""

    def make_durable_device(self, user: int, state: DeviceStateFile) -> ExchangeDevice:
        """Device ``user`` restored from ``state`` if the file exists (else fresh), writing its
        state there as it goes.

        Raises
        ------
        CorruptDeviceState: a file that cannot be used (nothing is overwritten).
        InvalidParameters: as ``make_device``.
        """
