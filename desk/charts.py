"""Server-rendered SVG line charts for the staff desk: no script library, no
CDN, readable without JavaScript. Colours come from static/desk.css."""

from datetime import datetime, timedelta

from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

WIDTH, HEIGHT = 720, 200
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 28, 26


def nice_ceiling(value: float) -> float:
    """1, 2 or 5 times a power of ten, at least value (and at least 1)."""
    if value <= 1:
        return 1
    power = 10 ** (len(str(int(value))) - 1)
    for step in (1, 2, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power


def label(value: float, unit: str) -> str:
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{round(value, 1):g} s"
    return f"{value:g}"


def line_chart(
    *,
    title: str,
    series: list[tuple[str, list[float | None], str, str]],
    start: datetime,
    bucket_seconds: int,
    unit: str = "",
    summary: str = "",
) -> SafeString:
    """series: (legend, one value per bucket or None for no data, css class,
    "bars" or "line"); bars are drawn first, so lines stay visible over them."""
    count = max(len(values) for _, values, _, _ in series)
    top = nice_ceiling(max((v for _, values, _, _ in series for v in values if v is not None), default=0))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(index: int) -> float:
        return LEFT + plot_w * (index + 0.5) / count

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts = [f'<rect class="plot" x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}"/>']
    for fraction in (0, 0.5, 1):
        level = y(top * fraction)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{level:.1f}" y2="{level:.1f}"/>')
        parts.append(
            f'<text class="axis" x="{LEFT - 6}" y="{level + 4:.1f}" text-anchor="end">'
            f"{escape(label(top * fraction, unit))}</text>"
        )
    for index, anchor in ((0, "start"), (count // 2, "middle"), (count - 1, "end")):
        at = start + timedelta(seconds=bucket_seconds * index)
        parts.append(f'<text class="axis" x="{x(index):.1f}" y="{HEIGHT - 8}" text-anchor="{anchor}">{at:%H:%M}</text>')
    legend_x = LEFT
    bar_w = max(1.0, plot_w / count * 0.8)
    for legend, values, css, kind in sorted(series, key=lambda one: one[3] != "bars"):
        if kind == "bars":
            for index, value in enumerate(values):
                if value:
                    parts.append(
                        f'<rect class="{css} bar" x="{x(index) - bar_w / 2:.1f}" y="{y(value):.1f}" '
                        f'width="{bar_w:.1f}" height="{y(0) - y(value):.1f}"/>'
                    )
            values = []
        for run in runs(values):
            if len(run) == 1:
                index, value = run[0]
                parts.append(f'<circle class="{css}" cx="{x(index):.1f}" cy="{y(value):.1f}" r="2.5"/>')
            else:
                points = " ".join(f"{x(index):.1f},{y(value):.1f}" for index, value in run)
                parts.append(f'<polyline class="{css}" points="{points}"/>')
        parts.append(f'<rect class="{css} swatch" x="{legend_x}" y="8" width="14" height="4"/>')
        parts.append(f'<text class="legend" x="{legend_x + 18}" y="14">{escape(legend)}</text>')
        legend_x += 30 + 7 * len(legend)
    body = mark_safe("".join(parts))  # noqa: S308 (built from numbers and escaped text above)
    return format_html(
        '<figure class="desk-chart"><svg viewBox="0 0 {} {}" role="img" aria-label="{}">'
        "<title>{}</title>{}</svg><figcaption>{}</figcaption></figure>",
        WIDTH,
        HEIGHT,
        f"{title}. {summary}",
        title,
        body,
        summary or title,
    )


def runs(values: list[float | None]) -> list[list[tuple[int, float]]]:
    """Consecutive buckets that have a value: a gap (no tickets) breaks the line."""
    result, current = [], []
    for index, value in enumerate(values):
        if value is None:
            if current:
                result.append(current)
            current = []
        else:
            current.append((index, value))
    if current:
        result.append(current)
    return result
