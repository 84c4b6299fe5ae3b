"""Exceptions raised while locating, downloading and parsing rating data."""

from __future__ import annotations

import os

from secemb.errors import SecembError

__all__ = ["DataFormatError", "DatasetNotFoundError"]


class DataFormatError(SecembError, ValueError):
    """A data file is malformed, or a downloaded file fails verification.

    Attributes
    ----------
    path:
        The offending file, or ``None``.
    line:
        1-based line number of the first bad line, or ``None`` when the error is not tied to
        one line (a bad checksum, a wrong line count).
    """

    def __init__(
        self, message: str, *, path: str | os.PathLike | None = None, line: int | None = None
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}, line {line}: " if line is not None else f"{self.path}: "
        super().__init__(where + message)


class DatasetNotFoundError(SecembError, FileNotFoundError):
    """A dataset's files are not where secemb looked; the message says where and what to do."""
