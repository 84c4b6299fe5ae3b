"""The differential-privacy options that ``secemb train`` and ``secemb demo`` share."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["DpClip", "DpDelta", "DpEpsilon", "DpLevel"]

DpEpsilon = Annotated[
    float, typer.Option(help="Differential privacy: target epsilon (inf: no DP). Central DP (secemb, plaintext, "
                        "secfedrec: each server noises its share, the devices clip to the bound the servers "
                        "announce, Poisson sampling) or local DP (dp-fedrec).")
]
DpDelta = Annotated[float, typer.Option(help="Differential privacy: target delta.")]
DpClip = Annotated[float, typer.Option(help="Differential privacy: L2 bound of a user's round contribution.")]
DpLevel = Annotated[str, typer.Option(help="Differential privacy: user (a user's whole contribution).")]
