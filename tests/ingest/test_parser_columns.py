"""A parser's columns come from ``schemas/``: the helpers of pipeline/ingest/result.py that
the parsers build their tables with."""

from __future__ import annotations

import polars as pl
import pyarrow as pa
import pytest
from polars.testing import assert_frame_equal

from pipeline.ingest.result import DUR_NS, parser_columns, parser_schema, schema_columns


def test_schema_columns_takes_the_schemas_order_its_made_columns_and_the_frames_own() -> None:
    frame = pl.DataFrame(
        {
            "end_ns": [30, 50],
            "start_ns": [10, 20],
            "tid": [7, 8],
            "label": ["a", "b"],  # (no column of ops: left out)
            "op_id": [1, 2],
        }
    )
    got = schema_columns("ops", frame, name="label", kind=pl.lit("nvtx"), dur_ns=DUR_NS)
    expected = pl.DataFrame(
        {
            "op_id": [1, 2],
            "tid": [7, 8],
            "name": ["a", "b"],
            "kind": ["nvtx", "nvtx"],
            "start_ns": [10, 20],
            "end_ns": [30, 50],
            "dur_ns": [20, 30],
        }
    )
    assert_frame_equal(got, expected)


def test_schema_columns_refuses_a_column_the_schema_does_not_have() -> None:
    with pytest.raises(ValueError, match=r"table ops: unknown columns \['bytes'\]"):
        schema_columns("ops", pl.DataFrame({"op_id": [1]}), bytes=pl.lit(1))


def test_parser_columns_leave_out_the_writers_and_the_named_ones() -> None:
    cols = parser_columns("steps")
    assert cols[:2] == ["rank", "step"] and "job" not in cols and "file_id" not in cols
    assert parser_columns("steps", without=("rank",)) == cols[1:]


def test_parser_schema_types_as_the_schema_says() -> None:
    assert parser_schema("collectives", ("op", "bytes", "is_p2p")) == pa.schema(
        [("op", pa.string()), ("bytes", pa.int64()), ("is_p2p", pa.bool_())]
    )
