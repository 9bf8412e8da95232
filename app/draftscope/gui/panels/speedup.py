"""The live speedup panel: how fast this answer decodes compared with plain decoding.

A big number (the running speedup) over two charts sharing one time axis: the answer's decode
rate with the measured plain decoding rate as a flat line, and below it τ (tokens emitted per
step). τ has its own small chart rather than a second y axis: on a shared plot a τ of 2 would sit
on the tokens/s grid line of 20 and read as a rate. Fed with StepEvents while streaming (each
series gets one update per batch; the charts are never rebuilt) or a stored answer's steps.

The x axis is seconds into the answer (the sum of the steps' times), not the step number: a
speedup is about time, and steps differ in cost (a big draft tree takes longer to verify), so on
a step axis a slow step would look as short as a cheap one.
"""

from __future__ import annotations

import bisect
import math

from PySide6.QtCharts import QChart, QChartView, QLineSeries, QScatterSeries, QValueAxis
from PySide6.QtCore import QMargins, QPointF, Qt, Signal
from PySide6.QtGui import QColor, QFont, QPainter, QPalette, QPen
from PySide6.QtWidgets import QLabel, QSizePolicy, QVBoxLayout, QWidget

from draftscope.core.words import rate_text, speedup_words
from draftscope.gui.palettes import CHART_COLOURS

UNKNOWN = "—"
MEANING = "writing rate of this answer vs plain decoding's on this device, at the same context length"

COLOURS = CHART_COLOURS  # series colours per theme (palettes.py)

MAX_ALIGN_PX = 80  # the most a plot area is pushed in to line up with the other
ALIGN_ROUNDS = 4  # re-alignments allowed per resize or axis change
NICE_STEPS = (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10)  # fine enough to fit a stored answer, coarse enough not to jitter


def nice_ceiling(value: float) -> float:
    """The smallest round number (see NICE_STEPS) at or above ``value``."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(round(step * power, 12) for step in NICE_STEPS if step * power >= value * (1 - 1e-9))


def tick_interval(top: float, most_ticks: int = 6) -> float:
    """A 1, 2 or 5 × 10^k spacing giving at most ``most_ticks`` intervals between 0 and ``top``."""
    rough = top / most_ticks
    power = 10.0 ** math.floor(math.log10(rough))
    return next(round(step * power, 12) for step in (1, 2, 5, 10) if step * power >= rough * (1 - 1e-9))


def _chart() -> QChart:
    chart = QChart()
    chart.setAnimationOptions(QChart.AnimationOption.NoAnimation)  # 30 batches/s: animations would lag
    chart.setBackgroundRoundness(0)
    chart.setMargins(QMargins(0, 0, 0, 0))
    chart.layout().setContentsMargins(0, 0, 0, 0)
    chart.legend().hide()  # one legend for both charts, below them: a label that wraps in a narrow dock
    return chart


def _value_axis(title: str) -> QValueAxis:
    axis = QValueAxis(titleText=title)
    axis.setTickType(QValueAxis.TickType.TicksDynamic)  # ticks at round values, from 0
    axis.setTickAnchor(0.0)
    axis.setLabelFormat("%g")
    return axis


class SpeedupPanel(QWidget):
    step_selected = Signal(int)  # the user clicked the chart near a step: index into the step list

    def __init__(self, parent=None) -> None:
        super().__init__(parent, objectName="speedupPanel")
        self.events: list = []
        self.xs: list[float] = []  # x of each step, to map a click to a step
        self.baseline: float | None = None
        self.selected: int | None = None
        self._rate_baseline: float | None = None  # the baseline the plotted rates were computed with
        self._theme: str | None = None
        # Lining the plot areas up changes them, which signals again: a few rounds per layout change
        # at most (a plot area and its labels can flip between two widths forever otherwise).
        self._align_rounds = ALIGN_ROUNDS

        self._build_headline()
        self._build_rate_chart()
        self._build_tau_chart()
        for series in (self.rate_series, self.tau_series, self.tau_mean_series):
            series.clicked.connect(self._on_clicked)
        for chart in (self.chart, self.tau_chart):
            chart.plotAreaChanged.connect(self._on_plot_area_changed)
        self._build_views()
        self._lay_out()
        self._apply_palette()
        self.reset(None)

    def _build_headline(self) -> None:
        """The running speedup in big type, and the caption under it."""
        self.speedup_label = QLabel(UNKNOWN, objectName="speedupLabel")
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 2.6)
        font.setBold(True)
        self.speedup_label.setFont(font)
        self.speedup_label.setToolTip(
            f"Speedup: {MEANING}.\nPlain decoding is measured again from time to time, "
            "because the machine's load and clocks drift."
        )
        self.speedup_label.setWordWrap(True)  # "no drafts used", "the computer was busy" in a narrow dock
        self.caption = QLabel(objectName="speedupCaption", toolTip=f"The {MEANING}")
        self.caption.setWordWrap(True)
        self.caption.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)

    def _build_rate_chart(self) -> None:
        """The top chart: this answer's tokens/s against plain decoding's, the selected step marked."""
        self.chart = _chart()
        self.rate_series = QLineSeries(name="tokens/s (this answer)", objectName="speedupRateSeries")
        self.baseline_series = QLineSeries(name="plain decoding (at this length)", objectName="speedupBaselineSeries")
        self.marker_series = QScatterSeries(objectName="speedupSelectedSeries")  # the selected step's rate
        self.marker_line = QLineSeries(objectName="speedupSelectedLine")
        self.marker_series.setMarkerSize(11)
        self.x_axis = _value_axis("")
        self.x_axis.setLabelsVisible(False)  # the τ chart below labels the shared time axis
        self.rate_axis = _value_axis("tokens/s")
        self._attach(
            self.chart,
            self.x_axis,
            self.rate_axis,
            (self.rate_series, self.baseline_series, self.marker_line, self.marker_series),
        )

    def _build_tau_chart(self) -> None:
        """The bottom chart: τ of each step and so far; its x axis labels the time both charts share."""
        self.tau_chart = _chart()
        # τ dots: a line series with markers and no line, not a QScatterSeries, which redraws far slower
        self.tau_series = QLineSeries(name="τ this step (accepted + 1)", objectName="speedupTauSeries")
        self.tau_series.setPointsVisible(True)
        self.tau_mean_series = QLineSeries(name="τ so far", objectName="speedupTauMeanSeries")
        self.tau_marker_line = QLineSeries(objectName="speedupTauSelectedLine")
        self.tau_series.setMarkerSize(3.5)
        # no axis title: in a short chart Qt Charts gives the title the room and draws the labels as "..."
        self.tau_x_axis = _value_axis("")
        self.tau_axis = _value_axis("τ")
        self._attach(
            self.tau_chart,
            self.tau_x_axis,
            self.tau_axis,
            (self.tau_series, self.tau_mean_series, self.tau_marker_line),
        )

    def _build_views(self) -> None:
        """The two charts' views, and the legend they share (a label that wraps in a narrow dock)."""
        self.view = QChartView(self.chart, objectName="speedupChart")
        self.tau_view = QChartView(self.tau_chart, objectName="speedupTauChart")
        self.legend = QLabel(objectName="speedupLegend")
        self.legend.setWordWrap(True)
        self.legend.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        for view, least in ((self.view, 120), (self.tau_view, 100)):
            view.setRenderHint(QPainter.RenderHint.Antialiasing)
            view.setMinimumHeight(least)

    def _lay_out(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 4, 6, 4)
        layout.setSpacing(0)
        layout.addWidget(self.speedup_label)
        layout.addWidget(self.caption)
        layout.addSpacing(6)
        layout.addWidget(self.view, 3)
        layout.addWidget(self.tau_view, 2)
        layout.addSpacing(6)  # the time axis's labels sit on the chart's bottom edge
        layout.addWidget(self.legend)

    @staticmethod
    def _attach(chart: QChart, x_axis: QValueAxis, y_axis: QValueAxis, series_list) -> None:
        chart.addAxis(x_axis, Qt.AlignmentFlag.AlignBottom)
        chart.addAxis(y_axis, Qt.AlignmentFlag.AlignLeft)
        for series in series_list:  # drawn in this order
            chart.addSeries(series)
            series.attachAxis(x_axis)
            series.attachAxis(y_axis)

    # ------------------------------------------------------------------ feeding

    def reset(self, baseline_tps: float | None) -> None:
        """A new answer begins: no steps, the plain decoding line at ``baseline_tps``."""
        self.events, self.xs, self.selected = [], [], None
        self._rate_pts, self._tau_pts, self._tau_mean_pts = [], [], []
        self.elapsed_s = self.max_rate = self.max_tau = 0.0
        self.baseline = self._rate_baseline = baseline_tps or None
        for series in (
            self.rate_series,
            self.tau_series,
            self.tau_mean_series,
            self.marker_series,
            self.marker_line,
            self.tau_marker_line,
        ):
            series.clear()
        self._set_axes(
            {
                self.x_axis: 1.0,
                self.tau_x_axis: 1.0,
                self.tau_axis: 4.0,
                self.rate_axis: nice_ceiling(1.2 * self.baseline) if self.baseline else 10.0,
            }
        )
        self._update_baseline_line()
        self._update_label()

    def set_baseline(self, baseline_tps: float | None) -> None:
        """Plain decoding was measured again: its line moves and the speedup compares with the new
        figure. The plotted rates stay: they are what this answer measured."""
        self.baseline = baseline_tps or None
        if not self.events:
            self._rate_baseline = self.baseline
        self._update_baseline_line()
        self._grow_axes()
        self._update_label()

    def add_steps(self, events: list) -> None:
        """Live StepEvents appended; axes grow when the data outgrows them."""
        if not events:
            return
        rate, tau, tau_mean = self._rate_pts, self._tau_pts, self._tau_mean_pts
        first = len(rate)
        for ev in events:
            # The engine's own clock when the step carries it; older stored steps: their durations.
            self.elapsed_s = ev.elapsed_ms / 1000 if ev.elapsed_ms is not None else self.elapsed_s + ev.total_ms / 1000
            self.xs.append(self.elapsed_s)
            rate.append(QPointF(self.elapsed_s, self._rate_of(ev)))
            tau.append(QPointF(self.elapsed_s, len(ev.token_ids)))
            tau_mean.append(QPointF(self.elapsed_s, ev.tau))
        self.max_rate = max(self.max_rate, max(p.y() for p in rate[first:]))
        self.max_tau = max(self.max_tau, max(p.y() for p in tau[first:]))
        self.events.extend(events)
        if events[-1].plain_tokens_per_second:  # plain decoding at this answer's context (the engine's)
            self.baseline = events[-1].plain_tokens_per_second
            self._update_baseline_line()
        # One replace per series and batch: append() redraws the series once per point added.
        self.rate_series.replace(rate)
        self.tau_series.replace(tau)
        self.tau_mean_series.replace(tau_mean)
        self._grow_axes()
        self._update_label()

    def set_steps(self, events: list, baseline_tps: float | None) -> None:
        """A stored answer's steps, drawn afresh."""
        self.reset(baseline_tps)
        self.add_steps(list(events))

    def select_step(self, index: int | None) -> None:
        """Mark step ``index`` (a dot on its rate, a vertical line on both charts); None clears.
        Never emits step_selected."""
        for series in (self.marker_series, self.marker_line, self.tau_marker_line):
            series.clear()
        if index is None or not 0 <= index < len(self.events):
            self.selected = None
            return
        self.selected = index
        point = self._rate_pts[index]
        x = point.x()
        self.marker_series.append(point)
        self.marker_line.append([QPointF(x, 0), QPointF(x, self.rate_axis.max())])
        self.tau_marker_line.append([QPointF(x, 0), QPointF(x, self.tau_axis.max())])

    # ------------------------------------------------------------------ read back (tests)

    def rate_points(self) -> list[tuple[float, float]]:
        return [(p.x(), p.y()) for p in self.rate_series.points()]

    def baseline_points(self) -> list[tuple[float, float]]:
        return [(p.x(), p.y()) for p in self.baseline_series.points()]

    def tau_points(self) -> list[tuple[float, float]]:
        return [(p.x(), p.y()) for p in self.tau_series.points()]

    def selected_point(self) -> tuple[float, float] | None:
        points = self.marker_series.points()
        return (points[0].x(), points[0].y()) if points else None

    def speedup_text(self) -> str:
        return self.speedup_label.text()

    # ------------------------------------------------------------------ figures

    def _rate_of(self, ev) -> float:
        """The answer's decode rate so far (first step excluded, as the engine measures it); before
        there is one, or without a baseline, the overall tokens/s (prompt processing included)."""
        if ev.decode_tokens_per_second is not None:
            return ev.decode_tokens_per_second
        if ev.speedup_estimate is not None and self._rate_baseline:
            return ev.speedup_estimate * self._rate_baseline
        return ev.tokens_per_second

    def _decode_rate(self) -> float | None:
        """The latest decode rate (tokens/s after the first step), None before the second step."""
        last = self.events[-1]
        if last.decode_tokens_per_second is not None:
            return last.decode_tokens_per_second
        if last.speedup_estimate is not None and self._rate_baseline:
            return last.speedup_estimate * self._rate_baseline
        seconds = self.elapsed_s - self.xs[0]  # no engine figure (no baseline then): from the step times
        return (last.tokens_total - self.events[0].tokens_total) / seconds if seconds > 0 else None

    def _speedup(self) -> float | None:
        if self.events and self.events[-1].plain_tokens_per_second is not None:
            return self.events[-1].speedup_estimate  # the engine's, against plain decoding at this context
        if not self.baseline or not self.events:
            return None
        last = self.events[-1]
        if last.speedup_estimate is not None and self.baseline == self._rate_baseline:
            return last.speedup_estimate  # the engine's own figure, against this very baseline
        rate = self._decode_rate()
        return rate / self.baseline if rate else None

    def _update_label(self) -> None:
        """The speedup as words.speedup_words says it ("1.41×"; "no drafts used"; "the computer was
        busy"), and the caption: the one tokens/s (the first token's time before there is one) vs
        plain decoding's, τ, and why drafting is off."""
        last = self.events[-1] if self.events else None
        tau, busy = (last.tau, last.busy) if last else (None, False)
        words = speedup_words(self._speedup(), tau, busy=bool(busy), times="×", steps=len(self.events))
        figure = words is not None and words[:1] in "0123456789≤"  # "1.41× plain" or "≤1.00× plain (…)"
        self.speedup_label.setText(UNKNOWN if words is None else words.split(" ")[0] if figure else words)
        plain = f"{self.baseline:.1f} tokens/s plain" if self.baseline else "plain decoding not measured yet"
        if last is None:
            self.caption.setText(f"No steps yet · {plain}")
            return
        rate, first = self._decode_rate(), self.events[0].elapsed_ms
        head = rate_text(rate) if rate else f"first token after {first:.0f} ms" if first else rate_text(None)
        note = f" · {last.drafting}" if last.drafting else ""
        self.caption.setText(f"{head} vs {plain} · τ {last.tau:.2f}{note}")

    # ------------------------------------------------------------------ axes and lines

    def _update_baseline_line(self) -> None:
        if not self.baseline:
            self.baseline_series.clear()
            return
        self.baseline_series.replace([QPointF(0.0, self.baseline), QPointF(self.x_axis.max(), self.baseline)])

    def _grow_axes(self) -> None:
        """Grow (never shrink, within an answer) to round ends, so the axes do not jitter every step."""
        rate_top = max(self.max_rate, self.baseline or 0.0) * 1.1  # headroom: the line never touches the top
        tops = {}
        for axes, value in (
            ((self.x_axis, self.tau_x_axis), self.elapsed_s),
            ((self.rate_axis,), rate_top),
            ((self.tau_axis,), self.max_tau + 0.5),
        ):
            if value > axes[0].max():
                tops.update((axis, nice_ceiling(value)) for axis in axes)
        if tops:
            self._set_axes(tops)
            self._update_baseline_line()  # spans the whole x range
            self.select_step(self.selected)  # the vertical lines span the new y ranges

    def _set_axes(self, tops: dict | None = None) -> None:
        """Set the axes' ranges (0 to ``tops[axis]``; the others keep theirs) and round tick spacings,
        as many as the chart views have room for. Sized from the views, not the plot areas: the plot
        areas depend on the tick labels, and that loop need not settle.

        Spacing and range change in the order that keeps the tick count small in between: Qt lays
        out a label for every tick at once, and a rate axis grown from 10 to 5,000 tokens/s under
        its old spacing of 2 held the window for ~200 ms laying out 2,500 labels."""
        tops = tops or {}
        self._align_rounds = ALIGN_ROUNDS
        rate_size, tau_size = self.view.size(), self.tau_view.size()
        most_x = max(2, min(8, int((tau_size.width() - 70) / 55))) if tau_size.width() > 70 else 6
        most_rate = max(2, min(6, int((rate_size.height() - 20) / 28))) if rate_size.height() > 20 else 5
        most_tau = max(1, min(5, int((tau_size.height() - 50) / 24))) if tau_size.height() > 50 else 3
        for axis, most, least in (
            (self.x_axis, most_x, 0.0),
            (self.tau_x_axis, most_x, 0.0),
            (self.rate_axis, most_rate, 0.0),
            (self.tau_axis, most_tau, 1.0),
        ):  # τ: whole tokens
            top = tops.get(axis, axis.max())
            spacing = max(least, tick_interval(top, most))
            if spacing >= axis.tickInterval():  # coarser first, then the wider range
                axis.setTickInterval(spacing)
                axis.setRange(0, top)
            else:  # the narrower range first, then the finer spacing
                axis.setRange(0, top)
                axis.setTickInterval(spacing)

    def resizeEvent(self, event) -> None:  # (Qt's name): more room, more ticks
        super().resizeEvent(event)
        self._set_axes()

    def _on_plot_area_changed(self) -> None:
        if self._align_rounds <= 0:
            return
        self._align_rounds -= 1
        self._align_plot_areas()

    def _align_plot_areas(self) -> None:
        """Line the two plot areas up (their y labels differ in width), so one x is one moment."""
        charts = (self.chart, self.tau_chart)
        areas = [c.plotArea() for c in charts]
        if any(a.width() <= 0 or a.height() <= 0 for a in areas):
            return  # not laid out yet: an empty area would ask for margins as wide as the chart
        natural = [(a.left() - c.margins().left(), a.right() + c.margins().right()) for c, a in zip(charts, areas)]
        left = max(n[0] for n in natural)
        right = min(n[1] for n in natural)
        for chart, (nat_left, nat_right) in zip(charts, natural):
            # bounded: a chart view never lets its minimum size shrink again, so a wild value would stick
            margins = QMargins(
                min(MAX_ALIGN_PX, round(left - nat_left)), 0, min(MAX_ALIGN_PX, round(nat_right - right)), 0
            )
            if margins != chart.margins():
                chart.setMargins(margins)

    def _on_clicked(self, point: QPointF) -> None:
        if not self.xs:
            return
        i = bisect.bisect_left(self.xs, point.x())
        nearest = min((j for j in (i - 1, i) if 0 <= j < len(self.xs)), key=lambda j: abs(self.xs[j] - point.x()))
        self.select_step(nearest)
        self.step_selected.emit(nearest)

    # ------------------------------------------------------------------ light and dark

    def _apply_palette(self) -> None:
        palette = self.palette()
        window = palette.color(QPalette.ColorRole.Window)
        text = palette.color(QPalette.ColorRole.WindowText)
        theme = "dark" if window.lightness() < 128 else "light"
        charts = (self.chart, self.tau_chart)
        if theme != self._theme:
            self._theme = theme
            chart_theme = QChart.ChartTheme.ChartThemeDark if theme == "dark" else QChart.ChartTheme.ChartThemeLight
            for chart in charts:
                chart.setTheme(chart_theme)
        # A theme resets colours and fonts: ours are set after it, every time.
        colours = {k: QColor(v) for k, v in COLOURS[theme].items()}
        faint = QColor(text)
        faint.setAlphaF(0.12)
        small = QFont(self.font())
        small.setPointSizeF(self.font().pointSizeF() * 0.9)
        for chart in charts:
            chart.setBackgroundBrush(window)
            chart.setPlotAreaBackgroundVisible(False)
        for view in (self.view, self.tau_view):
            view.setBackgroundBrush(window)
        self.legend.setFont(small)
        for axis in (self.x_axis, self.rate_axis, self.tau_x_axis, self.tau_axis):
            axis.setLabelsColor(text)
            axis.setTitleBrush(text)
            axis.setTitleFont(small)
            axis.setLabelsFont(small)
            axis.setGridLineColor(faint)
            axis.setLinePenColor(faint)

        self.rate_series.setPen(QPen(colours["rate"], 2.5))
        self.baseline_series.setPen(QPen(colours["baseline"], 2, Qt.PenStyle.DashLine))
        self.tau_series.setPen(QPen(colours["tau"], 0, Qt.PenStyle.NoPen))
        self.tau_series.setBrush(colours["tau"])
        self.tau_mean_series.setPen(QPen(colours["tau_mean"], 2))
        self.marker_series.setColor(colours["marker"])
        self.marker_series.setBorderColor(window)
        for line in (self.marker_line, self.tau_marker_line):
            line.setPen(QPen(colours["marker"], 1))
        entries = [
            ("━━", "rate", self.rate_series),
            ("╍╍", "baseline", self.baseline_series),
            ("●", "tau", self.tau_series),
            ("━", "tau_mean", self.tau_mean_series),
        ]
        self.legend.setText(
            " &nbsp; ".join(
                f'<span style="white-space:nowrap"><b style="color:{colours[key].name()}">{glyph}</b>&nbsp;{series.name()}'
                "</span>"
                for glyph, key, series in entries
            )
            + " &nbsp; <i>across: seconds into the answer</i>"
        )

    def changeEvent(self, event) -> None:  # (Qt's name): a theme switch recolours the charts
        if event.type() == event.Type.PaletteChange:
            self._apply_palette()
        super().changeEvent(event)
