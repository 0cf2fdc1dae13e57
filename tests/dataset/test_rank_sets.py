"""Communicators' rank lists stored as sequences (pipeline/dataset/rank_sets.py): what a part
holds, what the view gives back, and what link makes of parts of either form."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pipeline
from pipeline.dataset import compact
from pipeline.dataset.rank_sets import encode
from pipeline.dataset.schema import conform
from pipeline.dataset.store import read_manifest
from pipeline.ingest.kineto import parse as kineto
from pipeline.ingest.nccl import log as nccl_log
from pipeline.ingest.run import ingest
from pipeline.link.runner import link
from pipeline.synth.job import JobSpec, job_traces
from pipeline.synth.scale import write_scaled_job

LISTS = [
    # (nranks, ranks, stored as (first, stride) or None: kept as a list)
    (4, [0, 1, 2, 3], (0, 1)),
    (4, [3, 2, 1, 0], (3, -1)),
    (3, [8, 12, 16], (8, 4)),
    (2, [5, 1], (5, -4)),
    (3, [0, 2, 5], None),  # not a sequence
    (2, [1, 1], None),  # a repeated rank
    (4, [0, 1, None, 3], None),  # an unknown member
    (4, [0, 1, 2], None),  # fewer ranks than the group has
    (1, [7], None),  # nothing to save
    (None, [0, 1], None),  # size unknown
    (4, None, None),
]


def _communicators(lists: list[tuple]) -> pa.Table:
    table = pa.table(
        {
            "rank": list(range(len(lists))),
            "comm": [f"c{i}" for i in range(len(lists))],
            "nranks": pa.array([n for n, _, _ in lists], pa.int64()),
            "ranks": pa.array([r for _, r, _ in lists], pa.list_(pa.int64())),
        }
    )
    return conform("communicators", table, job="j", source="kineto", file_id="f")


def test_a_sequence_is_stored_as_its_first_rank_and_stride_and_any_other_list_as_it_is() -> None:
    stored = encode(_communicators(LISTS))
    assert stored.schema == _communicators(LISTS).schema
    for (_, ranks, sequence), row in zip(LISTS, stored.to_pylist(), strict=True):
        if sequence is None:
            assert (row["ranks"], row["ranks_first"], row["ranks_stride"]) == (ranks, None, None)
        else:
            assert (row["ranks"], (row["ranks_first"], row["ranks_stride"])) == (None, sequence)
    assert encode(stored).equals(stored)  # (a merge writes stored rows again)


def test_random_lists_in_sliced_and_chunked_tables_are_stored_as_a_plain_check_says() -> None:
    """Lists of every kind, the table in chunks and sliced (list offsets that do not start at
    0): exactly the sequences are stored as such, and the view's range gives each back."""
    rng = random.Random(7)
    lists = []
    for _ in range(400):
        n = rng.choice([None, 1, 2, 3, 8])
        first, stride = rng.randrange(64), rng.choice([-3, -1, 0, 1, 2, 8])
        ranks = [first + i * stride for i in range(n or 2)]
        change = rng.random()
        if change < 0.2:
            ranks[rng.randrange(len(ranks))] += 1
        elif change < 0.3:
            ranks[rng.randrange(len(ranks))] = None
        elif change < 0.4:
            ranks = ranks[:-1]
        lists.append((n, ranks if rng.random() > 0.1 else None, None))
    whole = _communicators(lists)
    for table in (
        whole.slice(5, 390),
        pa.concat_tables([whole.slice(5, 150), whole.slice(155, 240)]),
    ):
        stored = encode(table).to_pylist()
        for (n, ranks, _), row in zip(lists[5:395], stored, strict=True):
            if _is_sequence(ranks, n):
                assert row["ranks"] is None
                assert [row["ranks_first"] + i * row["ranks_stride"] for i in range(n)] == ranks
            else:
                assert (row["ranks"], row["ranks_stride"]) == (ranks, None)
        assert sum(row["ranks_stride"] is not None for row in stored) > 50


OWN_RANK = [
    # (rank, rank_in_comm, nranks, ranks, stored with ranks_first alone)
    (5, 1, 4, [None, 5, None, None], True),
    (0, 0, 2, [0, None], True),
    (9, 3, 4, [None, None, None, 9], True),
    (5, 2, 4, [None, 5, None, None], False),  # not at its place
    (5, 1, 4, [None, 6, None, None], False),  # not its own rank
    (5, 1, 4, [4, 5, None, None], False),  # two members known
    (5, None, 4, [None, 5, None, None], False),  # place unknown
    (5, 7, 4, [None, 5, None, None], False),  # place outside the group
    (5, 1, 3, [None, 5, None, None], False),  # more members than the group has
    (5, 0, 1, [5], False),  # nothing to save
]


def test_a_list_that_knows_only_the_rows_own_rank_is_stored_as_that_rank() -> None:
    """An NCCL log's rows: the one known member at rank_in_comm, the rest null."""
    table = conform(
        "communicators",
        pa.table(
            {
                "rank": [r for r, *_ in OWN_RANK],
                "rank_in_comm": pa.array([p for _, p, *_ in OWN_RANK], pa.int64()),
                "nranks": [n for _, _, n, *_ in OWN_RANK],
                "comm": [f"c{i}" for i in range(len(OWN_RANK))],
                "ranks": pa.array([r for *_, r, _ in OWN_RANK], pa.list_(pa.int64())),
            }
        ),
        job="j",
        source="nccl_log",
        file_id="f",
    )
    stored = encode(table)
    for (rank, _, _, ranks, own), row in zip(OWN_RANK, stored.to_pylist(), strict=True):
        expected = (None, rank, None) if own else (ranks, None, None)
        assert (row["ranks"], row["ranks_first"], row["ranks_stride"]) == expected
    assert encode(stored).equals(stored)


@pytest.fixture(scope="module")
def traces_with_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An 8-rank job's Kineto traces and NCCL logs."""
    root = tmp_path_factory.mktemp("logs")
    spec = JobSpec(tp=2, pp=2, dp=2, layers=2, global_batch=4)
    write_scaled_job(spec, root, repeats=1, formats=["kineto", "nccl"])
    return root


def test_nccl_log_rows_are_stored_as_their_own_rank_and_read_back_whole(
    traces_with_logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The view gives the logs' lists back as the parser made them; the parts hold none of
    them; parts of the older form (every list whole) read and link the same."""
    monkeypatch.setattr(compact, "SMALL_PART_ROWS", 0)  # a part per file, for the rewrite
    dataset = tmp_path / "ds"
    _ingest(dataset, traces_with_logs)
    parsed = sorted(
        (row["rank"], row["comm"], row["nranks"], row["ranks"])
        for path in traces_with_logs.glob("*.log")
        for row in nccl_log.parse(path).tables["communicators"].to_pylist()
    )
    own = [(rank, comm) for rank, comm, n, r in parsed if r.count(None) == n - 1]
    assert len(own) > 8  # (a log can also name its peers: some lists are whole)
    query = "SELECT rank, comm, nranks, ranks FROM communicators WHERE source = 'nccl_log'"
    assert sorted(pipeline.open(dataset).sql(query).rows()) == parsed
    stored = _stored(dataset).to_pylist()
    first_alone = [
        (r["rank"], r["comm"])
        for r in stored
        if r["source"] == "nccl_log" and r["ranks"] is None and r["ranks_stride"] is None
    ]
    assert sorted(first_alone) == sorted(own)
    assert all(r["ranks_first"] == r["rank"] for r in stored if (r["rank"], r["comm"]) in own)
    _assert_the_older_form_links_the_same(dataset, tmp_path / "old", "collective_matches")
    matches = pipeline.open(dataset).sql("SELECT count(*) FROM collective_matches").rows()
    assert matches[0][0] > 0


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Kineto traces of an 8-rank job (world, tp blocks, dp and pp strides), ranks 0 to 3 in
    folder ``low`` and 4 to 7 in ``high``."""
    root = tmp_path_factory.mktemp("traces")
    for name, text in job_traces(JobSpec(tp=2, pp=2, dp=2, layers=2, global_batch=4)).items():
        folder = root / ("low" if int(name.split(".")[0].removeprefix("rank")) < 4 else "high")
        folder.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    return root


def _ingest(dataset: Path, *folders: Path) -> None:
    assert not ingest(list(folders), dataset, job="job", jobs=1).errors


def _view(dataset: Path) -> list[tuple]:
    ds = pipeline.open(dataset)
    return ds.sql("SELECT rank, comm, nranks, ranks FROM communicators ORDER BY ALL").rows()


def _stored(dataset: Path) -> pa.Table:
    parts = read_manifest(dataset).parts("communicators")
    return pa.concat_tables(pq.read_table(dataset / p) for p in parts)


def test_the_view_gives_every_list_back_while_the_parts_hold_no_sequence(
    traces: Path, tmp_path: Path
) -> None:
    dataset = tmp_path / "ds"
    _ingest(dataset, traces / "low", traces / "high")
    parsed = sorted(
        (row["rank"], row["comm"], row["nranks"], row["ranks"])
        for path in traces.glob("*/*")
        for row in kineto.parse(path).tables["communicators"].to_pylist()
    )
    assert _view(dataset) == parsed
    sequences = [r for _, _, n, r in parsed if _is_sequence(r, n)]
    assert {len(r) for r in sequences} == {2, 8}  # (world, tp, dp and pp groups)
    stored = _stored(dataset)
    assert stored.num_rows == len(parsed)
    assert stored.column("ranks_stride").null_count == stored.num_rows - len(sequences)
    assert sorted(stored.column("ranks").drop_null().to_pylist()) == sorted(
        r for _, _, n, r in parsed if not _is_sequence(r, n)
    )


def _is_sequence(ranks: list[int] | None, nranks: int | None) -> bool:
    if not ranks or None in ranks or len(ranks) != nranks or nranks < 2:
        return False
    stride = ranks[1] - ranks[0]
    return stride != 0 and ranks == [ranks[0] + i * stride for i in range(nranks)]


def test_parts_written_before_the_stored_form_read_and_link_the_same(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part of a copy rewritten as an older tokenwire wrote it (lists, no
    ranks_first/ranks_stride columns): the same view, and link finds the same members and
    parallel dimensions."""
    monkeypatch.setattr(compact, "SMALL_PART_ROWS", 0)  # a part per file
    current = tmp_path / "current"
    _ingest(current, traces / "low", traces / "high")
    _assert_the_older_form_links_the_same(current, tmp_path / "old")


def _assert_the_older_form_links_the_same(dataset: Path, old: Path, *tables: str) -> None:
    """A copy of ``dataset`` rewritten as an older tokenwire wrote it (:func:`_write_as_before`)
    has the same communicators view, and link makes the same communicator_dims and
    ``tables`` of both."""
    shutil.copytree(dataset, old)
    _write_as_before(old)
    assert _view(old) == _view(dataset)
    link(dataset)
    link(old)
    for table in ("communicator_dims", *tables):
        query = f"SELECT * FROM {table} ORDER BY ALL"
        assert pipeline.open(old).sql(query).rows() == pipeline.open(dataset).sql(query).rows()


def test_a_merge_of_parts_of_both_forms_stores_the_sequences(
    traces: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Half the ranks in parts of the older form, then the other half ingested: the merge
    writes one part in the stored form, with the rows of an ingest of all at once."""
    whole = tmp_path / "whole"
    _ingest(whole, traces / "low", traces / "high")
    dataset = tmp_path / "ds"
    with monkeypatch.context() as patch:
        patch.setattr(compact, "SMALL_PART_ROWS", 0)
        _ingest(dataset, traces / "low")
    _write_as_before(dataset)
    _ingest(dataset, traces / "high")
    assert len(read_manifest(dataset).parts("communicators")) == 1
    assert _view(dataset) == _view(whole)
    order = [("file_id", "ascending"), ("comm", "ascending")]
    assert _stored(dataset).sort_by(order).equals(_stored(whole).sort_by(order))


def _write_as_before(dataset: Path) -> None:
    """Rewrite each communicators part as a tokenwire without the stored form wrote it: each
    sequence, and each list that knows only its own rank, a list again, no
    ranks_first/ranks_stride columns."""
    for rel in read_manifest(dataset).parts("communicators"):
        table = pq.read_table(dataset / rel)
        lists = [_whole(r) for r in table.to_pylist()]
        at = table.schema.get_field_index("ranks")
        table = table.set_column(at, "ranks", pa.array(lists, pa.list_(pa.int64())))
        pq.write_table(table.drop_columns(["ranks_first", "ranks_stride"]), dataset / rel)


def _whole(row: dict) -> list | None:
    if row["ranks_stride"] is not None:
        return [row["ranks_first"] + i * row["ranks_stride"] for i in range(row["nranks"])]
    if row["ranks_first"] is not None:
        return [row["ranks_first"] if i == row["rank_in_comm"] else None
                for i in range(row["nranks"])]  # fmt: skip
    return row["ranks"]


def test_columns_of_stored_ranks_without_nulls_are_written_over_not_refused() -> None:
    """``ranks_first`` and ``ranks_stride`` with a value on every row (a part of rows stored
    before, merged with new ones) come from Arrow read-only: encoding still stores the list."""
    table = _communicators([(4, [0, 1, 2, 3], None), (2, [4, 6], None)])
    for name, values in (("ranks_first", [9, 9]), ("ranks_stride", [1, 1])):
        at = table.schema.get_field_index(name)
        table = table.set_column(at, table.field(name), pa.array(values, pa.int64()))
    stored = encode(table).to_pylist()
    assert [(r["ranks"], r["ranks_first"], r["ranks_stride"]) for r in stored] == [
        (None, 0, 1),
        (None, 4, 2),
    ]
