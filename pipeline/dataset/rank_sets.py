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
    starts = to_numpy(column.offsets)[rows]
    values = to_floats(column.values)
    n = lengths[rows].astype(np.int64)
    first = values[starts]
    stride = values[starts + 1] - first
    # member i of each row against first + i * stride, all rows' members in one array
    row_starts = np.cumsum(n) - n
    i = np.arange(n.sum()) - np.repeat(row_starts, n)
    members = values[np.repeat(starts, n) + i]
    same = members == np.repeat(first, n) + i * np.repeat(stride, n)
    sequence = np.logical_and.reduceat(same, row_starts) & (stride != 0)
    rank = to_floats(table.column("rank"))[rows]
    own = _own_rank_only(table, rows, rank, members, row_starts, n)
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
        kept = to_floats(table.column(name))
        kept[rows[where]] = value[where]
        stored = ints_from_floats(kept)
        table = table.set_column(table.schema.get_field_index(name), table.field(name), stored)
    return table


def _own_rank_only(
    table: pa.Table,
    rows: np.ndarray,
    rank: np.ndarray,
    members: np.ndarray,
    row_starts: np.ndarray,
    n: np.ndarray,
) -> np.ndarray:
    """Which of ``rows`` (their ``n`` ``members`` laid end to end from ``row_starts``) list
    one rank, the row's own (``rank``), at its ``rank_in_comm``, and nulls elsewhere."""
    known = np.add.reduceat(~np.isnan(members), row_starts)
    position = to_floats(table.column("rank_in_comm"))[rows]
    inside = (position >= 0) & (position < n)  # (false for a null position: NaN)
    at = row_starts + np.where(inside, position, 0).astype(np.int64)
    return (known == 1) & inside & (members[at] == rank)
