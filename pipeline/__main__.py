"""Allow ``python -m pipeline``."""

from pipeline.cli import cli

cli()
