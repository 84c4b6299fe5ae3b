"""The differential-privacy options that ``secemb train`` and ``secemb demo`` share (their
``--dp-epsilon`` help differs: what each command runs)."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["DpClip", "DpDelta", "DpLevel"]

DpDelta = Annotated[float, typer.Option(help="Differential privacy: target delta.")]
DpClip = Annotated[float, typer.Option(help="Differential privacy: L2 bound of a user's round contribution.")]
DpLevel = Annotated[str, typer.Option(help="Differential privacy: user (a user's whole contribution).")]
