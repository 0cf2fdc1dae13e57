"""The report page: sections of text, tables and charts, written as one self-contained HTML file.

Everything that came from a trace (kernel names, NVTX text, module paths, file paths, warning
texts) is either escaped HTML text or a value inside a chart's JSON spec, which is embedded in
a ``<script type="application/json">`` element with ``<``, ``>`` and ``&`` written as JSON
escapes: nothing a trace holds can open or close an element. Vega draws such values as text
(SVG, or a canvas for charts of many rows) and vega-tooltip escapes them in tooltips. The
Vega, Vega-Lite and vega-embed JavaScript comes from vl-convert's bundle and is inlined, so
the page needs no network.
"""

from __future__ import annotations

import contextlib
import functools
import html
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..report import fmt

#: Vega-Lite version of the bundled JavaScript; Altair's specs must match it.
VL_VERSION = "6.4"
#: Charts with more data rows than this are drawn on a canvas (see :func:`_renderer`).
CANVAS_MIN_ROWS = 4_000


@dataclass
class Chart:
    """One Altair chart; ``name`` names its container and its PNG/SVG file."""

    name: str
    chart: Any
    caption: str = ""


@dataclass
class Table:
    """A small table; every cell is escaped text. A column whose ``units`` entry is ``ns``
    or ``bytes`` holds numbers, written in one unit named in its header, so that its
    figures compare at a glance: the unit of the largest value of every column of the same
    entry (``bytes#token`` keeps a column of another scale apart)."""

    columns: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""
    numeric: Sequence[bool] | None = None
    units: Sequence[str | None] | None = None


@dataclass
class Note:
    """A paragraph; ``kind`` is ``text``, ``lead`` (a sentence of the verdict), ``missing``
    (why a part is absent) or ``warn``."""

    text: str
    kind: str = "text"


@dataclass
class Facts:
    """Key/value pairs shown as a definition list."""

    pairs: Sequence[tuple[str, Any]]


Block = Chart | Table | Note | Facts


@dataclass
class Section:
    """One section of the report."""

    id: str
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> Section:
        """Append blocks; returns the section."""
        self.blocks.extend(blocks)
        return self

    def charts(self) -> list[Chart]:
        """The section's charts."""
        return [b for b in self.blocks if isinstance(b, Chart)]


@functools.cache
def javascript_bundle() -> str:
    """vega-embed, Vega-Lite and Vega in one script, safe to put inside ``<script>``.

    vl-convert builds the bundle in about 1 s, most of a report's time, and always builds
    the same text for one vl-convert and Vega-Lite version; so it is kept in the user's
    cache folder (see :func:`_bundle_cache`) and built only when that has none.
    """
    cache = _bundle_cache()
    if cache is not None:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            return cache.read_text(encoding="utf-8")
    from ..guards import RENDERER_ADDRESS_SPACE, require_address_space

    # (V8 aborts the process natively when it cannot reserve its address space)
    require_address_space("building the report's chart library", RENDERER_ADDRESS_SPACE)
    import vl_convert

    js = vl_convert.javascript_bundle(vl_version=VL_VERSION)
    # a literal "</script" inside the bundle would end the element early
    js = js.replace("</script", "<\\/script")
    if cache is not None:
        with contextlib.suppress(OSError):  # no cache (read-only home...): build each time
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.tmp-{os.getpid()}")
            tmp.write_text(js, encoding="utf-8")
            os.replace(tmp, cache)  # whole or absent, never half-written
    return js


def _bundle_cache() -> Path | None:
    """``$TOKENWIRE_CACHE_DIR`` (or ``$XDG_CACHE_HOME/tokenwire``, ``~/.cache/tokenwire``)
    / the bundle's file, named by the versions that make it; None when there is no home."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        converter = version("vl-convert-python")
    except PackageNotFoundError:
        return None
    root = os.environ.get("TOKENWIRE_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        try:
            root = str(Path(xdg) / "tokenwire") if xdg else str(Path.home() / ".cache/tokenwire")
        except RuntimeError:  # no home folder
            return None
    return Path(root) / f"vega-bundle-vl{VL_VERSION}-vlconvert{converter}.js"


def chart_spec(chart: Any, *, validate: bool = False) -> dict[str, Any]:
    """The Vega-Lite spec of a chart with NaN and infinities made null (JSON has neither).

    Altair's JSON-schema validation walks every data row (seconds for a few thousand); the
    report skips it and the tests validate each chart of a sample report instead, on the
    finished spec (data rows in place).
    """
    spec = _clean(chart.to_dict(validate=False))
    if validate:
        from altair.utils.schemapi import validate_jsonschema
        from altair.vegalite.v6.schema import load_schema

        validate_jsonschema(spec, load_schema())
    return spec


def spec_json(spec: dict[str, Any]) -> str:
    """JSON text of a spec that is safe inside a ``<script type="application/json">``."""
    # (orjson: the standard encoder takes 0.18 s for the 7.4 MB page of 16,384 ranks; _clean
    # has made every NaN null, which orjson would also write)
    text = orjson.dumps(spec).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _clean(value: Any) -> Any:
    if isinstance(value, fmt.Rows):
        return value.rows  # records() already made NaN None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def render(title: str, subtitle: str, sections: list[Section]) -> str:
    """The whole page as HTML text."""
    esc = html.escape
    nav = "".join(f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a></li>' for s in sections)
    body: list[str] = []
    specs: list[str] = []
    for section in sections:
        body.append(f'<section id="{esc(section.id)}"><h2>{esc(section.title)}</h2>')
        for block in section.blocks:
            if isinstance(block, Chart):
                cid = f"chart-{len(specs)}"
                spec = chart_spec(block.chart)
                specs.append(
                    f'<script type="application/json" class="tw-spec" data-for="{cid}" '
                    f'data-renderer="{_renderer(spec)}">{spec_json(spec)}</script>'
                )
                caption = f"<figcaption>{esc(block.caption)}</figcaption>" if block.caption else ""
                body.append(
                    f'<figure><div class="chart" id="{cid}" data-chart="{esc(block.name)}">'
                    f"</div>{caption}</figure>"
                )
            else:
                body.append(_block_html(block))
        body.append("</section>")
    return _TEMPLATE.format(
        title=esc(title),
        subtitle=esc(subtitle),
        nav=nav,
        body="\n".join(body),
        specs="\n".join(specs),
        bundle=javascript_bundle(),
        css=_CSS,
        embed=_EMBED,
    )


def _renderer(spec: dict[str, Any]) -> str:
    """``canvas`` for a chart of more than :data:`CANVAS_MIN_ROWS` data rows, else ``svg``.

    SVG keeps a chart's text searchable and sharp at any zoom, but the browser lays out every
    mark as an element: a report of 16,384 ranks, whose per-rank charts hold 82,000 and
    33,000 marks, took Chromium 5.1 to 9.8 s to draw as SVG and 1.7 to 3.2 s on a canvas.
    """
    return "canvas" if _data_rows(spec) > CANVAS_MIN_ROWS else "svg"


def _data_rows(spec: Any) -> int:
    """Rows of every named dataset and inline ``data.values`` of a spec, its layers and
    concatenated views included."""
    if isinstance(spec, list):
        return sum(_data_rows(v) for v in spec)
    if not isinstance(spec, dict):
        return 0
    rows = 0
    for key, value in spec.items():
        if key == "datasets" and isinstance(value, dict):
            rows += sum(len(v) for v in value.values() if isinstance(v, list))
        elif key == "data" and isinstance(value, dict) and isinstance(value.get("values"), list):
            rows += len(value["values"])
        elif isinstance(value, dict | list) and key not in ("encoding", "params"):
            rows += _data_rows(value)
    return rows


def _block_html(block: Block) -> str:
    esc = html.escape
    if isinstance(block, Note):
        return f'<p class="{esc(block.kind)}">{esc(block.text)}</p>'
    if isinstance(block, Facts):
        items = "".join(f"<dt>{esc(str(k))}</dt><dd>{esc(_cell(v))}</dd>" for k, v in block.pairs)
        return f'<dl class="facts">{items}</dl>'
    numeric = block.numeric or [False] * len(block.columns)
    columns, cells = _in_units(block)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{esc(v)}</td>' if n else f"<td>{esc(v)}</td>"
            for v, n in zip(row, numeric, strict=False)
        )
        + "</tr>"
        for row in cells
    )
    caption = f"<caption>{esc(block.caption)}</caption>" if block.caption else ""
    return (
        f'<div class="table"><table>{caption}<thead><tr>{head}</tr></thead>'
        f"<tbody>{rows}</tbody></table></div>"
    )


def _in_units(table: Table) -> tuple[list[str], list[list[str]]]:
    """The table's headers and cell texts, each column with a unit in one unit."""
    columns = list(table.columns)
    cells = [[_cell(v) for v in row] for row in table.rows]
    units = list(table.units or [])
    for group in dict.fromkeys(u for u in units if u is not None):
        at = [i for i, u in enumerate(units) if u == group]
        values = [row[i] for row in table.rows for i in at]
        name, size, decimals = fmt.column_unit(values, group.split("#")[0])
        for i in at:
            columns[i] = f"{columns[i]} ({name})"
            for row, source in zip(cells, table.rows, strict=True):
                row[i] = fmt.in_unit(source[i], size, decimals)
    return columns, cells


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–"
        return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def atomic_write_text(path: Path, text: str) -> None:
    """Write the page so that a reader sees the old file or the whole new one."""
    from ..output import atomic_write_bytes, make_folder

    make_folder(path.parent)
    atomic_write_bytes(path, text.encode("utf-8"))


def write_images(sections: list[Section], folder: Path) -> list[Path]:
    """Each chart as ``<name>.svg`` and ``<name>.png`` in ``folder``; the paths written."""
    import vl_convert

    from ..output import atomic_write_bytes, make_folder

    make_folder(folder)
    out = []
    for section in sections:
        for chart in section.charts():
            spec = chart_spec(chart.chart)
            svg = folder / f"{chart.name}.svg"
            atomic_write_bytes(
                svg, vl_convert.vegalite_to_svg(spec, vl_version=VL_VERSION).encode("utf-8")
            )
            png = folder / f"{chart.name}.png"
            atomic_write_bytes(
                png, vl_convert.vegalite_to_png(spec, vl_version=VL_VERSION, scale=2)
            )
            out += [svg, png]
    return out


_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d2430;
  margin: 0; background: #f6f7f9; }
header { background: #1d2430; color: #fff; padding: 18px 28px; }
header h1 { margin: 0; font-size: 22px; }
header p { margin: 4px 0 0; color: #c8cfdb; }
nav { padding: 8px 28px; background: #fff; border-bottom: 1px solid #dde1e7; }
nav ul { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 16px; }
nav a { color: #2456a6; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1344px; }
section { background: #fff; border: 1px solid #dde1e7; border-radius: 6px; padding: 6px 20px 14px;
  margin: 16px 0; }
h2 { font-size: 18px; margin: 12px 0 8px; }
figure { margin: 10px 0; }
figcaption { color: #5a6473; font-size: 12.5px; max-width: 900px; }
.chart { min-height: 40px; overflow-x: auto; }
p.lead { font-size: 15px; margin: 6px 0; max-width: 1100px; }
#verdict figure { display: inline-block; vertical-align: top; margin: 6px 18px 0 0; }
#verdict figcaption { max-width: 250px; }
p.missing { background: #fff8e1; border-left: 4px solid #e0a800; padding: 6px 10px; }
p.warn { background: #fdecea; border-left: 4px solid #c62828; padding: 6px 10px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 18px; margin: 8px 0; }
dl.facts dt { color: #5a6473; }
dl.facts dd { margin: 0; }
div.table { overflow-x: auto; margin: 8px 0; }
table { border-collapse: collapse; font-size: 13px; }
caption { text-align: left; color: #5a6473; padding: 4px 0; }
th, td { border-bottom: 1px solid #e6e9ee; padding: 3px 10px; text-align: left;
  vertical-align: top; overflow-wrap: anywhere; }
th { background: #f0f2f5; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
"""

# Render every chart; a failure is logged and shown in place of the chart.
_EMBED = """
(function () {
  for (const el of document.querySelectorAll("script.tw-spec")) {
    const target = document.getElementById(el.dataset.for);
    const opts = {actions: false, renderer: el.dataset.renderer || "svg"};
    vegaEmbed(target, JSON.parse(el.textContent), opts).catch(function (err) {
      target.textContent = "chart failed: " + err;
      console.error(err);
    });
  }
})();
"""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head>
<body>
<header><h1>{title}</h1><p>{subtitle}</p></header>
<nav><ul>{nav}</ul></nav>
<main>
{body}
</main>
{specs}
<script>{bundle}</script>
<script>{embed}</script>
</body>
</html>
"""
