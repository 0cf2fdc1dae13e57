"""How the processes that parse traces give freed memory back to the system.

A parse builds and drops frames and arrays of a trace's length one after another; what the
allocators keep of them counts in the process's resident size as much as what is in use:

- Polars allocates with jemalloc, which keeps freed pages for a while to reuse them (Polars
  1.x asks for 0.5 s, then 1 s more before the system may take them). It reads its settings
  from ``_RJEM_MALLOC_CONF`` once, when Polars' library loads, and Polars' import writes its
  own in front of any found there (so the variable holds both from then on): set before the
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

#: jemalloc (Polars) gives freed pages back at once, not after the 0.5 s Polars asks for.
JEMALLOC_CONF = "dirty_decay_ms:0,muzzy_decay_ms:0"
#: Where jemalloc reads its settings.
JEMALLOC_ENV = "_RJEM_MALLOC_CONF"
#: Whether :func:`return_freed_memory` set :data:`JEMALLOC_ENV` (not the user).
_set_here = False
#: A file of this many bytes or more has its worker start with the setting: for smaller
#: ones the memory it saves costs more time than it is worth (4 traces of 87 MB: 90 MB less
#: peak per worker, 10 % more wall time, the pages faulted in again).
GIVE_BACK_FILE_BYTES = 256 * 1024 * 1024


def return_freed_memory() -> None:
    """Make Polars' allocator give freed pages back at once, in this process and those it
    starts (see the module's docstring); a ``_RJEM_MALLOC_CONF`` of the user's own is kept.
    Call it before anything imports Polars: the setting reaches this process only then."""
    global _set_here
    if JEMALLOC_ENV not in os.environ:
        os.environ[JEMALLOC_ENV] = JEMALLOC_CONF
        _set_here = True


def set_here() -> bool:
    """Whether this process's jemalloc setting is :func:`return_freed_memory`'s, which a
    worker is started without where no file reaches :data:`GIVE_BACK_FILE_BYTES`: pages
    given back at once are faulted in again by the next batch or step (a 16,384-rank job's
    ingest: 237 s of CPU against 201 s, most of it the system's)."""
    return _set_here


def trim_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
    where the C library has none). A pass over the heap: once per step, not per batch."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
