"""Pausing Python's cyclic garbage collector around work that makes many objects at once.

The collector runs after every few hundred new container objects, and each full pass walks
every object made so far. Reading a manifest of 32,768 files, simulating a job of 512 ranks
or predicting 16,384 ranks each make hundreds of thousands of dicts, lists and tuples, none of
them in a cycle: the passes cost more than the work (measured where each is used).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the block, and as it was after it (also when
    the block raises)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
