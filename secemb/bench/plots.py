"""PNG plots of the benchmark tables (matplotlib, Agg backend).  Without matplotlib (it is the
``plots`` extra) the tables are still written and the plot is skipped with a note on stderr."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["bar_groups", "line_panels"]


def _plt():  # noqa: ANN202
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover - depends on the environment
        print("matplotlib is not installed (pip install 'secemb[plots]'): no PNG written", file=sys.stderr)
        return None
    return plt


def line_panels(path: str | Path, panels: dict[str, dict[str, Sequence[float]]], *, xlabel: str, ylabel: str,
                title: str, x: Sequence[float] | None = None, logy: bool = False) -> bool:
    """One panel per key of ``panels``; each panel draws its named series as lines."""
    plt = _plt()
    if plt is None or not panels:
        return False
    n = len(panels)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (name, series) in zip(axes[0], panels.items()):
        for label, ys in series.items():
            xs = list(x) if x is not None else list(range(1, len(ys) + 1))
            ax.plot(xs[: len(ys)], ys, label=label, lw=1.2, marker="o" if len(ys) < 12 else None, ms=3)
        ax.set_title(name)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        if logy:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def bar_groups(path: str | Path, groups: Sequence[str], series: dict[str, Sequence[float]], *, ylabel: str,
               title: str, logy: bool = True) -> bool:
    """Grouped bars: one group per entry of ``groups``, one bar per series."""
    plt = _plt()
    if plt is None or not groups:
        return False
    import numpy as np

    fig, ax = plt.subplots(figsize=(max(5.0, 1.3 * len(groups) * max(1, len(series)) / 2), 3.6))
    width = 0.8 / max(1, len(series))
    xs = np.arange(len(groups))
    for k, (label, vals) in enumerate(series.items()):
        ax.bar(xs + k * width - 0.4 + width / 2, vals, width, label=label)
    ax.set_xticks(xs, groups, rotation=20, fontsize=7)
    ax.set_ylabel(ylabel)
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
