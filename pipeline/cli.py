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
