"""Ingest: one module per source format, each with ``parse(path) -> ParseResult``.

``detect`` decides a file's format from its content, ``run`` fans parsing out over files and
hands the tables to :mod:`pipeline.dataset` for writing.
"""

from pipeline.ingest.result import ParseResult, Warnings

__all__ = ["ParseResult", "Warnings"]
