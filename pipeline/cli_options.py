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
