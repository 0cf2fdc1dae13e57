"""The ``tokenwire`` command line: a thin shell over the library.

Each command validates its options, calls one library function and prints. Data goes to
stdout, progress and errors to stderr. Input errors become one ``Error: ...`` line and exit
code 1; wrong invocations exit 2 (click's usage errors); internal errors exit 3.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import click

from . import __version__
from .cli_options import (
    DATASET,
    JOB_NAME,
    MAX_RANK,
    MAX_VOCAB,
    MAX_WORKERS,
    MIN_VOCAB,
    job_choice,
    job_config,
    output_format,
    parsed_by,
)
from .errors import TokenwireError, one_line


class _Group(click.Group):
    """A click group that turns an unexpected exception into one line and exit code 3.

    Set ``TOKENWIRE_DEBUG=1`` to see the traceback instead.
    """

    def invoke(self, ctx: click.Context) -> object:
        from .guards import finish_streams, guard_streams, limit_message

        guard_streams()
        try:
            result = super().invoke(ctx)
            finish_streams()
            return result
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except BrokenPipeError:
            # the reader stopped early (`tokenwire sql ... | head`): not an error; stdout is
            # pointed at /dev/null so the interpreter's last flush cannot fail again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0) from None
        except TokenwireError as exc:  # (a command that let one through)
            _fail(str(exc))
        except KeyboardInterrupt:
            _fail("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
        except Exception as exc:
            known = limit_message(exc) or _part_error(exc)  # (a resource limit, a damaged part)
            if known is not None:
                _fail(str(known))
            if os.environ.get("TOKENWIRE_DEBUG"):
                raise
            _fail(f"internal error: {type(exc).__name__}: {exc}", EXIT_INTERNAL)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenwire")
def cli() -> None:
    """tokenwire: where the bytes of a training job go."""
    if click.get_current_context().invoked_subcommand == "ingest":
        # (before any import of Polars, which reads jemalloc's setting once, when it loads)
        from .allocators import return_freed_memory

        return_freed_memory()
    # A path or value from the input that is not valid text (a file name from an old file
    # system) is printed escaped rather than stopping the command.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")


def _part_error(exc: Exception) -> Exception | None:
    """:func:`pipeline.dataset.location.part_error`, where DuckDB was loaded at all."""
    if "duckdb" not in sys.modules:
        return None
    from .dataset.location import part_error

    return part_error(exc)


EXIT_BAD_INPUT = 1
EXIT_INTERNAL = 3
#: Ctrl-C: the shell's code for a command ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


#: An error or warning line is cut to this many characters: a message quotes paths and
#: values from the input, which may be of any length.
MAX_LINE_CHARS = 1000


def printable(text: str) -> str:
    """``text`` with line breaks, other control characters and bytes that are not UTF-8 (a
    file name from an old file system) written as escapes, so that it prints as one line."""
    text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text if text.isprintable() else "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    return char if char.isprintable() else repr(char)[1:-1]


def _say(kind: str, message: str) -> None:
    """One line on stderr: ``Error: ...``, ``Warning: ...``."""
    click.echo(f"{kind}: {one_line(printable(message), MAX_LINE_CHARS)}", err=True)


def _fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    _say("Error", message)
    raise SystemExit(code)


def _step_marker(value: str | None) -> str | None:
    """``--step-marker``: a pattern both Python's ``re`` (its groups) and Polars read."""
    if value is None:
        return None
    import re

    import polars as pl

    try:
        re.compile(value)
        pl.Series([""]).str.contains(f"^(?:{value})$")
    except (re.error, pl.exceptions.ComputeError) as exc:
        first = (str(exc).splitlines() or [""])[0]
        raise click.BadParameter(f"not a regular expression: {first}") from None
    return value


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, readable=False))
@click.option(
    "-o",
    "--output",
    "dataset",
    required=True,
    type=click.Path(path_type=Path),
    help="Dataset folder (created when missing).",
)
@JOB_NAME
@click.option(
    "--jobs",
    "workers",
    type=click.IntRange(min=1, max=MAX_WORKERS),
    help="Parallel worker processes (default: one per core for large inputs).",
)
@click.option(
    "--scheduler",
    metavar="ADDR",
    help="Hash and parse on a Dask cluster (e.g. tcp://host:8786) instead of local processes; "
    "workers must see the files and the dataset at the same paths (needs tokenwire[dask]).",
)
@click.option(
    "--step-marker",
    metavar="REGEX",
    callback=lambda _ctx, _param, value: _step_marker(value),
    help="In Kineto traces without ProfilerStep#N ranges: the user annotations whose whole "
    "name matches REGEX (an exact name is one) are the steps, numbered by its first capture "
    "group if it has one, else in order from 0.",
)
def ingest(
    paths: tuple[Path, ...],
    dataset: Path,
    job: str | None,
    workers: int | None,
    scheduler: str | None,
    step_marker: str | None,
) -> None:
    """Parse trace files and folders of a job into a Parquet dataset.

    \b
    Example:
      tokenwire ingest traces/ -o run42.tw --job run42
      tokenwire ingest /shared/traces/ -o /shared/run42.tw --scheduler tcp://head:8786

    A file already in the dataset (same sha256) is skipped. Bad files are reported one line
    each on stderr and the exit code is 1; the good files of the run are kept.
    """
    from .ingest.run import ingest as run_ingest
    from .ingest.run import passed

    try:
        with _Progress() as bar:
            summary = run_ingest(
                paths,
                dataset,
                job=job,
                jobs=workers,
                scheduler=scheduler,
                step_marker=step_marker,
                on_start=bar.start,
                on_file=bar.advance,
            )
    except TokenwireError as exc:
        _fail(str(exc))
    _print_summary(summary)
    for folder in summary.unreadable:
        _say("Warning", folder)
    if summary.passed_over:
        _say("Note", f"passed over {len(summary.passed_over)} hidden files or folders and links "
             f"to folders ({passed(summary.passed_over)}): name one to ingest it")  # fmt: skip
    errors = summary.errors
    for out in errors:
        _say("Error", out.error or "failed")
        if out.traceback:  # (TOKENWIRE_DEBUG: the parser bug's traceback, as it is)
            click.echo(out.traceback, err=True, nl=False)
    if any(o.internal for o in errors):
        raise SystemExit(EXIT_INTERNAL)
    if summary.nothing_ingested and not errors:  # (a failed file says why itself)
        _fail(f"nothing was ingested: none of the {len(summary.outcomes)} files found is a "
              f"trace tokenwire reads; {dataset} holds none of them")  # fmt: skip
    if errors:
        raise SystemExit(EXIT_BAD_INPUT)


class _Progress:
    """A progress bar over files on stderr when stderr is a terminal; nothing otherwise
    (click's bar would still print its label line into a log or a pipe)."""

    def __init__(self) -> None:
        self._bar = None
        self._stack = contextlib.ExitStack()

    def start(self, total: int) -> None:
        if not _is_terminal(sys.stderr):
            return
        bar = click.progressbar(length=total, label="ingest", file=sys.stderr, show_pos=True)
        self._bar = self._stack.enter_context(bar)

    def advance(self, outcome: object) -> None:
        if self._bar is not None:
            self._bar.update(1)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # (no isatty, or closed)
        return False


def _print_summary(summary) -> None:
    parts = [f"{summary.count('ingested')} ingested", f"{summary.count('skipped')} skipped"]
    if summary.count("unrecognised"):
        parts.append(f"{summary.count('unrecognised')} not traces")
    if summary.errors:
        parts.append(f"{len(summary.errors)} failed")
    click.echo("files: " + ", ".join(parts), err=True)
    for table, n in summary.rows.items():
        click.echo(f"  {table:<16} {n:>12,} rows", err=True)
    for out in summary.outcomes:
        if out.status == "ingested" and out.warning_count:
            _say("Warning", f"{out.path}: {out.warning_count} warnings")
            for msg in out.warnings[:5]:
                click.echo(f"  {one_line(printable(msg), MAX_LINE_CHARS)}", err=True)
        if out.status == "unrecognised" and out.path.suffix in (".yaml", ".yml"):
            # a job.yaml beside the traces is the usual layout, not a mistake
            _say(
                "Note",
                f"{out.path}: not a trace, skipped (a job config is given to link and report "
                "with --config)",
            )
        elif out.status == "unrecognised":
            # (named alone on the command line, such a file fails the ingest instead)
            _say(
                "Warning",
                f"{out.path}: not a trace format tokenwire reads; skipped, as a folder's other "
                "files are (named alone, it is an error)",
            )


@cli.command()
@DATASET
def tables(dataset: Path) -> None:
    """List the dataset's tables: columns with types and units, and row counts."""
    from .dataset.catalog import describe

    try:
        for table in describe(dataset):
            click.echo(f"{table.name} ({table.rows:,} rows): {table.description}")
            for col in table.columns:
                unit = f" [{col.unit}]" if col.unit else ""
                click.echo(f"  {col.name:<22} {col.type_name:<13}{unit:<12} {col.meaning}")
    except TokenwireError as exc:
        _fail(str(exc))


@cli.command()
@DATASET
@click.argument("query", required=False)
@output_format(["table", "csv", "json", "parquet"], "table")
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write to this file (required for --format parquet).",
)
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Let statements write or reach other files (COPY ... TO, ATTACH, CREATE TABLE...).",
)
def sql(
    dataset: Path, query: str | None, fmt: str, output: Path | None, allow_writes: bool
) -> None:
    """Run SQL over the dataset's tables (one DuckDB view per table).

    \b
    Example:
      tokenwire sql run42.tw "SELECT op, sum(bytes) FROM collectives GROUP BY op"

    Without QUERY, statements are read from stdin. Every statement that returns rows
    prints them, in order (tables and CSV blocks apart by a blank line, one JSON array per
    line); -o FILE holds the last one's. The dataset is opened read-only: DuckDB may read
    only its parts, and statements that write (COPY, INSERT, DELETE, CREATE, ATTACH,
    EXPORT, INSTALL/LOAD) are refused unless --allow-writes is given.
    """
    from .dataset.query import run_queries, write_result
    from .output import refuse_inside

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs -o FILE")
    text = query if query is not None else sys.stdin.read()
    try:
        if output is not None and not allow_writes:
            refuse_inside(dataset, output)
        results = run_queries(dataset, text, allow_writes=allow_writes)
        frames = [f for f in results if f is not None]
        if output is not None:
            write_result(frames[-1] if frames else _empty_frame(), output, fmt)
        else:
            gap = "" if fmt == "json" else "\n"
            shown = frames or [_empty_frame()]
            click.echo(gap.join(format_frame(f, fmt) for f in shown), nl=False)
    except TokenwireError as exc:
        _fail(str(exc))


def _empty_frame():
    import polars as pl

    return pl.DataFrame()


def format_frame(frame, fmt: str) -> str:
    """Render a Polars frame as text for stdout: whole numbers as integers, every other
    number in full (71696416.5, not 7.1696416e7), and numbers as JSON numbers."""
    import polars as pl

    from .dataset.query import flatten_nested

    if fmt == "csv":
        return flatten_nested(frame).write_csv()
    if fmt == "json":
        # (Polars writes a decimal as a JSON string)
        decimals = [c for c, t in frame.schema.items() if isinstance(t, pl.Decimal)]
        return frame.with_columns(pl.col(decimals).cast(pl.Float64)).write_json() + "\n"
    from .guards import terminal_text

    with pl.Config(
        tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=80, tbl_width_chars=200, fmt_float="full"
    ):
        return terminal_text(str(frame)) + "\n"


@cli.command("hang")
@click.argument(
    "paths", nargs=-1, required=True, type=click.Path(path_type=Path), metavar="PATH..."
)
@output_format(["text", "json"], "text", "Plain-text report or JSON.")
@job_choice("With a dataset: the job to check (when it holds several).")
def hang(paths: tuple[Path, ...], fmt: str, job: str | None) -> None:
    """Where a hung job's ranks stopped agreeing, from PyTorch flight recorder dumps.

    PATH is a dump file (JSON or pickle, plain or gzipped), a folder holding one dump per
    rank, or a dataset the dumps were ingested into. For each process group it prints the
    last collective every rank completed, the first sequence id where ranks disagree, the
    ranks that never entered or are stuck in the first unfinished collective, and ops,
    element counts or dtypes that differ between ranks.

    Exit codes: 0 no hang or mismatch found; 4 a hang or mismatch was found; 1 unreadable
    input; 2 wrong invocation.
    """
    from .analysis import hang as hang_analysis

    try:
        if len(paths) == 1 and (paths[0] / "manifest.json").is_file():
            report = hang_analysis.analyze_dataset(paths[0], job=job)
        else:
            report = hang_analysis.analyze_paths(list(paths))
    except TokenwireError as exc:
        _fail(str(exc))
    from .guards import terminal_text

    click.echo(report.to_json() if fmt == "json" else terminal_text(report.to_text()))
    if report.problem_found:
        raise SystemExit(hang_analysis.EXIT_PROBLEM)


@cli.command()
@job_config("job.yaml describing model, layout, batch, dtypes and network.")
@click.option("--model", "preset", help="Model preset (gpt2-small, llama3-70b, ...).")
@click.option("--tp", type=int, help="Tensor-parallel degree.")
@click.option("--pp", type=int, help="Pipeline-parallel degree.")
@click.option("--dp", type=int, help="Data-parallel degree.")
@click.option("--cp", type=int, help="Context-parallel degree.")
@click.option("--ep", type=int, help="Expert-parallel degree.")
@click.option("--vpp", type=int, help="Virtual pipeline stages (interleaving).")
@click.option(
    "--sequence-parallel/--no-sequence-parallel",
    default=None,
    help="Megatron sequence parallelism.",
)
@click.option("--zero-stage", type=click.IntRange(0, 3), help="ZeRO stage 0-3.")
@click.option("--fsdp/--no-fsdp", default=None, help="FSDP full sharding.")
@click.option(
    "--distributed-optimizer/--no-distributed-optimizer",
    default=None,
    help="Megatron distributed optimizer (ZeRO-1).",
)
@click.option("--order", help="Rank order, fastest first (default tp-cp-ep-dp-pp).")
@click.option("--micro-batch", type=int, help="Micro-batch size (sequences).")
@click.option("--global-batch", type=int, help="Global batch size (sequences).")
@click.option("--seq-len", type=int, help="Sequence length (overrides the model's).")
@click.option("--recompute", type=click.Choice(["none", "selective", "full"]))
@click.option(
    "--grad-reduce",
    type=click.Choice(["fp32", "bf16", "fp16", "fp8"]),
    help="Gradient reduction dtype (Megatron default fp32).",
)
@click.option(
    "--rank", default=0, show_default=True, type=click.IntRange(0, MAX_RANK),
    help="Global rank to predict.",
)  # fmt: skip
@click.option(
    "--world-size",
    type=int,
    help="Ranks of the layout; with --from, another world than the observed one.",
)
@output_format(["table", "json"], "table", None)
@click.option(
    "--step-time", type=float, help="Step time in seconds: adds network requirements and MFU."
)
@click.option(
    "--peak-tflops",
    type=float,
    help="Peak dense TFLOP/s of one GPU, for MFU with --step-time or --from (default: the "
    "job.yaml's hardware section).",
)
@click.option(
    "--comm-budget",
    type=float,
    default=0.2,
    show_default=True,
    help="Share of the step communication may take unhidden.",
)
@click.option(
    "--nccl-tests",
    "nccl_tests",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False),
    help="nccl-tests output: fit alpha and bus bandwidth per collective for est_time_s.",
)
@click.option(
    "--from",
    "from_dataset",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="What-if: a linked dataset of the run --config describes; projects the layout the "
    "flags or --target give (or every tp x pp x dp of its world) from its measured step.",
)
@click.option("--job", "job_name", help="With --from: the dataset's job (when it holds several).")
@click.option(
    "--target",
    type=click.Path(exists=True, dir_okay=False),
    help="With --from: a second job.yaml, the layout to project.",
)
def predict(  # noqa: ANN201
    config, preset, rank, fmt, step_time, peak_tflops, comm_budget, nccl_tests,  # noqa: ANN001
    from_dataset, job_name, target, **flags,  # noqa: ANN001
):  # fmt: skip
    """Predicted traffic of one rank per training step (analytic model).

    \b
    tokenwire predict --config sample_traces/job.yaml --rank 3
    tokenwire predict --model llama3-70b --tp 8 --pp 4 --dp 16 --sequence-parallel --format json
    tokenwire predict --config job.yaml --nccl-tests all_reduce_perf.txt
    tokenwire predict --config job.yaml --from dataset/ --tp 4 --pp 2
    """
    import json

    from .model import memory, timing
    from .model import network as net
    from .model.compute import compute_summary, format_compute
    from .model.config import build_job
    from .model.predict import format_table
    from .model.predict import predict as predict_rank

    if config is None and preset is None:
        raise click.UsageError("give --config job.yaml or --model PRESET")
    keys = {
        "seq_len": "model.seq_len",
        "micro_batch": "batch.micro_batch",
        "global_batch": "batch.global_batch",
        "recompute": "recompute",
        "grad_reduce": "dtypes.grad_reduce",
    }
    overrides = {"model.preset": preset}
    overrides |= {keys.get(k, f"parallel.{k}"): v for k, v in flags.items()}
    if from_dataset is not None:
        peak = None if peak_tflops is None else peak_tflops * 1e12
        _what_if(config, from_dataset, job_name, target, overrides, nccl_tests, fmt, peak)
        return
    try:
        job = timing.with_fits(build_job(config, overrides), nccl_tests)
        pred = predict_rank(job, rank)
        reqs = (
            net.requirements(pred, step_time_s=step_time, comm_budget=comm_budget)
            if step_time is not None
            else None
        )
        peak = job.peak_flops if peak_tflops is None else peak_tflops * 1e12
        compute = compute_summary(job, pred.coords["pp"], step_time, peak)
        step = timing.step_summary(job, pred.rows, peak)
        acc = memory.job_accelerator(job)
        warnings = memory.layout_warnings(job, acc)
    except TokenwireError as exc:
        _fail(str(exc))
    for w in warnings:
        _say("Warning", w["message"])
    if fmt == "json":
        summary = timing.summary(job) | {"step": step}
        doc = pred.to_dict() | {"compute": compute, "timing": summary}
        doc |= {"accelerator": memory.accelerator_summary(acc), "warnings": warnings}
        if reqs is not None:
            doc["requirements"] = {
                "step_time_s": step_time,
                "comm_budget": comm_budget,
                "links": [vars(r) | {"headroom": r.headroom} for r in reqs],
            }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(format_table(pred))
    click.echo(timing.format_summary(job))
    click.echo(timing.format_step(step))
    click.echo(format_compute(compute))
    if reqs is not None:
        click.echo("")
        click.echo(net.format_requirements(reqs, step_time_s=step_time, comm_budget=comm_budget))


def _what_if(config, dataset, job_name, target, overrides, nccl_tests, fmt, peak) -> None:  # noqa: ANN001
    """``predict --from``: the observed layout and the targets, ranked by projected step
    (:mod:`pipeline.model.whatif_run`)."""
    from .model import whatif_run

    if config is None:
        raise click.UsageError("--from needs --config: the job.yaml of the observed run")
    try:
        found = whatif_run.what_if(config, dataset, job_name, target, overrides, nccl_tests, peak)
    except TokenwireError as exc:
        _fail(str(exc))
    for line in found.notes_text():
        _say("Note", line)
    for w in found.warnings:
        _say("Warning", w["message"])
    click.echo(found.to_json() if fmt == "json" else found.to_text())


@cli.command()
@click.argument("text_file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, dir_okay=False),
    help="Local tokenizer.json, .tiktoken ranks file or SentencePiece .model; without it a "
    "BPE is trained on the text itself.",
)
@click.option(
    "--train-vocab",
    default=8192,
    type=click.IntRange(MIN_VOCAB, MAX_VOCAB),
    show_default=True,
    help="Vocabulary of the BPE trained on the text when no --tokenizer is given.",
)
@job_config("job.yaml: adds embedding bytes and wire bytes for one epoch.")
@output_format(["table", "json"], "table", None)
def tokens(text_file, tokenizer, train_vocab, config, fmt) -> None:  # noqa: ANN001
    """Words -> tokens -> bytes on the wire for a text corpus.

    \b
    tokenwire tokens poem.txt --tokenizer tokenizer.json --config job.yaml
    """
    import json

    from .model import tokens as tk
    from .model.config import load_job

    try:
        job = load_job(config) if config else None
        count = tk.count_tokens(text_file, tokenizer=tokenizer, train_vocab=train_vocab)
        epoch = tk.epoch_traffic(count.tokens, job) if job is not None else None
    except TokenwireError as exc:
        _fail(str(exc))
    report = tk.tokens_report(count, epoch)
    click.echo(json.dumps(report, indent=2) if fmt == "json" else tk.format_tokens(report))


@cli.command()
@DATASET
@job_config("The job's job.yaml: exact parallel dimensions, tokens per step and predictions.")
def link(dataset: Path, config: Path | None) -> None:
    """Build the derived tables: collectives linked to steps, phases, layers and parallel
    dimensions; collectives matched across ranks; time per rank; bytes per token.

    \b
    Example:
      tokenwire link run42.tw --config job.yaml
    """
    from .link.runner import link as run_link

    try:
        summary = run_link(dataset, config=config)
    except TokenwireError as exc:
        _fail(str(exc))
    for line in summary.warnings:
        _say("Warning", line)
    for table, n in summary.rows.items():
        click.echo(f"  {table:<22} {n:>12,} rows", err=True)


@cli.command()
@DATASET
@job_config("The job's job.yaml: adds the prediction, the model and the network peaks.")
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="HTML file to write.",
)  # fmt: skip
@click.option(
    "--png-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Also write every chart as PNG and SVG into this folder.",
)
@job_choice("Job to report on (needed when the dataset holds several).")
def report(
    dataset: Path, config: Path | None, output: Path, png_dir: Path | None, job: str | None
) -> None:
    """Write one self-contained HTML report of a job (opens offline).

    The dataset is only read: where its job is not linked (or, given a job.yaml, has no
    predictions), link's tables are computed in memory for the report, not stored.

    \b
    Example:
      tokenwire report run42.tw --config job.yaml -o report.html
    """
    _without_jsonschema_format_checkers()
    from .guards import RENDERER_ADDRESS_SPACE, require_address_space
    from .output import make_folder, refuse_inside
    from .report import build_report

    try:
        refuse_inside(dataset, output)
        if png_dir is not None:
            refuse_inside(dataset, png_dir, "--png-dir")
            # (checked before anything is written: a native abort, or an HTML file and no
            # images, would be half an output)
            require_address_space("--png-dir: the chart renderer", RENDERER_ADDRESS_SPACE)
            make_folder(png_dir)
        result = build_report(dataset, config=config, output=output, png_dir=png_dir, job=job)
    except TokenwireError as exc:
        _fail(str(exc))
    for line in result.warnings:
        _say("Warning", line)
    click.echo(
        f"wrote {result.output} ({result.size_bytes / 1e6:.1f} MB, job {result.job}, "
        f"{len(result.charts)} charts)",
        err=True,
    )
    if result.images:
        click.echo(f"wrote {len(result.images)} chart images to {png_dir}", err=True)


def _without_jsonschema_format_checkers() -> None:
    """jsonschema, which altair imports, imports the checker of every string format whose
    package is installed; rfc3987-syntax (which comes with JupyterLab) builds its grammar on
    import: 1.0 to 1.4 s of every report, for a check altair never makes (it validates
    charts without formats). The process is the command's own, so the package is marked
    missing here, which jsonschema takes as not installed."""
    sys.modules.setdefault("rfc3987_syntax", None)


#: Columns a diff table takes in a terminal by default.
DIFF_WIDTH = 120


@cli.command("diff")
@DATASET
@click.argument("job_a")
@click.argument("job_b")
@click.option(
    "--other", type=click.Path(path_type=Path), help="The dataset of JOB_B (default: DATASET)."
)
@output_format(["table", "csv", "json"], "table", "Output format (csv writes one --view).")
@click.option(
    "--view",
    type=click.Choice(["steps", "traffic", "predicted", "layers", "ops"]),
    help="Only this part of the diff (default: all).",
)
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
    help="Write the diff as an offline HTML page here instead of printing it.",
)  # fmt: skip
@click.option(
    "--sql", "query", metavar="QUERY",
    help="Run QUERY ('-': from stdin) over the diff's views (diff_steps, diff_traffic, "
    "diff_predicted, diff_layers, diff_ops) and each job's tables (a_<name>, b_<name>) "
    "instead, and print its result.",
)  # fmt: skip
@click.option(
    "--width", type=click.IntRange(min=0), default=DIFF_WIDTH, show_default=True,
    help="Columns a table may take: wider views print in blocks of columns, each with "
    "the rows' keys (0: one block, as wide as it is).",
)  # fmt: skip
def diff(
    dataset: Path,
    job_a: str,
    job_b: str,
    other: Path | None,
    fmt: str,
    view: str | None,
    html_path: Path | None,
    query: str | None,
    width: int,
) -> None:
    """Compare two linked jobs: what changed on the wire and in time (B - A).

    \b
    Example:
      tokenwire diff runs.tw ddp fsdp
      tokenwire diff run42.tw run42 run43 --other run43.tw --view traffic --format csv
      tokenwire diff runs.tw ddp fsdp --html diff.html
      tokenwire diff runs.tw ddp fsdp --sql "SELECT * FROM diff_traffic WHERE phase='backward'"

    Per parallel dimension, op, phase and layer: calls, bytes, bytes per token, time,
    waiting and transferring, bus bandwidth; step time and its breakdown; the op and kernel
    names whose time changed most; and, when both jobs were linked with a job.yaml, the
    predicted change next to the observed one. Both datasets are opened read-only.
    docs/diff.md describes every column.
    """
    from .diff import VIEWS, diff_jobs, view_descriptions
    from .diff.text import table_text, wrapped
    from .output import refuse_inside

    if query is not None:
        if view is not None or html_path is not None:
            raise click.UsageError("--sql runs one query: give it without --view and --html")
        _diff_query(dataset, job_a, job_b, other, query, fmt)
        return
    if fmt == "csv" and view is None and html_path is None:
        raise click.UsageError("--format csv writes one part of the diff: choose it with --view")
    try:
        if html_path is not None:
            for folder in (dataset, other or dataset):
                refuse_inside(folder, html_path, "--html")
        result = diff_jobs(dataset, job_a, job_b, other=other)
        if html_path is not None:
            _without_jsonschema_format_checkers()
            from .diff.page import write_page

            size = write_page(result, html_path)
            click.echo(f"wrote {html_path} ({size / 1e6:.1f} MB, {job_a} -> {job_b})", err=True)
            return
    except TokenwireError as exc:
        _fail(str(exc))
    names = [f"diff_{view}"] if view is not None else list(VIEWS)
    if fmt == "json":
        parts = ",".join(f'"{n}":{result.views[n].write_json()}' for n in names)
        click.echo("{" + parts + "}")
        return
    for n in names:
        if fmt == "table" and len(names) > 1:
            click.echo(wrapped(f"{n}: {view_descriptions()[n]}", width))
        frame = result.views[n]
        text = table_text(frame, width) if fmt == "table" else format_frame(frame, fmt)
        click.echo(text, nl=False)


def _diff_query(
    dataset: Path, job_a: str, job_b: str, other: Path | None, query: str, fmt: str
) -> None:
    """``tokenwire diff --sql``: the query's result on stdout."""
    from .diff import query_diff

    text = sys.stdin.read() if query == "-" else query
    try:
        frame = query_diff(dataset, job_a, job_b, text, other=other)
    except TokenwireError as exc:
        _fail(str(exc))
    click.echo(format_frame(frame, fmt), nl=False)


@cli.command("export")
@DATASET
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=Path),
    help="Trace file to write: .json, or .json.gz (gzipped).",
)  # fmt: skip
@job_choice("Job to export (needed when the dataset holds several).")
@click.option(
    "--step", "steps", metavar="N|N-M", callback=parsed_by("parse_steps"),
    help="Only this step, or these steps.",
)  # fmt: skip
@click.option(
    "--ranks", metavar="LIST", callback=parsed_by("parse_ranks"),
    help="Only these ranks, e.g. 0-7,12.",
)  # fmt: skip
@click.option(
    "--window",
    metavar="START_NS:END_NS",
    callback=parsed_by("parse_window"),
    help="Only events overlapping this time window (ns on the job's aligned clock; either "
    "end may be left out).",
)
@click.option("--kernels", is_flag=True, help="Also export GPU kernels, memcpys and memsets.")
@click.option(
    "--ops", is_flag=True, help="Also export host ranges (torch ops, runtime calls, NVTX)."
)
@click.option(
    "--flows",
    is_flag=True,
    help="Write the flow list instead (link's wire table: src, dst, bytes, start, transport, "
    "collective, layer, step) as .parquet or .csv, for network simulators.",
)
@click.option("--allow-writes", is_flag=True, help="Let -o name a file inside the dataset.")
def export(
    dataset: Path,
    output: Path,
    job: str | None,
    steps: tuple[int, int] | None,
    ranks: tuple[int, ...] | None,
    window: tuple[int | None, int | None] | None,
    kernels: bool,
    ops: bool,
    flows: bool,
    allow_writes: bool,
) -> None:
    """Write a linked job as a timeline that Perfetto UI and chrome://tracing open.

    \b
    Example:
      tokenwire export run42.tw -o run42.json.gz --step 3 --ranks 0-7
      tokenwire export run42.tw -o window.json --window 1766862620000000000:1766862620050000000
      tokenwire export run42.tw --flows -o flows.parquet --step 3

    One process per rank, a track per stream and thread, collectives named by op and
    parallel dimension with their layer, phase, step, bytes and wait in the args, arrows
    between the ranks of each collective, steps and phases as ranges; clock offsets from
    link applied. Large jobs: choose a step, ranks or a window (docs/export.md says what
    size opens comfortably). --flows writes the bytes on each rank-to-rank link of every
    collective instead (docs/wire.md).
    """
    from . import export as ex
    from .output import refuse_inside

    if flows:
        if kernels or ops:
            _fail("--kernels and --ops are options of the timeline, not of --flows")
        _export_flows(dataset, output, job, steps, ranks, window, allow_writes)
        return

    try:
        scope = ex.Scope(
            job=job,
            ranks=ranks,
            steps=steps,
            window=window,
            kernels=kernels,
            ops=ops,
        )
        if not allow_writes:
            refuse_inside(dataset, output)
        result = ex.export_timeline(dataset, output=output, scope=scope)
    except TokenwireError as exc:
        _fail(str(exc))
    if line := result.untimed_warning():
        _say("Warning", line)
    click.echo(result.summary(), err=True)
    if line := result.size_warning():
        _say("Warning", line)


def _export_flows(
    dataset: Path,
    output: Path,
    job: str | None,
    steps: tuple[int, int] | None,
    ranks: tuple[int, ...] | None,
    window: tuple[int | None, int | None] | None,
    allow_writes: bool,
) -> None:
    """``tokenwire export --flows``: the wire table of a linked job as a flow list."""
    from . import export as ex
    from .export.flows import export_flows
    from .output import refuse_inside

    try:
        scope = ex.Scope(
            job=job,
            ranks=ranks,
            steps=steps,
            window=window,
        )
        if not allow_writes:
            refuse_inside(dataset, output)
        result = export_flows(dataset, output=output, scope=scope)
    except TokenwireError as exc:
        _fail(str(exc))
    click.echo(result.summary(), err=True)
