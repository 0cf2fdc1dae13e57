"""Allow ``python -m pipeline``."""

from .cli import cli

cli()
