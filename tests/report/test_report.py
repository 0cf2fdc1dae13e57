"""The report without a browser: what each section says for the data there is, the escaping of
trace names, the chart specs (validated against Vega-Lite's schema), PNG/SVG export, the CLI."""

from __future__ import annotations

import gzip
import hashlib
import html
import json
import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from pipeline.cli import cli
from pipeline.dataset.views import connect
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.model.config import load_job
from pipeline.report import build_report, report_context
from pipeline.report.context import open_context
from pipeline.report.traffic import compare, load
from tests.conftest import REPO_ROOT
from tests.report.fixtures import (
    EVIL,
    add_table,
    page_of_small_and_big_charts,
    sample_with_evil_kernel,
)

SAMPLE = REPO_ROOT / "sample_traces"
JOB_YAML = SAMPLE / "job.yaml"


def specs(page: str) -> list[dict]:
    """The chart specs embedded in a report page."""
    found = re.findall(r'<script type="application/json" class="tw-spec"[^>]*>(.*?)</script>', page)
    return [json.loads(s) for s in found]


#: The charts of the linked sample's report, in page order: every section has its data (an
#: NCCL log with topology, timings, a job.yaml with its path for the what-if).
SAMPLE_CHARTS = [
    "verdict_model", "verdict_ranks", "verdict_tokens", "verdict_what_if", "token_journey",
    "bytes_per_step", "bytes_by_phase", "traffic_per_layer", "time_per_rank", "top_kernels",
    "busbw_vs_size", "late_ranks", "wait_transfer", "transports_per_channel", "transport_grid",
    "wire_host_heatmap", "wire_host_demand", "glance_tables",
]  # fmt: skip
#: The same from a context opened without the job.yaml's path: no what-if table.
CONTEXT_CHARTS = [c for c in SAMPLE_CHARTS if c != "verdict_what_if"]


@pytest.fixture(scope="module")
def sample_raw(tmp_path_factory) -> Path:
    """The sample job ingested, not linked."""
    ds = tmp_path_factory.mktemp("raw") / "ds"
    ingest([SAMPLE], ds)
    return ds


@pytest.fixture(scope="module")
def sample_linked(tmp_path_factory) -> Path:
    """The sample job ingested and linked with its job.yaml."""
    ds = tmp_path_factory.mktemp("linked") / "ds"
    ingest([SAMPLE], ds)
    link(ds, config=JOB_YAML)
    return ds


def _files(dataset: Path) -> dict[str, tuple[int, int, str]]:
    """Every file under ``dataset``: its size, mtime and SHA-256, by relative path."""
    return {
        str(f.relative_to(dataset)): (
            f.stat().st_size,
            f.stat().st_mtime_ns,
            hashlib.sha256(f.read_bytes()).hexdigest(),
        )
        for f in sorted(dataset.rglob("*"))
        if f.is_file()
    }


def test_unlinked_sample_reads_token_wire_computed_for_the_report(sample_raw):
    """Observed traffic has one table, token_wire: on a dataset not linked the report reads
    the token_wire link's SQL computes in memory, the same rows tokenwire link stores (its
    phases are link's: forward, backward, other; never a second rule's). Without a job.yaml
    nothing is predicted."""
    ctx = report_context(sample_raw)
    try:
        assert ctx.derived_here
        traffic = load(ctx)
        here = pl.from_arrow(ctx.con.sql("SELECT * FROM token_wire").to_arrow_table())
    finally:
        ctx.con.close()
    assert traffic.observed_from == "token_wire"
    assert traffic.predicted_from is None
    assert traffic.note == "no job.yaml given"
    assert set(traffic.frame["phase"]) <= {"forward", "backward", "other"}
    # link without a job.yaml stores the same observed rows
    stored = _token_wire_linked_without_config(sample_raw)
    keys = ["step", "parallel_dim", "op", "phase"]
    assert_frame_equal(here.sort(keys), stored.sort(keys))
    # observed bytes per step equal a plain sum over the profiler's rows / steps (the NCCL
    # logs of the same ranks record the same calls: one source per rank is counted)
    con = connect(sample_raw)
    obs = con.execute(
        "SELECT op, sum(bytes) / count(DISTINCT step) FROM collectives "
        "WHERE source = 'kineto' GROUP BY op"
    ).fetchall()
    got = compare(traffic).group_by("op").agg(pl.col("bytes").sum())
    got = dict(got.iter_rows())
    for op, per_step in obs:
        assert got[op] == pytest.approx(float(per_step))


def _token_wire_linked_without_config(dataset: Path) -> pl.DataFrame:
    """token_wire of a copy of ``dataset`` linked without a job.yaml."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds"
        shutil.copytree(dataset, ds)
        link(ds)
        con = connect(ds)
        try:
            return pl.from_arrow(con.sql("SELECT * FROM token_wire").to_arrow_table())
        finally:
            con.close()


def test_report_with_a_job_yaml_writes_nothing_and_predicts_as_link(
    sample_raw, sample_linked, tmp_path
):
    """report --config on a job without predictions computes them as tokenwire link --config
    would (the same traffic frame, predictions included) and leaves every file of the
    dataset as it was: names, sizes, mtimes and contents."""
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(sample_raw, ds)
    before = _files(ds)
    res = CliRunner().invoke(
        cli, ["report", str(ds), "--config", str(JOB_YAML), "-o", str(tmp_path / "r.html")]
    )
    assert res.exit_code == 0, res.output
    assert _files(ds) == before
    here = report_context(ds, config=load_job(JOB_YAML))
    linked_before = open_context(sample_linked, config=load_job(JOB_YAML))
    try:
        computed, stored = load(here), load(linked_before)
    finally:
        here.con.close()
        linked_before.con.close()
    assert computed.predicted_from == "token_wire"
    assert_frame_equal(computed.frame, stored.frame)
    assert computed.frame["predicted_bytes"].sum() > 0
    assert "not stored (tokenwire link stores them)" in (tmp_path / "r.html").read_text()


def _ledger_words(dataset: Path) -> dict[tuple[str, str], list[str]]:
    """Per (parallel_dim, op), from the ledger tokenwire link stored: the distinct
    ``status: reason`` (or the status alone) of its items that are not matched, sorted;
    ``["matched"]`` where every item is."""
    con = connect(dataset)
    try:
        rows = con.execute("SELECT parallel_dim, op, status, reason FROM ledger").fetchall()
    finally:
        con.close()
    words: dict[tuple[str, str], set[str]] = {}
    for dim, op, status, reason in rows:
        seen = words.setdefault((dim, op), set())
        if status != "matched":
            seen.add(status if reason is None else f"{status}: {reason}")
    return {key: sorted(seen) or ["matched"] for key, seen in words.items()}


def _bytes_table_reasons(page: str) -> dict[tuple[str, str], str]:
    """The bytes section's table as rendered: (dimension, op) -> its last cell."""
    section = page[page.index('<section id="bytes">') :]
    section = section[: section.index("</section>")]
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows]
    return {(c[0], c[1]): html.unescape(c[-1]) for c in cells if c}


@pytest.mark.parametrize("run", ["sample", "ddp_bucket", "ddp_bucket cut at 25 MB"])
def test_the_reports_reasons_are_the_ledgers(run, sample_linked, tmp_path):
    """Why a dimension and op differ from the model has one rule, the ledger's: the bytes
    table gives, for every (dimension, op), exactly the status and reason of the ledger's
    items that differ (or 'matched'), on the sample and on a recorded CPU run, once with its
    own job.yaml and once with one whose gradient buckets are cut elsewhere (25 MB, not the
    0.1 MB it ran with: the ledger's rows then differ)."""
    from tests.cpu_gloo import DATA

    if run == "sample":
        ds, config = sample_linked, JOB_YAML
    else:
        config = DATA / "ddp_bucket" / "job.yaml"
        if run != "ddp_bucket":
            text = config.read_text().replace("ddp_bucket_mb: 0.1", "ddp_bucket_mb: 25")
            config = tmp_path / "job.yaml"
            config.write_text(text)
        ds = tmp_path / "ds"
        ingest([DATA / "ddp_bucket"], ds, job="ddp_bucket")
        link(ds, config=config)
    expected = _ledger_words(ds)
    if run == "ddp_bucket cut at 25 MB":
        assert expected[("dp", "all_reduce")] != ["matched"]
    else:
        assert set(map(tuple, expected.values())) == {("matched",)}
    out = tmp_path / "r.html"
    build_report(ds, config=config, output=out)
    shown = _bytes_table_reasons(out.read_text())
    assert shown == {key: "; ".join(words) for key, words in expected.items()}


def test_a_job_yaml_that_does_not_fit_is_a_note(sample_raw, tmp_path):
    """A job.yaml whose layout does not fit the traced ranks cannot be linked: the report goes
    on without a prediction (link's tables computed without it) and says why."""
    import shutil

    import yaml

    config = yaml.safe_load(JOB_YAML.read_text())
    config["parallel"]["dp"] = 2 * config["parallel"].get("dp", 1)
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = tmp_path / "ds"
    shutil.copytree(sample_raw, ds)
    out = tmp_path / "r.html"
    build_report(ds, config=tmp_path / "job.yaml", output=out)
    assert "the job.yaml does not fit the traced ranks" in out.read_text()


def test_a_job_yaml_that_contradicts_the_traces_is_the_first_thing_said(sample_raw, tmp_path):
    """The sample (tp=2 x pp=2 x dp=2) reported with a job.yaml of tp=4 x pp=1: the report
    computes link's tables with it, and the verdict opens with the contradictions link finds,
    before any
    sentence; the largest difference it names gives the contradiction as its reason."""
    import re
    import shutil

    text = JOB_YAML.read_text()
    text = re.sub(r"(?m)^  tp: 2$", "  tp: 4", re.sub(r"(?m)^  pp: 2$", "  pp: 1", text))
    (tmp_path / "job.yaml").write_text(text)
    ds = tmp_path / "ds"
    shutil.copytree(sample_raw, ds)
    out = tmp_path / "r.html"
    result = build_report(ds, config=tmp_path / "job.yaml", output=out)
    # the link it computed warned as tokenwire link does (the CLI prints these on stderr)
    assert result.warnings and all(
        "the layout contradicts the traces" in w for w in result.warnings
    )
    page = out.read_text()
    verdict = page[page.index('<section id="verdict">') : page.index("</section>")]
    paragraphs = re.findall(r'<p class="(\w+)">(.*?)</p>', verdict)
    assert paragraphs[0][0] == "warn"
    assert paragraphs[0][1].startswith("job.yaml&#x27;s layout contradicts the traces: ")
    assert "TENSOR_MODEL_PARALLEL_GROUP" in paragraphs[0][1]
    assert "tp=4 x dp=2" in paragraphs[0][1]
    assert paragraphs[1][0] == "lead"
    assert "Reason: job.yaml contradicts the traces: " in paragraphs[1][1]


def test_linked_sample_has_every_section_and_chart(sample_linked, tmp_path):
    out = tmp_path / "r.html"
    result = build_report(sample_linked, config=JOB_YAML, output=out)
    page = out.read_text()
    assert result.sections == [
        "verdict", "ledger", "journey", "bytes", "layers", "time", "bandwidth", "skew", "waits",
        "stragglers", "critical_path", "compute", "topology", "wire", "glance", "quality",
    ]  # fmt: skip
    assert list(result.charts) == SAMPLE_CHARTS
    assert len(specs(page)) == len(result.charts)
    assert "Needs tokenwire link" not in page
    assert "512 B" in page  # embedding vector: hidden 256 x bf16
    assert "job.yaml intra-node" in page  # network peak from the job.yaml


def test_every_chart_spec_is_valid_vega_lite(sample_linked):
    """The report skips Altair's validation for speed; here every chart is validated, as the
    finished spec with its data rows in place."""
    from altair.utils.schemapi import debug_mode

    from pipeline.report import _sections
    from pipeline.report.page import chart_spec

    ctx = open_context(sample_linked, config=load_job(JOB_YAML))
    with debug_mode(False):  # as build_report builds them
        charts = [c for s in _sections(ctx) for c in s.charts()]
    assert [c.name for c in charts] == CONTEXT_CHARTS
    for c in charts:
        chart_spec(c.chart, validate=True)


def test_every_encoding_is_given_as_a_channel_object(sample_linked, monkeypatch):
    """A string or dict given to ``encode`` (``"calls:Q"``, ``alt.condition(...)``) makes
    Altair find its channel class by hashing every class of its schema, some 8 ms each; the
    report gives channel objects (``alt.Tooltip("calls:Q")``, ``alt.ColorValue(**cond)``)."""
    from altair.utils import schemapi

    from pipeline.report import _sections

    wrapped = []
    real = schemapi._FromDict.__init__

    def record(self, classes):
        wrapped.append(1)
        real(self, classes)

    monkeypatch.setattr(schemapi._FromDict, "__init__", record)
    ctx = open_context(sample_linked, config=load_job(JOB_YAML))
    with schemapi.debug_mode(False):  # as build_report builds them
        charts = [c for s in _sections(ctx) for c in s.charts()]
    assert [c.name for c in charts] == CONTEXT_CHARTS
    assert not wrapped


def test_without_job_yaml_shows_how_to_add_a_prediction(sample_raw, tmp_path):
    out = tmp_path / "r.html"
    before = _files(sample_raw)
    result = build_report(sample_raw, output=out)
    assert _files(sample_raw) == before  # (link's tables computed, not stored)
    page = out.read_text()
    assert "No job.yaml given" in page
    assert "--config job.yaml" in page
    assert "Needs the job&#x27;s job.yaml (tokenwire report --config job.yaml" in page
    # link's other tables are computed for the report, and said to be
    assert "not stored (tokenwire link stores them)" in page
    assert {"traffic_per_layer", "late_ranks", "wait_transfer"} <= set(result.charts)


def test_trace_names_are_escaped(sample_raw, tmp_path):
    ds = sample_with_evil_kernel(SAMPLE, tmp_path / "ds")
    out = tmp_path / "r.html"
    build_report(ds, output=out)
    page = out.read_text()
    assert EVIL not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page  # the table cell
    assert any(EVIL in json.dumps(s) for s in specs(page))  # data in the chart spec


def test_png_and_svg_export(sample_linked, tmp_path):
    result = build_report(
        sample_linked, config=JOB_YAML, output=tmp_path / "r.html", png_dir=tmp_path / "img"
    )
    names = {p.name for p in result.images}
    for chart in result.charts:
        assert f"{chart}.png" in names and f"{chart}.svg" in names
    png = (tmp_path / "img" / "bytes_per_step.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert "<svg" in (tmp_path / "img" / "bytes_per_step.svg").read_text()


def test_cli_report(sample_raw, tmp_path):
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(sample_raw), "--config", str(JOB_YAML),
                                   "-o", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert out.read_text().startswith("<!DOCTYPE html>")
    bad = CliRunner().invoke(cli, ["report", str(tmp_path / "none"), "-o", str(out)])
    assert bad.exit_code == 1
    assert f"{tmp_path / 'none'}: does not exist" in bad.output


def test_several_jobs_need_job_option(tmp_path):
    ds = tmp_path / "ds"
    ingest([SAMPLE], ds, job="a")
    # the same trace, uncompressed: other bytes, so not skipped as already ingested
    plain = tmp_path / "rank0.pt.trace.json"
    plain.write_bytes(
        gzip.decompress((SAMPLE / "rank0.1764547204000000000.pt.trace.json.gz").read_bytes())
    )
    ingest([plain], ds, job="b")
    res = CliRunner().invoke(cli, ["report", str(ds), "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 1 and "choose one with --job" in res.output
    res = CliRunner().invoke(cli, ["report", str(ds), "--job", "b", "-o", str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output


def test_three_sources_of_one_call_count_once(sample_linked):
    """The sample job holds each call three times (profiler, NCCL log, Nsight): the report's
    per-layer traffic, skew and bandwidth count the profiler's alone."""
    ctx = open_context(sample_linked, config=load_job(JOB_YAML))
    con = connect(sample_linked)
    sources = {r[0] for r in con.execute("SELECT DISTINCT source FROM collectives").fetchall()}
    assert sources == {"kineto", "nccl_log", "nsys"}
    layers = ctx.query("layer_traffic")
    per_step = con.execute(
        "SELECT sum(bytes) / count(DISTINCT step) FROM token_wire WHERE calls > 0"
    ).fetchone()[0]
    assert layers["bytes_per_step"].sum() == pytest.approx(per_step)
    kineto = con.execute(
        "SELECT count(*) FROM collective_instances WHERE source = 'kineto' AND ranks_seen > 1 "
        "AND skew_ns IS NOT NULL"
    ).fetchone()[0]
    assert ctx.query("skew_by_where")["instances"].sum() == kineto
    kernels = con.execute("SELECT count(*) FROM kernels WHERE source = 'kineto'").fetchone()[0]
    assert ctx.query("top_kernels", limit=10**6)["calls"].sum() == kernels


def test_the_same_data_gives_the_same_page(sample_linked, tmp_path):
    """Ties (two ranks last equally often, equal skews) are broken by value, not by thread
    timing: a report of unchanged data can be diffed against the last one."""
    pages = []
    for name in ("a.html", "b.html"):
        build_report(sample_linked, config=JOB_YAML, output=tmp_path / name)
        pages.append((tmp_path / name).read_bytes())
    assert pages[0] == pages[1]


def test_the_javascript_bundle_is_built_once_and_then_read(tmp_path, monkeypatch):
    import vl_convert

    from pipeline.report import page

    monkeypatch.setenv("TOKENWIRE_CACHE_DIR", str(tmp_path))
    page.javascript_bundle.cache_clear()
    built = page.javascript_bundle()
    cached = list(tmp_path.iterdir())
    assert [p.read_text() for p in cached] == [built]
    assert "vega" in built and "</script" not in built

    def no_build(**_):
        raise AssertionError("built again")

    monkeypatch.setattr(vl_convert, "javascript_bundle", no_build)
    page.javascript_bundle.cache_clear()
    assert page.javascript_bundle() == built
    page.javascript_bundle.cache_clear()


def test_charts_of_many_rows_are_drawn_on_a_canvas():
    html = page_of_small_and_big_charts()
    renderers = re.findall(r'data-for="(chart-\d+)" data-renderer="(\w+)"', html)
    assert renderers == [
        ("chart-0", "svg"),
        ("chart-1", "svg"),
        ("chart-2", "canvas"),
        ("chart-3", "canvas"),
    ]


def test_ring_orders_most_printed_first_in_numeric_order(tmp_path):
    # 25 distinct orders: one printed by 30 ranks, two by 3 ranks each (whose text sorts
    # "10 2" before "2 10"), and 22 by one rank each
    orders = [([0, 1, 2, 3], range(30)), ([10, 2], range(30, 33)), ([2, 10], range(33, 36))]
    orders += [([r, r + 1], [r]) for r in range(100, 122)]
    rows = [
        {"rank": rank, "kind": "ring", "channel": 0, "peers": peers}
        for peers, ranks in orders
        for rank in ranks
    ]
    ds = tmp_path / "ds"
    ds.mkdir()
    files = {"file_id": ["0" * 16], "sha256": ["0" * 64], "path": ["rank0.nccl.log"]}
    files |= {"format": ["nccl_log"], "size_bytes": [1], "ranks": [[0]], "rows": [36]}
    files |= {"warnings": [0], "warning_messages": [[]], "ingested_at_ns": [0]}
    add_table(ds, "files", pl.DataFrame(files), job="j")
    add_table(ds, "topology", pl.DataFrame(rows), job="j")
    out = tmp_path / "r.html"
    build_report(ds, output=out)
    table = out.read_text().split("Ring and tree orders")[1].split("</table>")[0]
    assert "(25; the 20 printed by the most ranks)" in table
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", table)
    shown = [(cells[i + 2], cells[i + 3]) for i in range(0, len(cells), 4)]
    assert shown[:4] == [("0 1 2 3", "30"), ("2 10", "3"), ("10 2", "3"), ("100 101", "1")]
    assert len(shown) == 20 and shown[-1] == ("116 117", "1")


@pytest.mark.parametrize(
    ("value", "text"),
    [(217088.0, "217,088"), (12, "12"), (2.5, "2.5"), (1234.25, "1,234.2"), (None, "–")],
)
def test_counts_show_a_decimal_only_when_they_have_one(value, text):
    from pipeline.report import fmt

    assert fmt.count(value) == text


def test_chart_rows_become_json_with_no_nan_and_nothing_that_ends_the_script():
    """A chart's rows: NaN and infinities of any float column become null, other values stay
    as they are, and the spec's JSON text cannot close the element it sits in."""
    from pipeline.report import fmt
    from pipeline.report.page import spec_json

    frame = pl.DataFrame(
        {
            "bytes": [1.5, float("nan"), float("inf"), None, -float("inf")],
            "share": pl.Series([0.25, 1.0, float("nan"), 2.0, 3.0], dtype=pl.Float32),
            "calls": [1, 2, None, 4, 5],
            "kernel": ["a", "</script><b>", "ü & ß", None, "e"],
        }
    )
    rows = fmt.records(frame)
    assert [r["bytes"] for r in rows] == [1.5, None, None, None, None]
    assert [r["share"] for r in rows] == [0.25, 1.0, None, 2.0, 3.0]
    assert [r["calls"] for r in rows] == [1, 2, None, 4, 5]
    assert [r["kernel"] for r in rows] == ["a", "</script><b>", "ü & ß", None, "e"]
    text = spec_json({"data": {"values": rows}})
    assert "<" not in text and ">" not in text and "&" not in text and "NaN" not in text
    assert json.loads(text) == {"data": {"values": rows}}


def test_waits_section_sums_the_linked_tables(sample_linked):
    """The waiting-or-transferring section: wait and transfer per dimension are the sums of
    collective_waits, the straggler rank is the one step_stragglers names (rank 5, whose
    attention kernels the generator slows), and the critical path's parts add up to it."""
    ctx = open_context(sample_linked, config=load_job(JOB_YAML))
    con = connect(sample_linked)
    by_dim = ctx.query("wait_by_dim")
    wait, transfer = con.execute(
        "SELECT sum(wait_ns), sum(transfer_ns) FROM collective_waits"
    ).fetchone()
    assert by_dim["wait_ns"].sum() == wait and by_dim["transfer_ns"].sum() == transfer
    assert (
        by_dim["calls"].sum() == con.execute("SELECT count(*) FROM collective_waits").fetchone()[0]
    )
    ranks = ctx.query("straggler_ranks", limit=10)
    assert ranks["rank"][0] == 5
    # the share is of all the waiting in the traced steps, and orders the table
    caused, total = con.execute(
        "SELECT sum(caused_wait_ns) FILTER (WHERE rank = 5), sum(step_wait_ns) FROM step_stragglers"
    ).fetchone()
    assert ranks["wait_share"][0] == pytest.approx(caused / total)
    assert ranks["wait_share"].to_list() == sorted(ranks["wait_share"].to_list(), reverse=True)
    assert ranks["steps"][0] == con.execute("SELECT count(DISTINCT step) FROM steps").fetchone()[0]
    # rank 5 delayed dp in one step and tp in the other: equally often, so the first by name,
    # in every run (DuckDB's mode() left the tie to thread timing)
    dims = con.execute(
        "SELECT list(DISTINCT parallel_dim ORDER BY parallel_dim) FROM step_stragglers "
        "WHERE rank = 5"
    ).fetchone()[0]
    assert dims == ["dp", "tp"]
    for _ in range(20):
        again = ctx.query("straggler_ranks", limit=10)
        assert again["parallel_dim"][0] == "dp"
        assert again.equals(ranks)
    # per rank: its calls' wait and transfer, and the rank it waited for longest
    by_rank = ctx.query("wait_by_rank")
    want = con.execute(
        "SELECT rank, count(*), sum(wait_ns), sum(transfer_ns) FROM collective_waits "
        "GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert by_rank.select("rank", "calls", "wait_ns", "transfer_ns").rows() == want
    waited_for = con.execute(
        "SELECT rank, arg_max(late_rank, w) FROM (SELECT rank, late_rank, sum(wait_ns) AS w "
        "FROM collective_waits WHERE late_rank <> rank AND wait_ns > 0 GROUP BY ALL) "
        "GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert by_rank.select("rank", "waited_most_for").rows() == waited_for
    # whom the ranks waited for, over every step: rank 5 first
    late = ctx.query("wait_for_rank")
    assert late["late_rank"][0] == 5
    assert (
        late["wait_ns"].sum()
        == con.execute(
            "SELECT sum(wait_ns) FROM collective_waits WHERE late_rank <> rank"
        ).fetchone()[0]
    )
    split = ctx.query("critical_path_split")
    total = con.execute("SELECT sum(dur_ns) FROM critical_path").fetchone()[0]
    assert split["dur_ns"].sum() == total
    assert split["share"].sum() == pytest.approx(1.0)
    assert "compute" in split["part"].to_list()
    assert any(p.startswith("transfer ") for p in split["part"])


def test_the_recorded_straggler_run_reports_its_rank_steps_and_layer(tmp_path):
    """The CPU/gloo run where rank 1 sleeps 30 ms in its second block's forward
    (tests/data/cpu_gloo/straggler): the waiting section says the waiting was for rank 1,
    the stragglers section names rank 1 in steps 2 and 3, busy in Block_1, and the critical
    path section has its parts."""
    from tests.cpu_gloo import DATA, linked

    ds = linked("straggler", tmp_path / "ds")
    out = tmp_path / "r.html"
    result = build_report(ds.path, config=DATA / "straggler" / "job.yaml", output=out)
    assert {"waits", "stragglers", "critical_path"} <= set(result.sections)
    page = out.read_text()
    assert re.search(r"of the waiting was for rank 1, the last to arrive", page)
    row = re.search(
        r"<tr><td[^>]*>1</td><td[^>]*>[\d.]+%</td><td[^>]*>[^<]+</td><td[^>]*>2 \(2, 3\)</td>"
        r"(.*?)</tr>",
        page,
    )
    assert row is not None and "Block_1" in row.group(1)
    assert "The critical path of each step, across ranks" in page


def test_ledger_section_names_the_items_a_change_resizes(sample_linked, tmp_path):
    """The sample linked against a job.yaml with micro_batch 4: the ledger section lists the
    resized TP and PP items with the predicted and observed calls x size and the reason; the
    sample's own job.yaml gives a ledger with nothing that differs."""
    import shutil

    import yaml

    config = yaml.safe_load(JOB_YAML.read_text())
    config["batch"]["micro_batch"] = 4
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(config))
    ds = tmp_path / "ds"
    shutil.copytree(sample_linked, ds)
    link(ds, config=tmp_path / "job.yaml")
    ctx = open_context(ds, config=load_job(tmp_path / "job.yaml"))
    items = ctx.query("ledger_items", limit=40)
    assert set(items["status"]) == {"size differs"}
    assert set(items["parallel_dim"]) == {"tp", "pp"}
    out = tmp_path / "r.html"
    build_report(ds, config=tmp_path / "job.yaml", output=out)
    page = out.read_text()
    assert "72 × 262 kB" in page and "144 × 131 kB" in page
    assert "check micro_batch" in page
    same = open_context(sample_linked, config=load_job(JOB_YAML))
    assert same.query("ledger_items", limit=40).height == 0
    assert same.query("ledger_dims")["differing_rows"].sum() == 0


def test_a_trace_without_steps_is_reported_as_one_step(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7, "ts": 100,
         "dur": 30},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 7, "tid": 7,
         "ts": 130, "dur": 1},
        {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 7, "tid": 8,
         "ts": 131, "dur": 20, "args": {"Input Dims": [[1024]], "Input type": ["float"]}},
    ]  # fmt: skip
    src = tmp_path / "infer"
    src.mkdir()
    (src / "rank0.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    ds = tmp_path / "ds"
    ingest([src], ds, job="infer")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(ds), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 rank(s) recorded no ProfilerStep ranges" in out.read_text()


def test_steps_from_a_named_marker_are_reported_with_it(tmp_path):
    events = [
        {"ph": "X", "cat": "user_annotation", "name": f"decode {k}", "pid": 7, "tid": 7,
         "ts": 100 + 100 * k, "dur": 60}
        for k in range(3)
    ] + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 7, "tid": 7,
         "ts": 110 + 100 * k, "dur": 30}
        for k in range(3)
    ]  # fmt: skip
    src = tmp_path / "infer"
    src.mkdir()
    (src / "rank0.json").write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    ds = tmp_path / "ds"
    assert not ingest([src], ds, job="infer", step_marker=r"decode (\d+)").errors
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(ds), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text()
    assert "1 rank(s) recorded no ProfilerStep ranges: their steps are the ranges of" in page
    assert r"(decode (\d+))" in page
    assert "spanning the whole trace" not in page


@pytest.fixture(scope="module")
def many_ranks(tmp_path_factory) -> Path:
    """The generated job of 1,024 ranks (128 hosts), linked."""
    from tests.report.fixtures import large_job

    ds = tmp_path_factory.mktemp("many") / "ds"
    large_job(ds, ranks=1024)
    return ds


def _charts_by_name(dataset: Path) -> dict:
    from altair.utils.schemapi import debug_mode

    from pipeline.report import _sections

    ctx = open_context(dataset)
    with debug_mode(False):  # as build_report builds them
        return {c.name: c for s in _sections(ctx) for c in s.charts()}


def _values(spec: dict) -> list[list[dict]]:
    """Every inline data list of a spec, outermost first."""
    found = []
    if isinstance(spec, dict):
        if isinstance(spec.get("data"), dict) and "values" in spec["data"]:
            found.append(spec["data"]["values"])
        for key, value in spec.items():
            if key != "data":
                found += _values(value)
    elif isinstance(spec, list):
        for item in spec:
            found += _values(item)
    return found


def test_the_benchmarks_few_rank_report_does_what_a_many_rank_one_does(
    many_ranks, tmp_path, monkeypatch
):
    """bench_link measures the report's fixed work on the generated job of FIXED_RANKS
    ranks: its report draws the same charts and runs the same queries as a many-rank one."""
    from benchmarks.bench_link import FIXED_RANKS
    from pipeline.report.context import Context
    from tests.report.fixtures import large_job

    asked: list[str] = []
    query = Context.query

    def recording(self, name, **params):
        asked.append(name)
        return query(self, name, **params)

    monkeypatch.setattr(Context, "query", recording)
    large_job(tmp_path / "ds", ranks=FIXED_RANKS)
    few = _charts_by_name(tmp_path / "ds")
    few_queries = sorted(asked)
    asked.clear()
    many = _charts_by_name(many_ranks)
    assert sorted(few) == sorted(many) and len(few) >= 10
    assert few_queries == sorted(asked) and len(asked) >= 40


def test_many_ranks_charts_are_binned_and_capped_and_say_so(many_ranks):
    from pipeline.report.page import chart_spec
    from pipeline.report.timing import LATE_TOP, RANK_BINS
    from pipeline.report.wire import TOP_HOSTS

    charts = _charts_by_name(many_ranks)
    for name in ("time_per_rank", "late_ranks", "wire_host_demand"):
        chart_spec(charts[name].chart, validate=True)

    per_rank = _values(chart_spec(charts["time_per_rank"].chart))[0]
    assert len(per_rank) == RANK_BINS * 4  # 256 bins of 4 ranks, 4 parts each
    assert {r["rank"] for r in per_rank} == set(range(0, 1024, 4))
    assert all(r["last_rank"] == r["rank"] + 3 for r in per_rank)
    assert all(r["rank"] <= r["max_rank"] <= r["last_rank"] for r in per_rank)
    assert "bin of 4 consecutive ranks" in charts["time_per_rank"].caption

    late = _values(chart_spec(charts["late_ranks"].chart))[0]
    assert len(late) == LATE_TOP + 1
    skews = [r["late_skew_ms"] for r in late[:-1]]
    assert skews == sorted(skews, reverse=True)
    assert late[-1]["who"].startswith("other ") and late[-1]["rank"] is None
    assert f"the {LATE_TOP} that made the others wait longest" in charts["late_ranks"].caption

    demand = _values(chart_spec(charts["wire_host_demand"].chart))[0]
    hosts = {r["host"] for r in demand}
    assert len(hosts) == TOP_HOSTS + 1 and "other hosts (mean)" in hosts
    assert f"mean of the other {128 - TOP_HOSTS:,} hosts" in charts["wire_host_demand"].caption


def test_many_ranks_aggregates_keep_the_totals(many_ranks):
    """The late bars (the rest's bar as a mean per rank) and the host lines (the other hosts'
    line as their mean) add up to every rank's and host's total."""
    ctx = open_context(many_ranks)
    by_rank = ctx.query("skew_by_rank")
    from pipeline.report.page import chart_spec
    from pipeline.report.timing import LATE_TOP
    from pipeline.report.wire import demand_step

    demand = demand_step(ctx)

    charts = _charts_by_name(many_ranks)
    late = _values(chart_spec(charts["late_ranks"].chart))[0]
    assert late[-1]["ranks"] == by_rank.height - LATE_TOP
    assert sum(r["late_count"] * r["ranks"] for r in late) == pytest.approx(
        by_rank["late_count"].sum()
    )
    assert sum(r["late_skew_ms"] * r["ranks"] for r in late) == pytest.approx(
        by_rank["late_skew_ns"].sum() / 1e6
    )
    drawn = _values(chart_spec(charts["wire_host_demand"].chart))[0]
    kept = {r["host"] for r in drawn} - {"other hosts (mean)"}
    total = demand["gbps"].sum()
    drawn_total = sum(r["gbps"] for r in drawn if r["host"] in kept) + sum(
        r["gbps"] for r in drawn if r["host"] == "other hosts (mean)"
    ) * (demand["host"].n_unique() - len(kept))
    assert drawn_total == pytest.approx(total)


def test_small_jobs_draw_one_bar_per_rank_and_every_host(sample_linked):
    from pipeline.report.page import chart_spec

    charts = _charts_by_name(sample_linked)
    per_rank = _values(chart_spec(charts["time_per_rank"].chart))[0]
    assert sorted({r["rank"] for r in per_rank}) == list(range(8))
    assert "bin of" not in charts["time_per_rank"].caption
    late = chart_spec(charts["late_ranks"].chart)
    assert all("who" not in r for r in _values(late)[0])
    # every field a tooltip names is in the bars' rows (the capped chart's are not)
    fields = {t["field"] for t in late["encoding"]["tooltip"]}
    assert fields <= set(_values(late)[0][0]) and "ranks" not in fields
    assert charts["wire_host_demand"].caption == "Peaks and percentiles: view wire_demand_peaks."


def test_many_ranks_wait_table_lists_the_ranks_that_waited_longest(many_ranks):
    from altair.utils.schemapi import debug_mode

    from pipeline.report import _sections
    from pipeline.report.page import Table
    from pipeline.report.waits import WAIT_TOP

    ctx = open_context(many_ranks)
    with debug_mode(False):  # as build_report builds them
        waits = next(s for s in _sections(ctx) if s.id == "waits")
    table = next(b for b in waits.blocks if isinstance(b, Table) and "waited longest" in b.caption)
    assert table.caption.startswith(f"The {WAIT_TOP} of 1,024 ranks that waited longest")
    assert len(table.rows) == WAIT_TOP
    longest = ctx.query("wait_by_rank").sort(["wait_ns", "rank"], descending=[True, False])
    assert [r[0] for r in table.rows] == longest["rank"].head(WAIT_TOP).to_list()


def test_many_ranks_host_heatmap_folds_the_quieter_hosts(many_ranks):
    from pipeline.report.page import chart_spec
    from pipeline.report.wire import HEAT_HOSTS, OTHER_HOSTS

    chart = _charts_by_name(many_ranks)["wire_host_heatmap"]
    chart_spec(chart.chart, validate=True)
    cells = _values(chart_spec(chart.chart))[0]
    hosts = {r["src_host"] for r in cells} | {r["dst_host"] for r in cells}
    assert len(hosts) == HEAT_HOSTS + 1 and OTHER_HOSTS in hosts
    assert len(cells) <= (HEAT_HOSTS + 1) ** 2
    matrix = open_context(many_ranks).query("wire_host_matrix")
    assert sum(r["bytes_per_step"] for r in cells) == pytest.approx(matrix["bytes_per_step"].sum())
    assert f"The {HEAT_HOSTS} of 128 hosts that send and receive the most" in chart.caption


def test_small_jobs_heatmap_has_every_host(sample_linked):
    from pipeline.report.page import chart_spec

    chart = _charts_by_name(sample_linked)["wire_host_heatmap"]
    matrix = open_context(sample_linked).query("wire_host_matrix")
    assert len(_values(chart_spec(chart.chart))[0]) == matrix.height
    assert chart.caption == (
        "The diagonal stays inside a host (NVLink, PCIe, shared memory); the rest crosses the "
        "network."
    )


def test_a_column_of_durations_or_bytes_is_written_in_one_unit():
    """923 µs and 1.04 ms in one column read as 0.923 and 1.04 ms, not 923 and 1.04; columns
    of the same entry share the unit, and ``bytes#token`` keeps a column of its own."""
    from pipeline.report.page import Table, _block_html

    table = Table(
        ["what", "time", "observed", "predicted", "per token"],
        [["a", 923_000, 40_000_000, 999_000, 37_100], ["b", 1_040_000, None, 2_000_000, 512]],
        units=[None, "ns", "bytes", "bytes", "bytes#token"],
    )
    page = _block_html(table)
    heads = re.findall(r"<th>(.*?)</th>", page)
    assert heads == ["what", "time (ms)", "observed (MB)", "predicted (MB)", "per token (kB)"]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", page)]
    assert cells[1:] == [
        ["a", "0.92", "40.0", "1.0", "37.1"],
        ["b", "1.04", "–", "2.0", "0.5"],
    ]


def test_per_layer_chart_shows_each_transformer_layer_forward_and_backward(sample_linked):
    """The sample's 4 layers (2 a stage; stage 1's named TransformerLayer_0 and _1 again) each
    forward and backward, by short label with the model's layer number; gradient buckets
    under their layers; nothing unattributed."""
    from pipeline.report.page import chart_spec

    chart = _charts_by_name(sample_linked)["traffic_per_layer"]
    (rows,) = _values(chart_spec(chart.chart))
    seen = {(r["layer_index"], r["phase"]) for r in rows if r["layer_kind"] != "other"}
    assert {(i, p) for i in range(4) for p in ("forward", "backward")} <= seen
    bars = {r["bar"] for r in rows}
    assert {f"TransformerLayer_{i % 2} (layer {i})" for i in range(4)} <= bars
    assert not any(b.startswith(("DistributedDataParallel", "(unattributed)")) for b in bars)
    assert "gradient_bucket" not in bars  # split over its layers
    full = {r["layer"] for r in rows if r["bar"] == "TransformerLayer_1 (layer 3)"}
    assert full == {
        "DistributedDataParallel_0/Float16Module_0/GPTModel_0/TransformerBlock_0/TransformerLayer_1"
    }
