"""PNG charts of named series, with matplotlib (pinned in requirements-dev.txt).

    from harness.plots import Chart, line_chart, write_figure
    line_chart("latency.png", "webhook latency", {"p50": [(0, 1.2), (1, 1.3)], "p99": [...]},
               xlabel="gateways", ylabel="ms")

``write_figure`` puts several charts on one image (a dashboard's panels, a benchmark's
latency and memory side by side). Series are plotted as given: (x, y) pairs, NaN breaks a line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

Series = Mapping[str, Sequence[tuple[float, float]]]
STATE_COLOURS = {"True": "#3b8e3b", "False": "#c8423b", "ok": "#3b8e3b", "progressing": "#e0a030",
                 "problem": "#c8423b", "Unknown": "#9a9a9a", "pending": "#e0a030", "firing": "#c8423b"}


@dataclass
class Chart:
    """One panel. ``kind``: "line", "step" (values that jump: states, counts), or "states"
    (series named "<row>=<state>" with value 1 while the row is in that state, drawn as a
    timeline of coloured bars, one row per <row>)."""

    title: str
    series: Series
    xlabel: str = ""
    ylabel: str = ""
    kind: str = "line"
    spans: Sequence[tuple[float, float, str]] = field(default_factory=list)  # shaded (start, end, short label)
    step: float | None = None  # "states": the width of one sample (default: the closest two samples)
    xlim: tuple[float, float] | None = None
    ylim: tuple[float, float] | None = None


def _draw(ax: plt.Axes, chart: Chart) -> None:
    for i, (start, end, label) in enumerate(chart.spans):
        ax.axvspan(start, end, color=("#f3ead2", "#e4ecf3")[i % 2], zorder=0, linewidth=0)
        ax.text((start + end) / 2, 1.0, label, transform=ax.get_xaxis_transform(), ha="center", va="bottom",
                fontsize=6, color="#6a5a2a")
    if chart.kind == "states":
        rows = sorted({name.split("=", 1)[0] for name in chart.series})
        states = sorted({name.split("=", 1)[1] for name in chart.series}, key=list(STATE_COLOURS).index)
        every_x = sorted({x for points in chart.series.values() for x, _ in points})
        step = chart.step or min((b - a for a, b in zip(every_x, every_x[1:]) if b > a), default=1.0)
        for name, points in chart.series.items():
            row, state = name.split("=", 1)
            xs = [x for x, y in points if y == 1]
            if xs:
                ax.broken_barh([(x, step) for x in xs], (rows.index(row) - 0.4, 0.8),
                               color=STATE_COLOURS.get(state, "#5577aa"), linewidth=0)
        ax.set_yticks(range(len(rows)), rows, fontsize=7)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        handles = [plt.Rectangle((0, 0), 1, 1, color=STATE_COLOURS[s]) for s in states]
        ax.legend(handles, states, fontsize=6, loc="upper right", bbox_to_anchor=(1.0, -0.06), borderaxespad=0,
                  ncols=len(states) or 1, frameon=False)
    else:
        for name, points in sorted(chart.series.items()):
            xs = [x for x, _ in points]
            ys = [y if not math.isinf(y) else math.nan for _, y in points]
            (ax.step if chart.kind == "step" else ax.plot)(xs, ys, label=name, linewidth=1.2,
                                                           **({"where": "post"} if chart.kind == "step" else {}))
        if chart.series:
            ax.legend(fontsize=6, loc="best", frameon=False)
        ax.grid(True, linewidth=0.3)
    if chart.xlim:
        ax.set_xlim(*chart.xlim)
    if chart.ylim:
        ax.set_ylim(*chart.ylim)
    ax.set_title(chart.title, fontsize=9, pad=10 if chart.spans else 4, loc="left")
    ax.set_xlabel(chart.xlabel, fontsize=7)
    ax.set_ylabel(chart.ylabel, fontsize=7)
    ax.tick_params(labelsize=7)


def write_figure(path: str | Path, charts: Sequence[Chart], title: str = "", columns: int = 2,
                 panel_size: tuple[float, float] = (5.2, 2.4), dpi: int = 72) -> Path:
    """All ``charts`` on one PNG, ``columns`` wide; returns the path written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = math.ceil(len(charts) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(panel_size[0] * columns, panel_size[1] * rows + 0.5),
                             squeeze=False)
    for ax, chart in zip(axes.flat, charts):
        _draw(ax, chart)
    for ax in list(axes.flat)[len(charts):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, pil_kwargs={"optimize": True})
    plt.close(fig)
    return path


def line_chart(path: str | Path, title: str, series: Series, xlabel: str = "", ylabel: str = "",
               dpi: int = 100) -> Path:
    """One chart of named (x, y) series."""
    return write_figure(path, [Chart(title, series, xlabel, ylabel)], columns=1, panel_size=(7, 4), dpi=dpi)
