"""The curve of perf/bench_batching.py --json as an SVG picture (no plotting package needed):
throughput of N requests at once against N, as a multiple of the sequential rate, one line
per JSON file (e.g. the FLOAT decoder and a prepared export), with the ideal N x for scale.

    python perf/plot_batching.py RESULT.json [MORE.json ...] --out perf/batching_curve.svg
"""
from __future__ import annotations

import argparse
import json
import math
import sys

WIDTH, HEIGHT, MARGIN = 640, 400, 56
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def curve_points(result: dict) -> list[tuple[int, float]]:
    """(requests at once, ratio to the sequential rate) of one bench_batching result."""
    rows = result.get("curve")
    if not rows:
        raise ValueError("the result has no 'curve' (run bench_batching with --sections curve)")
    return [(int(r["concurrent"]), float(r["ratio_to_sequential"])) for r in rows]


def svg(series: list[tuple[str, list[tuple[int, float]]]]) -> str:
    n_max = max(n for _, pts in series for n, _ in pts)
    y_max = math.ceil(max([r for _, pts in series for _, r in pts] + [4.0]) + 0.5)
    span = math.log2(max(n_max, 2))

    def x(n):  # requests on a log2 axis
        return MARGIN + (WIDTH - 2 * MARGIN) * math.log2(n) / span

    def y(r):
        return HEIGHT - MARGIN - (HEIGHT - 2 * MARGIN) * r / y_max

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>']
    for r in range(0, y_max + 1):
        out.append(f'<line x1="{MARGIN}" x2="{WIDTH - MARGIN}" y1="{y(r):.1f}" y2="{y(r):.1f}" '
                   f'stroke="#ddd"/><text x="{MARGIN - 8}" y="{y(r) + 4:.1f}" '
                   f'text-anchor="end">{r}x</text>')
    n = 1
    while n <= n_max:
        out.append(f'<text x="{x(n):.1f}" y="{HEIGHT - MARGIN + 18}" text-anchor="middle">{n}'
                   f'</text>')
        n *= 2
    out.append(f'<text x="{WIDTH / 2}" y="{HEIGHT - 12}" text-anchor="middle">requests at once'
               f'</text>')
    out.append(f'<text x="16" y="{HEIGHT / 2}" transform="rotate(-90 16 {HEIGHT / 2})" '
               f'text-anchor="middle">tokens/s against one after another</text>')
    ideal = " ".join(f"{x(n):.1f},{y(min(n, y_max)):.1f}" for n in (1, min(n_max, y_max)))
    out.append(f'<polyline points="{ideal}" fill="none" stroke="#999" stroke-dasharray="4 4"/>')
    for i, (label, pts) in enumerate(series):
        colour = COLOURS[i % len(COLOURS)]
        line = " ".join(f"{x(n):.1f},{y(r):.1f}" for n, r in pts)
        out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for n, r in pts:
            out.append(f'<circle cx="{x(n):.1f}" cy="{y(r):.1f}" r="3" fill="{colour}">'
                       f'<title>{n}: {r:.2f}x</title></circle>')
        out.append(f'<text x="{MARGIN + 8}" y="{MARGIN + 16 * i}" fill="{colour}">{label}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="bench_batching.py --json outputs")
    ap.add_argument("--out", required=True, help="the SVG to write")
    args = ap.parse_args(argv)
    series = []
    for path in args.results:
        with open(path) as f:
            result = json.load(f)
        series.append((f"{result.get('model', path)}, {result.get('layers', '?')} layers",
                       curve_points(result)))
    with open(args.out, "w") as f:
        f.write(svg(series))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
