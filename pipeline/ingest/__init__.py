"""Ingest: trace files in, one :class:`ParseResult` of dataset tables per file out.

Read top to bottom:

- :mod:`.run`: the command's orchestration: find the files, detect each one's format, parse
  them in a worker pool, derive, and write through one dataset transaction.
- :mod:`.detect`: a file's format from its content; :mod:`.gz`: gzip reading with limits.
- One package per source format, each with ``sniff(path, head)`` and ``parse(path)``:
  :mod:`.kineto`, :mod:`.nccl` (logs and nccl-tests output), :mod:`.nsys`,
  :mod:`.flight_recorder`.
- :mod:`.derive`: steps that run on a file's parsed tables (nesting, attribution, time
  breakdown).
- :mod:`.result` (the tables and warnings a parse returns), :mod:`.values` (checked numbers),
  :mod:`.vocab` (op and dtype names), :mod:`.distributed` (parsing on a Dask cluster).
"""

from ..ingest.result import ParseResult, Warnings

__all__ = ["ParseResult", "Warnings"]
