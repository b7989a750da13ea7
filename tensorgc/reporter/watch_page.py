"""The page of warn_memory_growth's report (watch.py): the sampled memory over the steps and
each holder's share, as an inline SVG, then the holders' table with their chains. One
self-contained file, no script; every string from the user's program escaped; bounded (at most
1,024 points, ten holders, names already cut by watch.py).
"""
from __future__ import annotations

import html
from typing import Any, Dict, List, Tuple

__all__ = ["page_html"]

_W, _H, _PAD = 900, 320, 60
_COLORS = ("#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")


def _mib(n: float) -> str:
    return f"{n / 1048576:.1f} MiB"


def page_html(fc: Any, points: List[Tuple[int, float]],
              holder_points: Dict[str, List[Tuple[int, float]]]) -> str:
    """The page of ``fc`` (watch.Forecast, which imports this module): ``points`` (step, bytes sampled), the forecast's holders drawn as what each
    adds from the growth's first step at its measured rate a step."""
    esc = html.escape
    pts = points[-1024:] or [(fc.step, 0.0)]
    s0, s1 = pts[0][0], max(pts[-1][0], pts[0][0] + 1)
    vmax = max(max(v for _, v in pts), 1.0)

    def xy(step: float, v: float) -> str:
        x = _PAD + (step - s0) / (s1 - s0) * (_W - 2 * _PAD)
        y = _H - _PAD + 10 - v / vmax * (_H - 2 * _PAD)
        return f"{x:.1f},{y:.1f}"

    lines = [f'<polyline fill="none" stroke="#000" stroke-width="1.5" points="'
             f'{" ".join(xy(s, v) for s, v in pts)}"><title>sampled</title></polyline>']
    legend = ['<li><span style="background:#000"></span>sampled (the step minima)</li>']
    for i, (name, per) in enumerate(fc.holders[:len(_COLORS)]):
        c = _COLORS[i]
        a, b = max(fc.since_step, s0), s1
        lines.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                     f'{xy(a, 0)} {xy(b, per * (b - fc.since_step))}">'
                     f'<title>{esc(name)}</title></polyline>')
        legend.append(f'<li><span style="background:{c}"></span>{esc(name)}: '
                      f'{esc(_mib(per))} a step</li>')
    axis = (f'<text x="{_PAD}" y="{_H - 15}">step {s0}</text>'
            f'<text x="{_W - _PAD}" y="{_H - 15}" text-anchor="end">step {s1}</text>'
            f'<text x="5" y="{_PAD - 25}">{esc(_mib(vmax))}</text>')
    rows = []
    for i, (name, per) in enumerate(fc.holders):
        chain = fc.chains[i] if i < len(fc.chains) else ""
        seen = holder_points.get(name, [])
        at = ", ".join(f"step {s}: {_mib(v)}" for s, v in seen[-5:])
        rows.append(f"<tr><td>{esc(name)}</td><td>{esc(_mib(per))}</td>"
                    f"<td><code>{esc(chain)}</code></td><td>{esc(at)}</td></tr>")
    who = f" (rank {fc.rank})" if fc.rank is not None else ""
    title = f"tensorgc: {fc.device}{who} memory grows by {_mib(fc.bytes_per_step)} a step"
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font:14px sans-serif;margin:20px;max-width:1000px}}
svg text{{font:12px sans-serif}} ul.l{{list-style:none;padding:0}}
ul.l span{{display:inline-block;width:14px;height:4px;margin-right:6px;vertical-align:middle}}
table{{border-collapse:collapse}} td,th{{border:1px solid #ccc;padding:4px;text-align:left;
vertical-align:top}} code{{word-break:break-all}}</style></head><body>
<h1>{esc(title)}</h1>
<p>{esc(fc.text)}</p>
<svg width="{_W}" height="{_H}" viewBox="0 0 {_W} {_H}" role="img">
<rect x="0" y="0" width="{_W}" height="{_H}" fill="#fff"/>{"".join(lines)}{axis}</svg>
<ul class="l">{"".join(legend)}</ul>
<p>Each holder's line is what it adds at its measured rate from step {fc.since_step}, the
growth's first step; tensorgc.growth() measured it between two sampled steps.</p>
<table><tr><th>holder</th><th>a step</th><th>owner chain</th><th>measured</th></tr>
{"".join(rows)}</table></body></html>
"""
