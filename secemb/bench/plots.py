"""PNG plots of the benchmark tables (matplotlib, Agg backend), readable at 100 %.

Small multiples: one panel per model (or per measure), at most two panels a row, each panel
5 x 3.6 inches at 100 dpi (a figure of 1-4 panels is 500-1,000 px wide).  The choices every
plot gets from here:

* **Categorical comparisons are bars** (:func:`bar_panels`): one bar per category (e.g. a
  protocol) in the order given, its value written on it; unrelated categories are never
  joined by lines.  Trends over an ordered x (items m, workers, epochs, datasets in their
  natural order ML-100K, ML-1M, ..., Yelp, never string order) are points joined by lines
  (:func:`line_panels`).
* **Log axes only across decades** (:func:`axis_scale`): an axis a caller allows to be
  logarithmic is so only where the panel's values span one decade or more; otherwise it is
  linear (an RMSE of 1.09 is not drawn on a log axis up to 10).
* **Integer x values get integer ticks** (workers 1, 2, 4: never 1.5) on a linear axis.
* **Warnings are drawn**: a point a caller flags (e.g. a speed-up above the ideal) gets a red
  marker and its reason written beside it.

matplotlib is the ``bench`` extra (``pip install 'secemb[bench]'``): :func:`require` says so
before a benchmark starts, and the plotting functions raise :class:`PlotsUnavailable`
without it.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from secemb.errors import SecembError
from secemb.outputs import atomic_write_bytes

__all__ = ["DPI", "PANEL_INCHES", "PlotsUnavailable", "Flag", "axis_scale", "bar_panels", "line_panels",
           "require", "value_label"]

DPI = 100
PANEL_INCHES = (5.0, 3.6)
_COLUMNS = 2
#: a panel title wider than this many characters wraps (one panel is PANEL_INCHES[0] wide at 10 pt)
_TITLE_CHARS = 55

#: a point marked as a warning: ``(x, y, reason)``
Flag = tuple[Any, float, str]


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


def axis_scale(values: Iterable[float], allow_log: bool) -> str:
    """``"log"`` if ``allow_log`` and the finite values are all positive and span one decade or
    more (largest / smallest >= 10), else ``"linear"``.

    >>> axis_scale([1.09, 1.2, 0.95], allow_log=True)
    'linear'
    >>> axis_scale([3e3, 2e5], allow_log=True)
    'log'
    """
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not allow_log or not finite or min(finite) <= 0:
        return "linear"
    return "log" if max(finite) / min(finite) >= 10 else "linear"


def value_label(v: float | None) -> str:
    """A bar's label: four significant digits, thousands separated; ``n/a`` for a missing value.

    >>> [value_label(v) for v in (1.0912, 0.012345, 123456.0, None)]
    ['1.091', '0.01235', '123,456', 'n/a']
    """
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:.4g}"


def _integer_ticks(ax: Any, xs: Sequence[Any]) -> None:
    """Ticks at whole numbers only when every x is a whole number: at the values themselves
    when there are at most 8 of them and no two are closer than a 20th of their range (the
    labels would overlap), else wherever matplotlib puts whole-number ticks."""
    from matplotlib.ticker import MaxNLocator

    numbers = [x for x in xs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    if not numbers or len(numbers) != len(xs) or any(not math.isfinite(x) or float(x) != int(x) for x in numbers):
        return
    distinct = sorted({int(x) for x in numbers})
    gaps = [b - a for a, b in zip(distinct, distinct[1:], strict=False)]
    if len(distinct) <= 8 and (not gaps or min(gaps) >= (distinct[-1] - distinct[0]) / 20):
        ax.set_xticks(distinct)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _flag(ax: Any, flags: Sequence[Flag]) -> None:
    for k, (fx, fy, text) in enumerate(flags):
        ax.plot([fx], [fy], ls="none", marker="X", ms=9, color="red", zorder=5,
                label="warning" if k == 0 else None)
        ax.annotate(text, (fx, fy), xytext=(-10, -14 - 12 * k), textcoords="offset points", color="red", fontsize=7,
                    ha="right", annotation_clip=True)


def _figure(n: int) -> tuple[Any, Any, Any]:
    plt = _pyplot()
    cols = min(max(1, n), _COLUMNS)
    rows = math.ceil(max(1, n) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + 0.4),
                             squeeze=False, dpi=DPI)
    return plt, fig, axes


def _save(plt: Any, fig: Any, axes: Any, used: int, title: str, path: str | Path) -> None:
    for ax in list(axes.flat)[used:]:
        ax.set_visible(False)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=DPI, bbox_inches="tight")  # grow the canvas to any text tight_layout left out
    plt.close(fig)
    atomic_write_bytes(path, png.getvalue())


def line_panels(path: str | Path, panels: Mapping[str, Mapping[str, Sequence[float]]], *, xlabel: str, ylabel: str,
                title: str, x: Sequence[Any] | None = None, logy: bool = False, logx: bool = False,
                xs: Mapping[str, Mapping[str, Sequence[float]]] | None = None, ylabels: Mapping[str, str] | None = None,
                refs: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float]]]] | None = None,
                flags: Mapping[str, Sequence[Flag]] | None = None, dashed: Sequence[str] = ()) -> None:
    """One panel per key of ``panels`` (in order), each drawing its named series as points
    joined by lines against ``x`` (numbers, or category names kept in the given order;
    default 1, 2, ...).  ``nan`` leaves a gap.  Writes a PNG to ``path``.

    ``logy`` / ``logx`` allow a log axis: each panel's axis is logarithmic only where its
    values span a decade or more (:func:`axis_scale`).  Whole-number x values get whole-number
    ticks.  ``xs`` gives a series its own x values (by panel name, then series name, e.g. the
    rounds at which each curve was evaluated); ``ylabels`` a panel its own y label (by panel
    name); ``refs`` per panel name ``{label: (x values, y values)}`` reference points (e.g. a
    paper's values) drawn as unfilled markers without lines, in the colour of the series of
    the same label if there is one; ``flags`` per panel name ``(x, y, reason)`` points marked
    as warnings (a red cross and the reason); the series named in ``dashed`` are reference
    lines (e.g. the ideal), drawn dashed in grey.

    Raises
    ------
    PlotsUnavailable
        Without matplotlib.
    """
    plt, fig, axes = _figure(len(panels))
    for ax, (name, series) in zip(axes.flat, panels.items(), strict=False):
        colour = {}
        all_x: list[Any] = []
        all_y: list[float] = []
        for label, ys in series.items():
            if label in (xs or {}).get(name, {}):
                at = list((xs or {})[name][label])
            else:
                at = list(x)[: len(ys)] if x is not None else list(range(1, len(ys) + 1))
            style = {"ls": "--", "color": "0.4", "marker": None} if label in dashed else {
                "marker": "o" if len(ys) <= 12 else None}
            (line,) = ax.plot(at, list(ys), label=label, lw=1.3, ms=4, **style)
            colour[label] = line.get_color()
            all_x += at
            all_y += list(ys)
        for label, (rx, ry) in (refs or {}).get(name, {}).items():
            ax.plot(list(rx), list(ry), ls="none", marker="D", ms=6, mfc="none", mew=1.4,
                    color=colour.get(label.removeprefix("paper ")), label=label)
            all_x += list(rx)
            all_y += list(ry)
        _flag(ax, (flags or {}).get(name, ()))
        ax.set_title(textwrap.fill(name, _TITLE_CHARS), fontsize=10)
        ax.set_xlabel(xlabel, fontsize=9)
        ax.set_ylabel((ylabels or {}).get(name, ylabel), fontsize=9)
        ax.tick_params(labelsize=8)
        # set a scale only to make it log: setting one resets a categorical axis's labels
        if axis_scale(all_y, logy) == "log":
            ax.set_yscale("log")
        numeric_x = [v for v in all_x if isinstance(v, (int, float))]
        if len(numeric_x) == len(all_x) and axis_scale(numeric_x, logx) == "log":
            ax.set_xscale("log")
        else:
            _integer_ticks(ax, all_x)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    _save(plt, fig, axes, len(panels), title, path)


def bar_panels(path: str | Path, panels: Mapping[str, Mapping[str, float | None]], *, title: str,
               logy: bool = True, notes: Mapping[str, str] | None = None) -> None:
    """One panel per key of ``panels`` (a measure, in order), each a bar per category (its
    keys, in order; ``None`` or ``nan``: no bar, labelled ``n/a``) with the value written on
    the bar.  ``logy`` allows a log y axis, taken only where a panel's values span a decade or
    more (:func:`axis_scale`); ``notes`` per panel a line under its title.  Writes a PNG.

    Raises
    ------
    PlotsUnavailable
        Without matplotlib.
    """
    plt, fig, axes = _figure(len(panels))
    for ax, (name, values) in zip(axes.flat, panels.items(), strict=False):
        names = list(values)
        ys = [values[k] for k in names]
        heights = [v if v is not None and math.isfinite(v) else 0.0 for v in ys]
        scale = axis_scale([v for v in ys if v is not None], logy)
        bars = ax.bar(range(len(names)), heights, color="tab:blue", width=0.6)
        if scale == "log":
            ax.set_yscale("log")
        drawn = [h for h in heights if h > 0]
        if scale == "log" and drawn:
            ax.set_ylim(min(drawn) / 2, max(drawn) * 2.5)
        elif drawn:
            ax.set_ylim(0, max(drawn) * 1.18)
        ax.bar_label(bars, labels=[value_label(v) for v in ys], fontsize=7, padding=2)
        ax.set_xticks(range(len(names)), names, fontsize=7)
        subtitle = (notes or {}).get(name)
        ax.set_title(name + (f"\n{subtitle}" if subtitle else ""), fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(alpha=0.3, axis="y", which="both")
    _save(plt, fig, axes, len(panels), title, path)
