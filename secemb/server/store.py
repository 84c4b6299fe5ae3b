"""A server's durable state: the checkpoint (the commit point of a round), the round journal,
and server 1's *staged* checkpoint (the model it computed for a round and agreed on, kept until
server 0's sync commits it or the round ends otherwise: issue 33, both servers reconstruct).

:class:`StateStore` is the interface a node uses; :class:`DiskStore` keeps both on disk
(:mod:`.persist`: an atomic ``checkpoint.npz`` and an fsync-ed ``journal.jsonl``, what a
deployment runs), :class:`MemoryStore` in memory for the in-process simulation.  Both have the
same semantics: :meth:`~StateStore.save` replaces the whole checkpoint at once, a record is in
:meth:`~StateStore.records` once :meth:`~StateStore.append` returned, and a checkpoint of
another party or configuration is refused when loaded.
"""

from __future__ import annotations

import copy
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from secemb.digest import model_sha256
from secemb.server.persist import (
    CorruptState, Journal, StorageError, load_checkpoint, remove, remove_stale_temporaries, save_checkpoint,
)

__all__ = ["Checkpoint", "DiskStore", "MemoryStore", "StateStore"]

CHECKPOINT = "checkpoint.npz"
STAGED = "staged.npz"
JOURNAL = "journal.jsonl"
#: ServerAdam.state_dict() arrays, stored as "opt_<name>" in the checkpoint
_OPT_ARRAYS = ("m", "v", "row_t", "dm", "dv")

log = logging.getLogger(__name__)


@dataclass
class Checkpoint:
    """Everything a server needs to restart.

    Attributes
    ----------
    version: model version (-1: server 1 before its first sync).
    last_round: the round that committed ``version`` (-1: none).
    included: the users that round aggregated.
    m_prime, mean_count: Eq. 11's result (``None`` until known).
    table, dense: float64 public model, (m, width) and (dense_size,).
    model_sha256: :func:`~secemb.digest.model_sha256` of ``(table, dense)`` (the node
        computes it once per version).
    optimizer: ``ServerAdam.state_dict()`` (server 0) or ``None`` (server 1).
    """

    version: int
    last_round: int
    included: list[int]
    m_prime: int | None
    mean_count: float | None
    table: np.ndarray
    dense: np.ndarray
    model_sha256: str
    optimizer: dict[str, Any] | None = None


class StateStore(ABC):
    """Checkpoint and journal of server ``party`` running configuration ``fingerprint``."""

    def __init__(self, party: int, fingerprint: str) -> None:
        self.party, self.fingerprint = party, fingerprint

    def save(self, ck: Checkpoint, *, staged: bool = False) -> None:
        """Replace the checkpoint (``staged``: the staged one) by ``ck`` atomically (the
        checkpoint: the commit point of a round)."""
        meta = {
            "format": 1, "party": self.party, "fingerprint": self.fingerprint, "version": ck.version,
            "last_round": ck.last_round, "included": ck.included, "m_prime": ck.m_prime,
            "mean_count": ck.mean_count, "opt_steps": ck.optimizer["steps"] if ck.optimizer is not None else 0,
            "model_sha256": ck.model_sha256,
        }
        arrays = {"table": ck.table, "dense": ck.dense}
        if ck.optimizer is not None:
            arrays.update({"opt_" + k: ck.optimizer[k] for k in _OPT_ARRAYS})
        if staged:
            self._write(meta, arrays, name=STAGED)
        else:
            self._write(meta, arrays)

    def load(self, *, staged: bool = False) -> Checkpoint | None:
        """The last saved checkpoint (``staged``: the staged one; ``None``: none saved).

        Raises
        ------
        CorruptState
            Unreadable, or saved by another party or configuration.
        """
        raw = self._read(name=STAGED) if staged else self._read()
        if raw is None:
            return None
        meta, arrays = raw
        if meta.get("party") != self.party or meta.get("fingerprint") != self.fingerprint:
            raise CorruptState(
                f"checkpoint in {self} belongs to party {meta.get('party')} with another "
                "configuration; refusing to start (use a fresh state_dir)"
            )
        try:
            opt = None
            if "opt_m" in arrays:
                opt = {k: arrays["opt_" + k] for k in _OPT_ARRAYS} | {"steps": int(meta["opt_steps"])}
            return Checkpoint(int(meta["version"]), int(meta["last_round"]),
                              [int(u) for u in meta.get("included", [])], meta.get("m_prime"),
                              meta.get("mean_count"), arrays["table"], arrays["dense"],
                              str(meta.get("model_sha256") or model_sha256(arrays["table"], arrays["dense"])), opt)
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptState(f"checkpoint in {self}: field {exc} missing or malformed") from None

    @abstractmethod
    def records(self) -> list[dict[str, Any]]:
        """All journal records, oldest first."""

    @abstractmethod
    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` (JSON-able) to the journal durably."""

    @abstractmethod
    def drop_staged(self) -> None:
        """Forget the staged checkpoint (none: nothing to do)."""

    @abstractmethod
    def _write(self, meta: dict[str, Any], arrays: dict[str, np.ndarray], name: str = CHECKPOINT) -> None: ...

    @abstractmethod
    def _read(self, name: str = CHECKPOINT) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None: ...


class DiskStore(StateStore):
    """``state_dir/checkpoint.npz``, ``state_dir/staged.npz`` and ``state_dir/journal.jsonl``
    (:mod:`.persist`)."""

    def __init__(self, state_dir: str | Path, party: int, fingerprint: str) -> None:
        super().__init__(party, fingerprint)
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(self.state_dir)  # of a process that died mid-write
        self._journal = Journal(self.state_dir / JOURNAL)

    def __str__(self) -> str:
        return str(self.state_dir)

    def records(self) -> list[dict[str, Any]]:
        return self._journal.records()

    def append(self, record: dict[str, Any]) -> None:
        self._journal.append(record)

    def drop_staged(self) -> None:
        """Remove ``staged.npz`` (:func:`.persist.remove`: in a held state directory only while
        its name gives it, through its descriptor; session 25 red team, K1).  Best effort, never
        raises: a refusal (the disk's, or a held state directory whose name no longer gives it)
        is logged and the file left -- a staged checkpoint left behind, or back after a crash
        (not ``fsync``-ed), is stale, and the node ignores one that does not follow its
        checkpoint's version."""
        try:
            remove(self.state_dir / STAGED)
        except StorageError as exc:
            log.error("the staged checkpoint was not removed: %s", exc)

    def _write(self, meta: dict[str, Any], arrays: dict[str, np.ndarray], name: str = CHECKPOINT) -> None:
        save_checkpoint(self.state_dir / name, meta, arrays)

    def _read(self, name: str = CHECKPOINT) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        return load_checkpoint(self.state_dir / name)


class MemoryStore(StateStore):
    """The same state in memory.  Arrays in are kept read-only (:func:`_frozen`: a write through
    such an array, or through a view of it taken afterwards, raises instead of reaching the stored
    checkpoint; a view taken before the save could still write it, so callers hold none -- the
    nodes do not, ``tests/review/test_session21_answers_store.py``), arrays out are copies."""

    def __init__(self, party: int, fingerprint: str) -> None:
        super().__init__(party, fingerprint)
        self._cks: dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]] = {}
        self._records: list[dict[str, Any]] = []

    def __str__(self) -> str:
        return f"memory store of party {self.party}"

    def records(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._records)

    def append(self, record: dict[str, Any]) -> None:
        self._records.append(copy.deepcopy(record))

    def drop_staged(self) -> None:
        self._cks.pop(STAGED, None)

    def _write(self, meta: dict[str, Any], arrays: dict[str, np.ndarray], name: str = CHECKPOINT) -> None:
        """Keep ``arrays`` themselves, made read-only, where they own their memory (a view is
        copied): a node's model and optimizer state are then not held twice (each copy 900 MB
        for DeepFM's dense vector at d = 512; server 1's staged checkpoint a third time).  A
        node replaces its arrays after a round and steps only copies, so freezing them costs
        it nothing; an in-place write to one now raises instead of changing the checkpoint."""
        kept = {k: _frozen(v) for k, v in arrays.items()}
        self._cks[name] = (copy.deepcopy(meta), kept)

    def _read(self, name: str = CHECKPOINT) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
        if name not in self._cks:
            return None
        meta, arrays = self._cks[name]
        return copy.deepcopy(meta), {k: v.copy() for k, v in arrays.items()}


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` made read-only if it owns its memory, else a read-only copy of it (a view: its base
    may be written).  Once ``a`` is read-only, writes through it and through any numpy view taken
    of it afterwards raise; numpy cannot revoke a view taken before, nor a torch tensor over its
    memory, which stay writable: the caller holds none that it writes."""
    a = np.asarray(a)
    if not a.flags.owndata:
        a = np.array(a, copy=True)
    a.flags.writeable = False
    return a
