"""conform's range checks (schema ``range``): a value outside its column's range, or NaN, is
refused with the table, column and value named; nulls pass, and the bounds themselves."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest

from pipeline.dataset.schema import check_ranges, table_schema
from pipeline.errors import DatasetError

HI = 4611686018427387904  # (wire.bytes and collectives.bytes: 0..2**62)


def _table(name: str, column: str, values: pa.Array) -> pa.Table:
    return pa.table({column: values})


def test_the_bounds_and_nulls_pass() -> None:
    check_ranges(
        table_schema("collectives"), _table("collectives", "bytes", pa.array([0, None, HI]))
    )
    check_ranges(table_schema("wire"), _table("wire", "bytes", pa.array([0.0, None, 1e18])))


@pytest.mark.parametrize(
    ("name", "values", "shown"),
    [
        ("collectives", pa.array([5, None, HI + 1]), "4.612e+18"),
        ("collectives", pa.array([7, -1]), "-1"),
        ("wire", pa.array([1.0, float("nan")]), "nan"),
        ("wire", pa.array([None, -0.5]), "-0.5"),
    ],
)
def test_a_value_outside_is_refused(name: str, values: pa.Array, shown: str) -> None:
    with pytest.raises(DatasetError, match=rf"^{name}\.bytes: {re.escape(shown)} is outside 0\.\."):
        check_ranges(table_schema(name), _table(name, "bytes", values))


def test_a_slice_is_checked_from_its_own_offset() -> None:
    values = pa.array([-5, None, 3, 4, HI + 5]).slice(1, 3)  # (-5 and the last left out)
    check_ranges(table_schema("collectives"), _table("collectives", "bytes", values))
    chunked = pa.chunked_array([pa.array([1, 2]), pa.array([None, -7])])
    with pytest.raises(DatasetError, match=r"collectives\.bytes: -7 is outside"):
        check_ranges(table_schema("collectives"), pa.table({"bytes": chunked}))
