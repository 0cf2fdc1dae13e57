"""How a communicator's member ranks are stored: as a sequence where they form one.

Every rank's ``communicators`` row lists its group's ranks, so a job of N ranks holds the
world group's list N times: N² ranks in all (at 16,384 ranks, 268 M list elements, half the
dataset's bytes and half of ``tokenwire link``'s time). The groups of real layouts are
arithmetic sequences (the world, a tp block, a dp or pp stride), so a part stores such a
list as two numbers, ``ranks_first`` and ``ranks_stride`` (``nranks`` is its length), with
``ranks`` null.

An NCCL log knows only its own rank in each communicator: its rows list ``nranks`` members,
all null but the row's ``rank`` at ``rank_in_comm`` (at 16,384 ranks, 9 M list elements of
which 65,536 are known, and 0.4 s of ``tokenwire link`` spent gathering them). Those columns
already say it all, so such a row stores ``ranks_first`` = its rank, ``ranks_stride`` null and
``ranks`` null. Any other list stays a list.

The table's view gives ``ranks`` back whole (:data:`VIEW_SQL`); ``tokenwire link`` gathers
each group's members from the stored form (the :data:`STORED_VIEW` view and the
``member_ranks`` macro of ``sources.sql``), so a sequence repeated on every rank's row is
expanded once.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..dataset.arrow_convert import from_numpy, ints_from_floats, to_floats, to_numpy

#: The table whose ``ranks`` are stored this way.
TABLE = "communicators"
#: A view of the table's rows as the parts store them (``ranks`` null where a sequence).
STORED_VIEW = "_communicators_stored"
#: The table's own view: the stored rows with every list whole (a part written before the
#: stored form has lists only, and nulls in the two columns).
VIEW_SQL = f"""CREATE VIEW {TABLE} AS
SELECT * REPLACE (CAST(coalesce(ranks, CASE
    WHEN ranks_stride IS NOT NULL THEN
        range(ranks_first, ranks_first + ranks_stride * nranks, ranks_stride)
    WHEN ranks_first IS NOT NULL THEN
        list_transform(range(nranks), lambda i: CASE WHEN i = rank_in_comm THEN ranks_first END)
    END) AS BIGINT[]) AS ranks)
FROM {STORED_VIEW}"""


def encode(table: pa.Table) -> pa.Table:
    """``table`` (conformed communicators rows) with each ``ranks`` list of ``nranks`` ranks
    (two or more) that is an arithmetic sequence of distinct ranks stored as ``ranks_first``
    and ``ranks_stride``, and each that knows only the row's own ``rank``, at
    ``rank_in_comm``, as ``ranks_first`` alone. Rows already stored so, and other lists, are
    kept.

    Worked on the lists' flat values with numpy: a file has a few rows, and a query engine's
    cost per call (about 1 ms in Polars) would be paid by each of a job's files.
    """
    column = table.column("ranks").combine_chunks()
    lengths = to_floats(column.value_lengths())
    nranks = to_floats(table.column("nranks"))
    rows = np.flatnonzero((lengths == nranks) & (nranks >= 2))
    if not len(rows):
        return table
    # (combined, the column is one array whose offsets index its values)
    starts = to_numpy(column.offsets)[rows].astype(np.int64)
    values = to_floats(column.values)
    n = lengths[rows].astype(np.int64)
    first = values[starts]
    stride = values[starts + 1] - first
    # A row is a sequence where each step between its members is the one before (a null
    # member, NaN, never is): counted over every row's values at once, with no array of each
    # member's index (64 traces of a world group of 16,384 ranks are a million members).
    step = values[1:] - values[:-1]
    uneven = _count_in(np.append(step[1:] != step[:-1], False), starts, starts + n - 2)
    sequence = ((uneven == 0) | (n == 2)) & ~np.isnan(stride) & (stride != 0)
    rank = to_floats(table.column("rank"))[rows]
    own = _own_rank_only(table, rows, rank, values, starts, n)
    encoded = np.zeros(table.num_rows, bool)
    encoded[rows[sequence | own]] = True
    ranks = pa.ListArray.from_arrays(
        column.offsets,
        column.values,
        type=column.type,
        mask=from_numpy(np.isnan(lengths) | encoded),
    )
    table = table.set_column(table.schema.get_field_index("ranks"), table.field("ranks"), ranks)
    for name, value, where in (
        ("ranks_first", np.where(sequence, first, rank), sequence | own),
        ("ranks_stride", stride, sequence),
    ):
        kept = to_floats(table.column(name)).copy()  # (a column without nulls comes read-only)
        kept[rows[where]] = value[where]
        stored = ints_from_floats(kept)
        table = table.set_column(table.schema.get_field_index(name), table.field(name), stored)
    return table


def _own_rank_only(
    table: pa.Table, rows: np.ndarray, rank: np.ndarray, values: np.ndarray,
    starts: np.ndarray, n: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Which of ``rows`` (their ``n`` members at ``starts`` in the lists' ``values``) list
    one rank, the row's own (``rank``), at its ``rank_in_comm``, and nulls elsewhere."""
    known = _count_in(np.append(~np.isnan(values), False), starts, starts + n)
    position = to_floats(table.column("rank_in_comm"))[rows]
    inside = (position >= 0) & (position < n)  # (false for a null position: NaN)
    at = starts + np.where(inside, position, 0).astype(np.int64)
    return (known == 1) & inside & (values[at] == rank)


def _count_in(flags: np.ndarray, begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How many of ``flags[begin:end]`` are set, for each pair of increasing, disjoint ranges
    (an empty range counts ``flags[begin]``; ``flags`` ends in one unset flag past the last
    range, as ``reduceat`` takes no index at its end)."""
    bounds = np.column_stack((begins, ends)).ravel()
    return np.add.reduceat(flags, bounds, dtype=np.int64)[::2]
