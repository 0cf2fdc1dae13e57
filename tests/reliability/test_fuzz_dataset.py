"""Fuzzing the dataset side: manifests with random values where the real ones were, parts
with random bytes. Every command that reads or writes the dataset answers 0 or 1 (never an
internal error), and nothing outside the dataset changes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.cli import cli
from tests.reliability.corpus import write_inline_seeds
from tests.reliability.hostile import digest

EXAMPLES = int(os.environ.get("TOKENWIRE_FUZZ_EXAMPLES", "25"))
COMMANDS = (["tables"], ["sql", "SELECT count(*) FROM collectives"], ["link"])

#: Values a hostile manifest may hold: paths that climb out, huge numbers, wrong types.
_PATHS = st.sampled_from(
    ["../x", "/etc/passwd", "ops/job=j/part-1.parquet", "ops/job=..%2Fx/part-1.parquet", ""]
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(), _PATHS
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fuzz")
    write_inline_seeds(root / "job")
    assert (
        CliRunner().invoke(cli, ["ingest", str(root / "job"), "-o", str(root / "ds")]).exit_code
        == 0
    )
    return root / "ds"


def _places(doc: object, trail: tuple = ()) -> list[tuple]:
    """Every key path into ``doc`` (objects and lists), the document's own included."""
    out = [trail]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _places(value, (*trail, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _places(value, (*trail, i))
    return out


def _replace(doc: dict, trail: tuple, value: object) -> object:
    if not trail:
        return value
    target = doc
    for key in trail[:-1]:
        target = target[key]
    target[trail[-1]] = value
    return doc


def _run_all(ds: Path, outside: Path) -> None:
    before = digest(outside)
    for args in COMMANDS:
        result = CliRunner().invoke(cli, [args[0], str(ds), *args[1:]])
        assert result.exit_code in (0, 1), (args, result.output)
        assert "internal error" not in result.output, (args, result.output)
        errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert len(errors) <= 1, result.stderr
    assert digest(outside) == before


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_manifest_with_random_values(pristine: Path, tmp_path: Path, data) -> None:  # noqa: ANN001
    work = tmp_path / f"case{len(os.listdir(tmp_path))}"
    ds, outside = work / "ds", work / "outside"
    shutil.copytree(pristine, ds)
    outside.mkdir()
    (outside / "x").write_text("keep")
    doc = json.loads((ds / "manifest.json").read_text())
    trail = data.draw(st.sampled_from(_places(doc)))
    doc = _replace(doc, trail, data.draw(_JSON))
    (ds / "manifest.json").write_text(json.dumps(doc))
    _run_all(ds, outside)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_a_part_with_random_bytes(pristine: Path, tmp_path: Path, data) -> None:  # noqa: ANN001
    work = tmp_path / f"case{len(os.listdir(tmp_path))}"
    ds, outside = work / "ds", work / "outside"
    shutil.copytree(pristine, ds)
    outside.mkdir()
    parts = sorted(p for p in ds.rglob("*.parquet"))
    part = data.draw(st.sampled_from(parts))
    original = part.read_bytes()
    cut = data.draw(st.integers(0, len(original)))
    noise = data.draw(st.binary(max_size=64))
    at = data.draw(st.integers(0, max(0, cut - len(noise))))
    damaged = bytearray(original[:cut])
    damaged[at : at + len(noise)] = noise
    part.write_bytes(bytes(damaged))
    _run_all(ds, outside)
