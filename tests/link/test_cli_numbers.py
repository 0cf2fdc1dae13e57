"""Numbers that read in `tokenwire sql`: sums as integers, JSON numbers as numbers, floats in
full, and every statement's result printed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli

SUM = "SELECT sum(bytes) AS bytes FROM collective_calls"


def _sql(dataset: Path, *args: str, stdin: str | None = None) -> str:
    result = CliRunner().invoke(cli, ["sql", str(dataset), *args], input=stdin)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_sums_print_as_integers(linked_sample: Path) -> None:
    out = _sql(linked_sample, SUM)
    assert "decimal" not in out and "i64" in out
    (total,) = [int(w) for w in out.split() if w.isdigit() and int(w) > 1000]
    assert total == int(_sql(linked_sample, SUM, "--format", "csv").split()[1])


def test_json_numbers_are_numbers(linked_sample: Path) -> None:
    rows = json.loads(
        _sql(
            linked_sample,
            SUM.replace(" FROM", ", sum(bytes) / 3 AS third FROM"),
            "--format",
            "json",
        )
    )
    assert isinstance(rows[0]["bytes"], int) and rows[0]["bytes"] > 0
    assert isinstance(rows[0]["third"], float)
    decimal = json.loads(_sql(linked_sample, "SELECT 1.25::DECIMAL(9,2) AS x", "--format", "json"))
    assert decimal == [{"x": 1.25}]


def test_large_floats_print_in_full(linked_sample: Path) -> None:
    out = _sql(linked_sample, "SELECT 71696416.0::DOUBLE AS wire_bytes, 0.5::DOUBLE AS half")
    assert "71696416" in out and "e7" not in out and "0.5" in out


def test_every_statement_on_stdin_prints_its_result(linked_sample: Path) -> None:
    text = "SELECT 'first' AS a;\nSELECT 'second' AS b;\nSELECT 'third' AS c;\n"
    out = _sql(linked_sample, stdin=text)
    assert all(word in out for word in ("first", "second", "third")), out
    csv = _sql(linked_sample, "--format", "csv", stdin=text)
    assert csv == "a\nfirst\n\nb\nsecond\n\nc\nthird\n"
    lines = _sql(linked_sample, "--format", "json", stdin=text).splitlines()
    assert [json.loads(line) for line in lines] == [
        [{"a": "first"}],
        [{"b": "second"}],
        [{"c": "third"}],
    ]
