"""The ``tokenwire`` command line: a thin shell over the library.

Each command validates its options, calls one library function and prints. Data goes to
stdout, progress and errors to stderr. Input errors become one ``Error: ...`` line and exit
code 1; wrong invocations exit 2 (click's usage errors); internal errors exit 3.
"""

from __future__ import annotations

import click

from pipeline import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenwire")
def cli() -> None:
    """tokenwire: where the bytes of a training job go."""


# --------------------------------------------------------------------------- model commands
# `predict` and `tokens` (issue 9): thin shells over pipeline.model.


def _config_error(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


@cli.command()
@click.option(
    "--config",
    "config",
    type=click.Path(exists=True, dir_okay=False),
    help="job.yaml describing model, layout, batch, dtypes and network.",
)
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
@click.option("--rank", default=0, show_default=True, help="Global rank to predict.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
@click.option("--step-time", type=float, help="Step time in seconds: adds network requirements.")
@click.option(
    "--comm-budget",
    type=float,
    default=0.2,
    show_default=True,
    help="Share of the step communication may take unhidden.",
)
def predict(config, preset, rank, fmt, step_time, comm_budget, **flags) -> None:  # noqa: ANN001
    """Predicted traffic of one rank per training step (analytic model).

    \b
    tokenwire predict --config sample_traces/job.yaml --rank 3
    tokenwire predict --model llama3-70b --tp 8 --pp 4 --dp 16 --sequence-parallel --format json
    """
    import json

    from pipeline.errors import ConfigError
    from pipeline.model import network as net
    from pipeline.model.config import build_job
    from pipeline.model.predict import format_table
    from pipeline.model.predict import predict as predict_rank

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
    try:
        job = build_job(config, overrides)
        pred = predict_rank(job, rank)
        reqs = (
            net.requirements(pred, step_time_s=step_time, comm_budget=comm_budget)
            if step_time is not None
            else None
        )
    except ConfigError as exc:
        raise _config_error(exc) from None
    if fmt == "json":
        doc = pred.to_dict()
        if reqs is not None:
            doc["requirements"] = {
                "step_time_s": step_time,
                "comm_budget": comm_budget,
                "links": [vars(r) | {"headroom": r.headroom} for r in reqs],
            }
        click.echo(json.dumps(doc, indent=2))
        return
    click.echo(format_table(pred))
    if reqs is not None:
        click.echo("")
        click.echo(net.format_requirements(reqs, step_time_s=step_time, comm_budget=comm_budget))


@cli.command()
@click.argument("text_file", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tokenizer",
    type=click.Path(exists=True, dir_okay=False),
    help="Local tokenizer.json; without it a BPE is trained on the text itself.",
)
@click.option(
    "--train-vocab",
    default=8192,
    show_default=True,
    help="Vocabulary of the BPE trained on the text when no --tokenizer is given.",
)
@click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False),
    help="job.yaml: adds embedding bytes and wire bytes for one epoch.",
)
@click.option(
    "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True
)
def tokens(text_file, tokenizer, train_vocab, config, fmt) -> None:  # noqa: ANN001
    """Words -> tokens -> bytes on the wire for a text corpus.

    \b
    tokenwire tokens poem.txt --tokenizer tokenizer.json --config job.yaml
    """
    import json

    from pipeline.errors import ConfigError, TraceFormatError
    from pipeline.model import tokens as tk
    from pipeline.model.config import load_job

    try:
        job = load_job(config) if config else None
        count = tk.count_tokens(text_file, tokenizer=tokenizer, train_vocab=train_vocab)
        epoch = tk.epoch_traffic(count.tokens, job) if job is not None else None
    except (ConfigError, TraceFormatError) as exc:
        raise _config_error(exc) from None
    report = tk.tokens_report(count, epoch)
    click.echo(json.dumps(report, indent=2) if fmt == "json" else tk.format_tokens(report))
