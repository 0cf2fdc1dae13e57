"""How the processes that parse traces give freed memory back to the system.

A parse builds and drops frames and arrays of a trace's length one after another; what the
allocators keep of them counts in the process's resident size as much as what is in use:

- Polars allocates with jemalloc, which keeps freed pages for 10 s to reuse them. It reads
  its settings from ``_RJEM_MALLOC_CONF`` once, when Polars' library loads: set before the
  first ``import polars`` of the process, or in the environment of a process started after
  (:func:`return_freed_memory`).
- numpy and Python allocate with the C library's ``malloc``. glibc serves a buffer from its
  own pages of ``mmap`` from 128 KiB up, but raises that threshold to the size of each such
  buffer freed (up to 32 MiB): the column-sized arrays of a big trace's nesting then come
  from the heap, whose freed middle stays resident until ``malloc_trim`` gives it back
  (:func:`trim_heap`, after the steps that make such arrays).

Measured on a generated one-rank trace of 1,039 MB (2 cores, docs/scale.md): the ingest
peaked at 1,151 MB with neither, 996 MB with jemalloc's setting alone, 897 MB with both.
"""

from __future__ import annotations

import contextlib
import ctypes
import os

#: jemalloc (Polars) gives freed pages back at once, not 10 s later.
JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"


def return_freed_memory() -> None:
    """Make Polars' allocator give freed pages back at once, in this process and those it
    starts (see the module's docstring); a ``_RJEM_MALLOC_CONF`` of the user's own is kept.
    Call it before anything imports Polars: the setting reaches this process only then."""
    os.environ.setdefault("_RJEM_MALLOC_CONF", JEMALLOC_CONF)


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    where the C library has none). A pass over the heap: once per step, not per batch."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
