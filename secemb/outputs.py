"""Output paths that never lose a user's file: the checks every command runs on its outputs
before any work, and atomic writes.

:func:`check_output` runs before a command trains or measures anything, so a bad path costs
seconds, not an epoch.  It refuses (:class:`OutputRefused`, a
:class:`~secemb.errors.InvalidParameters`, which the command line turns into one ``error:``
line and exit 2):

- an output that is one of the command's inputs (the same file, or a folder that holds one),
  even with ``force``;
- a ``model-dir`` that exists and is not empty, unless it is a model saved by secemb
  (``manifest.json`` with format ``secemb-model``) -- even with ``force``;
- an existing ``file`` result or saved model, unless ``force``;
- a path that cannot be written: a probe file is created and removed in the target's folder
  (missing folders are created for the probe and removed again).

The writers (:func:`atomic_write_bytes`, :func:`atomic_write_text`, :func:`atomic_dir`) write
to a temporary name in the target's folder and rename it into place: an interrupted write
(Ctrl-C, a full disk) leaves the earlier file or folder as it was and no temporary behind.  The
file writers are durable (``fsync`` of the file and its folder): the one implementation of an
atomic file write, also for a server's checkpoint (:mod:`secemb.server.persist`).
:func:`dumps_strict` is JSON without ``NaN``/``Infinity`` (which are not JSON): a non-finite
value raises :class:`NonFiniteValue` naming where it is.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from secemb.errors import InvalidParameters, SecembError

__all__ = [
    "NonFiniteValue",
    "OutputKind",
    "OutputRefused",
    "TEMP_MARK",
    "atomic_dir",
    "atomic_write_bytes",
    "atomic_write_text",
    "check_output",
    "dumps_strict",
    "write_all",
]

#: ``file``: one file; ``model-dir``: a folder written by ``TrainedModel.save``; ``dir``: a
#: folder the command writes named files into (check each of those files with ``file``)
OutputKind = Literal["file", "model-dir", "dir"]

#: how a folder saved by ``secemb train --save-model`` is recognised (secemb.inference.trained)
_MODEL_MANIFEST, _MODEL_FORMAT = "manifest.json", "secemb-model"


class OutputRefused(InvalidParameters):
    """An output path would replace an input, a foreign folder or (without ``force``) an
    earlier result, or cannot be written.  Nothing was written."""


class NonFiniteValue(SecembError, ValueError):
    """A document to be written as JSON holds NaN or an infinity (not JSON); nothing was
    written."""


def _is_within(inner: Path, outer: Path) -> bool:
    """Whether resolved ``inner`` is ``outer`` or lies under it."""
    return inner == outer or outer in inner.parents


def _same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name the same file (resolved path, or the same inode: a hard link)."""
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _is_our_model(folder: Path) -> bool:
    """Whether ``folder`` holds a manifest of a model saved by secemb."""
    try:
        doc = json.loads((folder / _MODEL_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("format") == _MODEL_FORMAT


def _probe(folder: Path) -> None:
    """Create ``folder`` (and missing parents) if needed, create and remove a file in it, and
    remove again the folders this created.  Raises OSError when any step fails."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    made: list[Path] = []
    try:
        for p in reversed(missing):
            p.mkdir()
            made.append(p)
        fd, name = tempfile.mkstemp(dir=folder, prefix=".secemb-probe-")
        os.close(fd)
        os.unlink(name)
    finally:
        for p in reversed(made):
            try:
                p.rmdir()
            except OSError:
                pass


def check_output(path: str | os.PathLike[str], *, option: str = "output", force: bool = False,
                 inputs: Sequence[str | os.PathLike[str]] = (), kind: OutputKind = "file") -> Path:
    """Check that ``path`` may be written by a command, before the command does any work.

    Parameters
    ----------
    path: the output (``~`` expanded).
    option: the option that gave it (``--json-out``), named in the message.
    force: replace an existing result (a file, or a model saved by secemb).
    inputs: the command's input files and folders (a dataset file, a data folder); an output
        that is one of them, or a folder holding one, is refused even with ``force``.  Inputs
        that do not exist (a dataset name such as ``ml-1m``) are ignored.
    kind: ``file``, ``model-dir`` or ``dir`` (see :data:`OutputKind`).

    Returns
    -------
    Path: ``path`` with ``~`` expanded.

    Raises
    ------
    OutputRefused
        One of the cases in the module docstring; the message names ``option``, the path and
        what to do.  Nothing is left behind on disk.
    """
    out = Path(path).expanduser()
    where = f"{option} {out}"
    resolved = out.resolve()
    for given in inputs:
        inp = Path(given).expanduser()
        if not inp.exists():
            continue
        if _same(out, inp):
            raise OutputRefused(f"{where}: is an input of this command ({given}); choose another path")
        if kind != "file" and _is_within(inp.resolve(), resolved):
            raise OutputRefused(f"{where}: holds an input of this command ({given}); choose another folder")
    if kind == "file":
        if out.is_dir():
            raise OutputRefused(f"{where}: expected a file name, got a folder")
        if out.exists() and not force:
            raise OutputRefused(f"{where}: exists; pass --force to replace it")
    else:
        if out.exists() and not out.is_dir():
            raise OutputRefused(f"{where}: expected a folder, got a file")
        if kind == "model-dir" and out.is_dir() and any(out.iterdir()):
            if not _is_our_model(out):
                raise OutputRefused(f"{where}: a folder that is not empty and holds no model saved by secemb; "
                                    "choose a new or empty folder")
            if not force:
                raise OutputRefused(f"{where}: holds a saved model; pass --force to replace it")
    folder = out.parent if kind == "file" else out
    base = next((p for p in (folder, *folder.parents) if p.exists()), folder.anchor)
    if not Path(base).is_dir():
        raise OutputRefused(f"{where}: expected a path under a folder, got {base} which is a file")
    try:
        if kind == "file" and out.exists() and not os.access(out, os.W_OK):
            raise PermissionError(13, "the file is not writable")
        _probe(folder)
    except OSError as exc:
        raise OutputRefused(f"{where}: cannot be written ({exc.strerror or exc})") from None
    return out


#: marks the name of a temporary file or folder of the atomic writers: ``.NAME`` + this + a random
#: suffix, in the target's folder (what a store that owns its folder removes after a crash)
TEMP_MARK = ".tmp."


def _temp_name(path: Path) -> str:
    return f".{path.name}{TEMP_MARK}"


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` to ``fd`` until all of ``data`` is written (a short write is not an error)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, mode: int | None = None,
                       dir_fd: int | None = None) -> Path:
    """Replace ``path`` by ``data`` atomically and durably: write a temporary file in its folder
    (created if missing; the name ``.NAME.tmp.`` + a random suffix, see :data:`TEMP_MARK`),
    ``fsync`` it, rename it over ``path``, ``fsync`` the folder.  Returns ``path``.

    ``mode``: the file's permission bits (``0o600`` for a server's state); ``None``: those of a
    new file (``0o666`` less the umask).

    ``dir_fd``: an open descriptor of ``path``'s folder (``O_DIRECTORY``).  The temporary file,
    the rename and the folder's ``fsync`` then go through it, not through the folder's name: the
    file lands in the folder the descriptor holds even if the name gives another one by now (a
    server's held state directory, :mod:`secemb.server.persist`); the folder is not created.

    Raises
    ------
    OSError
        The folder cannot be created or the disk refused the write (the caller maps it to its
        own error).  ``path`` is as it was and the temporary file is removed -- on any failure
        or interruption before the rename; a failure of the folder's ``fsync`` after it leaves
        the new file in place, not yet durable.
    """
    out = Path(path)
    name = _temp_name(out) + secrets.token_hex(8)
    at: dict[str, int]
    rename_at: dict[str, int]
    if dir_fd is None:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp, target, at, rename_at = str(out.parent / name), str(out), {}, {}
    else:  # names relative to the folder's descriptor
        tmp, target, at, rename_at = name, out.name, {"dir_fd": dir_fd}, {"src_dir_fd": dir_fd, "dst_dir_fd": dir_fd}
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600, **at)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
            os.fchmod(fd, 0o666 & ~_umask() if mode is None else mode)
        finally:
            os.close(fd)
        os.replace(tmp, target, **rename_at)
    except BaseException:
        try:
            os.unlink(tmp, **at)
        except FileNotFoundError:
            pass
        raise
    if dir_fd is None:
        _fsync_dir(out.parent)
    else:
        os.fsync(dir_fd)
    return out


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty temporary folder next to ``path``; when the block ends without an error,
    it replaces ``path`` (an earlier folder there is removed after the swap).  On an error or
    an interruption the temporary folder is removed and ``path`` is as it was.  The folder
    is created mode 0700 (a saved model holds each device's private state)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=_temp_name(out)))
    old: Path | None = None  # the earlier folder, moved aside during the swap
    try:
        yield tmp
        if out.exists():
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            os.replace(out, old / out.name)
        os.replace(tmp, out)
    except BaseException:
        if old is not None and (old / out.name).exists():
            os.replace(old / out.name, out)  # put the earlier folder back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    """The process umask (read from /proc when possible, so it is not changed even briefly)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _non_finite(doc: Any, where: str = "") -> Iterator[str]:
    """The paths (``epochs[2].train_loss``) of the non-finite floats in ``doc``."""
    if isinstance(doc, float) and not math.isfinite(doc):
        yield f"{where or 'the document'} = {doc}"
    elif isinstance(doc, dict):
        for k, v in doc.items():
            yield from _non_finite(v, f"{where}.{k}" if where else str(k))
    elif isinstance(doc, (list, tuple)):
        for i, v in enumerate(doc):
            yield from _non_finite(v, f"{where}[{i}]")


def dumps_strict(doc: Any, **kwargs: Any) -> str:
    """``json.dumps(doc, allow_nan=False, **kwargs)``.

    Raises
    ------
    NonFiniteValue
        ``doc`` holds NaN or an infinity; the message names the first three places.
    """
    try:
        return json.dumps(doc, allow_nan=False, **kwargs)
    except ValueError:
        places = list(_non_finite(doc))
        if not places:
            raise
        more = f" and {len(places) - 3} more" if len(places) > 3 else ""
        raise NonFiniteValue(f"not valid JSON: {', '.join(places[:3])}{more}") from None
