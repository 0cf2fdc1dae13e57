"""``tokenwire ingest`` over the broken-input corpus (``corpus.py``), next to good files.

For every broken file: exactly one ``Error:`` line that names the file and the place (byte,
line, entry, JSON path or rank), exit code 1 (never 3, never a traceback); the good files
of the same run are ingested; and the dataset reads afterwards with ``tokenwire sql``, with
the same row counts as a clean ingest of the good files alone.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.dataset.schema import load_schemas
from pipeline.ingest.nsys import parse as nsys
from tests.conftest import REPO_ROOT, tree_digest
from tests.reliability import corpus
from tests.reliability.corpus import Case


def ingest(*args: str | Path):
    return CliRunner().invoke(cli, ["ingest", *map(str, args)])


def counts(dataset: Path) -> dict[str, int]:
    """Rows per table, through ``tokenwire sql`` (so the dataset must read)."""
    query = " UNION ALL ".join(
        f"SELECT '{t}' AS t, count(*) AS n FROM {t}" for t in sorted(load_schemas())
    )
    result = CliRunner().invoke(cli, ["sql", str(dataset), query, "--format", "json"])
    assert result.exit_code == 0, result.output
    return {row["t"]: row["n"] for row in json.loads(result.stdout)}


def check_run(folder: Path, cases: list[Case], tmp_path: Path) -> None:
    """Ingest ``folder`` (good files plus ``cases``) and check every promise of issue 7."""
    dataset = tmp_path / "ds"
    result = ingest(folder, "-o", dataset)
    bad = [c for c in cases if c.place is not None]
    assert result.exit_code == (1 if bad else 0), result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    for case in bad:
        mine = [e for e in errors if e.startswith(f"Error: {case.path}:")]
        assert len(mine) == 1, (case.name, errors)
        rest = mine[0][len(f"Error: {case.path}") :]
        assert re.search(case.place, rest), (case.name, mine[0])
    assert len(errors) == len(bad), errors

    # A clean run over the good files (and the accepted odd ones) gives the same rows.
    clean_src = tmp_path / "clean" / folder.name
    clean_src.mkdir(parents=True)
    bad_paths = {c.path for c in bad}
    for path in folder.iterdir():
        if path not in bad_paths and not path.is_symlink():
            shutil.copy(path, clean_src / path.name)
    clean = ingest(clean_src, "-o", tmp_path / "clean_ds")
    assert clean.exit_code == 0, clean.output
    assert counts(dataset) == counts(tmp_path / "clean_ds")
    assert counts(dataset)["files"] == len(list(clean_src.iterdir()))
    assert counts(dataset)["files"] > 0
    assert not [p for p in dataset.rglob("*") if ".tmp-" in p.name or p.name == ".lock"]


def test_content_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong types, missing keys, NaN/negative/huge times, non-UTF-8, 0 bytes, long line."""
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    cases = corpus.content_cases(folder)
    # The real limit is 256 MiB; a 64 KiB limit and a 1 MiB sparse line prove the same.
    monkeypatch.setattr(nsys, "MAX_LINE_BYTES", 64 * 1024)
    cases.append(corpus.long_line(folder, 1 << 20))
    assert {c.place is None for c in cases} == {True, False}
    check_run(folder, cases, tmp_path)


def test_unreadable_files(tmp_path: Path) -> None:
    """A symlink loop, a broken symlink, a FIFO (chmod 000 does not stop root) and a folder
    symlink pointing back up (walked once, not forever)."""
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    cases = corpus.unreadable(folder)
    (folder / "again").symlink_to(".")
    check_run(folder, cases, tmp_path)


def test_unreadable_file_named_on_the_command_line(tmp_path: Path) -> None:
    good = corpus.write_inline_seeds(tmp_path / "job")["kineto"][0]
    loop, _, dangling, fifo = corpus.unreadable(tmp_path / "odd")
    result = ingest(good, loop.path, dangling.path, fifo.path, "-o", tmp_path / "ds")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 3, errors
    for case, line in zip((loop, dangling, fifo), errors, strict=True):
        assert line.startswith(f"Error: {case.path}: ") and re.search(case.place, line)
    assert counts(tmp_path / "ds")["files"] == 1


def test_duplicate_rank(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    corpus.duplicate_rank(folder)
    case = corpus.duplicate_rank(tmp_path / "again")[1]
    shutil.copy(case.path, folder / "c_rank0.pt.trace.json")
    cases = [Case(case.name, folder / "b_rank0.pt.trace.json", case.place)]
    cases.append(Case(case.name, folder / "c_rank0.pt.trace.json", case.place))
    # b and c have the same bytes: c is skipped as a repeat, b is refused for its rank.
    dataset = tmp_path / "ds"
    result = ingest(folder, "-o", dataset)
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"Error: {cases[0].path}: rank 0 of job")
    assert counts(dataset)["files"] == 1


def test_two_jobs_in_one_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    _, cases = corpus.mixed_jobs(folder)
    check_run(folder, cases, tmp_path)


def test_gzip_bit_flips(tmp_path: Path) -> None:
    seeds = corpus.write_inline_seeds(tmp_path / "seeds")
    folder = tmp_path / "job"
    cases = corpus.gzip_flips([p for ps in seeds.values() for p in ps], folder, per_file=4)
    assert len(cases) == 12
    shutil.copy(seeds["kineto"][0], folder)
    check_run(folder, cases, tmp_path)


def test_truncated_inline_files(tmp_path: Path) -> None:
    seeds = corpus.write_inline_seeds(tmp_path / "seeds")
    folder = tmp_path / "job"
    cases = corpus.truncations([p for ps in seeds.values() for p in ps], folder)
    assert len(cases) >= 45
    shutil.copy(seeds["kineto"][0], folder)
    check_run(folder, cases, tmp_path)


#: Formats whose files say where they end (a closing bracket, a gzip trailer, a SQLite page
#: count): a cut is detectable. A text log cut at a line end is a valid, shorter log.
CUT_DETECTABLE = ("kineto", "flight_recorder", "nsys")


def test_truncated_real_files(real_traces: Path, tmp_path: Path) -> None:
    """Every real trace file cut at 10 points, in one run beside one good real file."""
    found = corpus.real_seeds(real_traces, max_bytes=None)
    seeds = [p for fmt in CUT_DETECTABLE for p in found.get(fmt, [])]
    assert len(seeds) >= 10
    folder = tmp_path / "job"
    cases = corpus.truncations(seeds, folder)
    assert len(cases) >= 9 * len(seeds)
    good = next(p for p in seeds if p.name.startswith("worker0_"))
    shutil.copy(good, folder)
    check_run(folder, cases, tmp_path)


def test_gzip_bit_flips_in_real_files(real_traces: Path, tmp_path: Path) -> None:
    seeds = [p for ps in corpus.real_seeds(real_traces, max_bytes=None).values() for p in ps]
    folder = tmp_path / "job"
    cases = corpus.gzip_flips(seeds, folder, per_file=1)
    assert len(cases) == sum(p.name.endswith(".gz") for p in seeds)
    shutil.copy(next(p for p in seeds if p.name.startswith("worker0_")), folder)
    check_run(folder, cases, tmp_path)


def test_failed_run_leaves_an_existing_dataset_as_it_was(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    assert ingest(folder, "-o", tmp_path / "ds").exit_code == 0
    before = tree_digest(tmp_path / "ds")
    bad = tmp_path / "bad"
    corpus.content_cases(bad)
    for case in [c for c in corpus.content_cases(tmp_path / "bad2") if c.place is None]:
        (bad / case.path.name).unlink()  # only the refused ones
    result = ingest(bad, "-o", tmp_path / "ds", "--job", "job")
    assert result.exit_code == 1
    assert tree_digest(tmp_path / "ds") == before


@pytest.mark.parametrize("version", [1, 2, 99])
def test_a_dataset_of_another_version_is_not_written_to(tmp_path: Path, version: int) -> None:
    """A version 1 dataset (collectives not attributed at ingest) or 2 (rank folders) is
    still read but never linked or added to; one from a newer tokenwire is not read at all.
    One line each."""
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    ds = tmp_path / "ds"
    assert ingest(folder, "-o", ds).exit_code == 0
    manifest = json.loads((ds / "manifest.json").read_text())
    manifest["version"] = version
    (ds / "manifest.json").write_text(json.dumps(manifest))
    before = tree_digest(ds)
    runner = CliRunner()
    for args in (["link", str(ds)], ["ingest", str(folder), "-o", str(ds)]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, result.output
        error = [line for line in result.output.splitlines() if line.startswith("Error:")]
        older = "older" if version < 3 else "newer"
        assert len(error) == 1 and str(ds) in error[0] and older in error[0], result.output
    assert tree_digest(ds) == before
    query = runner.invoke(cli, ["sql", str(ds), "SELECT count(*) AS n FROM files"])
    assert (query.exit_code == 0) == (version < 3), query.output


def test_a_listed_part_that_is_gone_is_one_line(tmp_path: Path) -> None:
    """A part the manifest lists was deleted (by hand, or merged away by an ingest that
    committed after a reader read the manifest): every command names it in one line, exit
    1, and an ingest into the job leaves the dataset as it was."""
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    ds = tmp_path / "ds"
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest", str(folder), "-o", str(ds)]).exit_code == 0
    manifest = json.loads((ds / "manifest.json").read_text())
    gone = next(iter(manifest["files"].values()))["parts"]["ranks"][0]
    (ds / gone).unlink()
    before = tree_digest(ds)
    more = tmp_path / "more"  # a rank the job lacks: the ingest has something to commit
    more.mkdir()
    shutil.copy(REPO_ROOT / "sample_traces" / "rank4.nccl.log", more)
    for args in (
        ["sql", str(ds), "SELECT count(*) FROM ranks"],
        ["tables", str(ds)],
        ["hang", str(ds)],
        ["report", str(ds), "-o", str(tmp_path / "r.html")],
        ["link", str(ds)],
        ["ingest", str(more), "-o", str(ds), "--job", "job"],
    ):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        assert error == [
            f"Error: {ds}: {gone} is listed in the manifest but missing; if an ingest or "
            "link was writing the dataset, run this again"
        ], (args, result.output)
        assert tree_digest(ds) == before


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (
            lambda doc: doc["files"][next(iter(doc["files"]))].update(parts=[]),
            "expected lists of part paths",
        ),
        (lambda doc: doc["files"][next(iter(doc["files"]))].update(ranks=3), "expected a list"),
        (lambda doc: doc["files"][next(iter(doc["files"]))].pop("sha256"), "sha256: "),
        (lambda doc: doc.update(derived=["x"]), "derived: unreadable manifest: expected an"),
        (lambda doc: doc.update(format="other"), "not a tokenwire manifest"),
        (lambda doc: doc["tables"].update(ranks=[3]), "3 is not a part path"),
    ],
    ids=[
        "parts-not-a-dict",
        "ranks-not-a-list",
        "no-sha256",
        "derived-not-a-dict",
        "format",
        "index-not-paths",
    ],
)
def test_a_damaged_manifest_is_one_line(tmp_path: Path, damage, reason: str) -> None:  # noqa: ANN001
    """Every command that reads the manifest names it and what is wrong, exit 1; an ingest
    into the dataset writes nothing."""
    folder = tmp_path / "job"
    corpus.write_inline_seeds(folder)
    ds = tmp_path / "ds"
    assert ingest(folder, "-o", ds).exit_code == 0
    doc = json.loads((ds / "manifest.json").read_text())
    damage(doc)
    (ds / "manifest.json").write_text(json.dumps(doc))
    before = tree_digest(ds)
    runner = CliRunner()
    for args in (["sql", str(ds), "SELECT 1"], ["tables", str(ds)], ["link", str(ds)]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 1, (args, result.output)
        error = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
        # (PLACE: the key that is wrong, where there is one)
        place = rf"Error: {re.escape(str(ds / 'manifest.json'))}: (\S+: )?unreadable manifest: "
        assert len(error) == 1 and re.match(place, error[0]), (args, result.output)
        assert reason in error[0], error
    assert ingest(folder, "-o", ds).exit_code == 1
    assert tree_digest(ds) == before
