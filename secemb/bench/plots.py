"""PNG plots of the benchmark tables (matplotlib, Agg backend), readable at 100 %.

Small multiples: one panel per model (or per measure), at most two panels a row, each panel
5 x 3.6 inches at 100 dpi (a figure of 1-4 panels is 500-1,000 px wide).  Categorical x values
(datasets) keep the order given, the natural one (ML-100K, ML-1M, ..., Yelp), never string
order.  Values spanning decades go on a log axis as points joined by lines, never as bars (a
bar on a log axis has no zero to stand on).

matplotlib is the ``bench`` extra (``pip install 'secemb[bench]'``): :func:`require` says so
before a benchmark starts, and the plotting functions raise :class:`PlotsUnavailable`
without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from secemb.errors import SecembError

__all__ = ["DPI", "PANEL_INCHES", "PlotsUnavailable", "line_panels", "require"]

DPI = 100
PANEL_INCHES = (5.0, 3.6)
_COLUMNS = 2


class PlotsUnavailable(SecembError, ImportError):
    """matplotlib, the ``bench`` extra, is not installed."""


def require() -> None:
    """Raise :class:`PlotsUnavailable` (naming the extra) unless matplotlib can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotsUnavailable(
            "the plots of secemb bench need matplotlib, which is not installed: pip install 'secemb[bench]'"
        ) from None


def _pyplot() -> Any:
    require()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_panels(path: str | Path, panels: Mapping[str, Mapping[str, Sequence[float]]], *, xlabel: str, ylabel: str,
                title: str, x: Sequence[Any] | None = None, logy: bool = False, logx: bool = False,
                xs: Mapping[str, Mapping[str, Sequence[float]]] | None = None, ylabels: Mapping[str, str] | None = None,
                refs: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]] | None = None) -> None:
    """One panel per key of ``panels`` (in order), each drawing its named series as points
    joined by lines against ``x`` (numbers, or category names kept in the given order;
    default 1, 2, ...).  ``nan`` leaves a gap.  Writes a PNG to ``path``.

    ``xs`` gives a series its own x values (by panel name, then series name, e.g. the rounds at
    which each curve was evaluated); ``ylabels`` a panel its own y label (by panel name); ``refs`` per panel name
    ``{label: (x values, y values)}`` reference points (e.g. a paper's values) drawn as
    unfilled markers without lines, in the colour of the series of the same label if there is
    one.

    Raises
    ------
    PlotsUnavailable
        Without matplotlib.
    """
    plt = _pyplot()
    n = max(1, len(panels))
    cols = min(n, _COLUMNS)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + 0.4),
                             squeeze=False, dpi=DPI)
    for ax, (name, series) in zip(axes.flat, panels.items(), strict=False):
        colour = {}
        for label, ys in series.items():
            if label in (xs or {}).get(name, {}):
                at = list((xs or {})[name][label])
            else:
                at = list(x)[: len(ys)] if x is not None else list(range(1, len(ys) + 1))
            (line,) = ax.plot(at, list(ys), label=label, lw=1.3, marker="o" if len(ys) <= 12 else None, ms=4)
            colour[label] = line.get_color()
        for label, (rx, ry) in (refs or {}).get(name, {}).items():
            ax.plot(list(rx), list(ry), ls="none", marker="D", ms=6, mfc="none", mew=1.4,
                    color=colour.get(label.removeprefix("paper ")), label=label)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel((ylabels or {}).get(name, ylabel), fontsize=9)
        ax.tick_params(labelsize=8)
        if logy:
            ax.set_yscale("log")
        if logx:
            ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
