"""Click arguments and options that several ``tokenwire`` commands share, written once.

Two options are named ``--job`` on purpose with two meanings: :data:`JOB_NAME` (ingest)
names the job the files being written belong to; :func:`job_choice` (commands that read a
dataset) picks one of the jobs a dataset already holds. Every other shared option means one
thing wherever it appears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

#: ``ingest --jobs``: worker processes at most (each a Python process of its own).
MAX_WORKERS = 1024
#: ``predict --rank``: a rank of the largest layout a job.yaml may describe (2**30 ranks).
MAX_RANK = (1 << 30) - 1
#: ``tokens --train-vocab``: the 256 bytes at the least; 2**20 tokens at most (the largest
#: real vocabularies hold 256K; training time and memory grow with it).
MIN_VOCAB = 256
MAX_VOCAB = 1 << 20

DATASET = click.argument("dataset", type=click.Path(path_type=Path))
"""The dataset folder a command reads (and link writes its derived tables into)."""

JOB_NAME = click.option("--job", help="Job name for every file (default: the folder's name).")
"""Ingest only: the name the ingested files' job is given."""


def job_choice(help_text: str) -> Callable[[F], F]:
    """``--job``: which job of the dataset to read, needed when it holds several."""
    return click.option("--job", help=help_text)


def job_config(help_text: str) -> Callable[[F], F]:
    """``--config``: an existing ``job.yaml`` file (model, layout, batch, dtypes, network)."""
    return click.option(
        "--config", type=click.Path(exists=True, dir_okay=False, path_type=Path), help=help_text
    )


def output_format(
    choices: Sequence[str], default: str, help_text: str | None = "Output format."
) -> Callable[[F], F]:
    """``--format`` (the parameter ``fmt``): one of ``choices``, shown with its default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(list(choices)),
        default=default,
        show_default=True,
        help=help_text,
    )


def parsed_by(name: str) -> Callable[[click.Context, click.Parameter, str | None], Any]:
    """An option callback: the value read by ``pipeline.export.scope.<name>`` (``--step``,
    ``--ranks``, ``--window``), or click's usage error naming the option (exit 2)."""

    def callback(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        if value is None:
            return None
        from .errors import TokenwireError
        from .export import scope

        try:
            return getattr(scope, name)(value)
        except TokenwireError as exc:
            raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None

    return callback
