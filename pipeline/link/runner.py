"""Run the link SQL over a dataset and materialize the derived tables.

The files run in the order their headers give (``plan.py``); the tables they create whose
names do not start with ``_`` are published.

Inputs besides the raw tables, registered before the SQL runs (empty without a job.yaml):
``_job_layout`` (job, comm, parallel_dim, conflicts) from the job's rank order and what of
the traces contradicts it (``layout_check``); the model's ``predictions``, ``_job_facts``,
``_alternative_bytes``, ``_gradient_plan``, ``_layout_ep_groups`` and ``_layout_ep_members``
(:mod:`pipeline.model.link_inputs`); ``_ep_directions`` (purpose, direction of the model's
expert-parallel items); and always ``_moe_exchange_kernels`` (pattern, direction: what
names an MoE library's token exchange) and ``_moe_library`` (pattern: the library's
kernels).
"""

from __future__ import annotations

import secrets
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from ..dataset.commit import SPILL, PartWriter, Transaction
from ..dataset.location import overflow_error
from ..dataset.rank_sets import STORED_VIEW
from ..dataset.schema import conform, load_schemas, table_schema
from ..dataset.store import (
    ROW_GROUP_ROWS,
    Manifest,
    part_columns,
    part_path,
    read_manifest,
    row_groups,
)
from ..dataset.views import (
    add_convenience_views,
    connect,
    empty_select,
    require_readable,
    typed_columns,
)
from ..errors import ConfigError, DatasetError
from ..link import layout_check
from ..link.plan import Plan, SqlFile, plan

if TYPE_CHECKING:  # (the model's module is imported only by a link with a job.yaml)
    from ..model.config import Job


@dataclass
class LinkSummary:
    """Rows written per derived table, and what the job description contributed."""

    rows: dict[str, int]
    config: str | None
    #: one line per way job.yaml's layout contradicts the traces (layout_check), naming it
    warnings: list[str] = field(default_factory=list)


def link(dataset: Path, *, config: Path | Job | None = None) -> LinkSummary:
    """Build every derived table of ``dataset`` (replacing those of an earlier link).

    Parameters
    ----------
    dataset
        A tokenwire dataset.
    config
        The job's ``job.yaml`` (a path, or one loaded): exact parallel dimensions, tokens per
        step and predictions.
        A dataset of several jobs takes one job.yaml for all of them only when they share it.
    """
    dataset = Path(dataset)
    config = _checked_config(config)
    with Transaction(dataset, create=False) as txn:
        # (the manifest is read once, by the transaction: 0.16 s for the 28 MB manifest of
        # 16,384 ranks, and the lock holds it)
        steps = plan()
        con = connect(dataset, derived=False, manifest=txn.manifest, tables=_raw_tables(steps))
        # Big jobs spill to disk beside the dataset instead of holding every row in memory
        # (the transaction removed a link planted there: DuckDB would write through it).
        con.execute("SET temp_directory = ?", [str(dataset / SPILL)])
        parts = _DerivedParts(txn, con)
        warnings = _derive(
            con, dataset, steps, config, lambda: txn.manifest.all_parts(), complete=parts.write
        )
        parts.write("predictions")
        con.close()
        rows = parts.commit((*steps.published, "predictions"))
    return LinkSummary(
        rows=rows, config=_label(config) if config is not None else None, warnings=warnings
    )


def link_in_memory(
    dataset: Path, *, job: str | None = None, config: Path | Job | None = None
) -> tuple[duckdb.DuckDBPyConnection, list[str]]:
    """A connection over ``dataset`` holding every derived table as :func:`link` would write
    it, computed by the same SQL and written nowhere: for a reader (``tokenwire report``) of
    a dataset that is not linked, or not with its job.yaml. The raw tables are the stored
    ones (of ``job`` alone when given: link's tables are each job's own); each derived table
    is a view of its schema's columns, with the convenience views of every connection over
    them. Big jobs spill to the system's temporary folder, never into the dataset. Also
    link's warnings on the job.yaml's layout.

    Raises
    ------
    DatasetError
        Not a dataset, no ranks in it, or a damaged part.
    ConfigError
        A bad job.yaml, or one whose layout does not fit the traced ranks.
    """
    dataset = Path(dataset)
    config = _checked_config(config)
    steps = plan()
    manifest = read_manifest(dataset)
    if job is not None:
        manifest = Manifest({k: e for k, e in manifest.files.items() if e.job == job})
    con = connect(dataset, derived=False, manifest=manifest)
    try:
        spill = Path(tempfile.gettempdir()) / f"tokenwire-link-{secrets.token_hex(8)}"
        con.execute("SET temp_directory = ?", [str(spill)])
        warnings = _derive(con, dataset, steps, config, manifest.all_parts)
        # (the settings the link's statements ran with; a reader's queries keep DuckDB's)
        con.execute("RESET preserve_insertion_order")
        con.execute("RESET threads")
        for name in steps.published:
            con.execute(f"ALTER TABLE {name} RENAME TO _derived_{name}")
            columns = typed_columns(table_schema(name))
            con.execute(f"CREATE VIEW {name} AS SELECT {columns} FROM _derived_{name}")
        add_convenience_views(con)
    except BaseException:
        con.close()
        raise
    return con, warnings


def _checked_config(config: Path | Job | None) -> Job | None:
    """``config`` loaded, and refused before the dataset is locked and DuckDB started when
    it is bad or its bytes pass 64 bits (rank 0's rows meet the model's checks)."""
    if isinstance(config, (str, Path)):
        from ..model.config import load_job

        config = load_job(config)
    if config is not None:
        from ..model.predict import predict

        predict(config, 0)
    return config


def _derive(
    con: duckdb.DuckDBPyConnection,
    dataset: Path,
    steps: Plan,
    config: Job | None,
    parts: Callable[[], list[str]],
    *,
    complete: Callable[[str], None] | None = None,
) -> list[str]:
    """Run the link SQL files on ``con`` (views of the raw tables of ``dataset``): every
    derived table, and ``predictions``, is then a table or view of the connection; with
    ``complete``, each derived table is handed to it (by name) as soon as no later file
    reads it, and is gone from the connection after. The warnings on where job.yaml's
    layout contradicts the traces. ``parts``: the dataset's parts, to name a damaged one
    when DuckDB fails."""
    con.execute("SET preserve_insertion_order = false")
    collectives, secondary = _collectives_seen(con)
    _small_job_threads(con, collectives)
    _hold_communicators(con)
    jobs = [r[0] for r in con.execute("SELECT DISTINCT job FROM ranks ORDER BY 1").fetchall()]
    if not jobs:
        raise DatasetError(f"{dataset}: no ranks ingested yet, nothing to link")
    warnings = _register_job_inputs(con, jobs, config)
    for sql in steps.files:
        try:
            _run_file(con, sql, secondary=secondary)
        except duckdb.Error as exc:  # a damaged part (named here), else a bug in our SQL
            require_readable(dataset, parts())
            overflow_error(dataset, sql.name, exc)
            raise RuntimeError(f"link step {sql.name} failed: {exc}") from exc
        # (each derived table no later file reads is written and freed at once, so that the
        # tables are never all held twice, in DuckDB and as Arrow, beside the last files'
        # tables: 250 MB and 0.2 s of system time on a job of 491,520 collectives; before
        # the file's working tables go: a derived view reads them)
        for name in steps.complete_after.get(sql.name, ()):
            _complete(con, name, complete)
        # (working tables no later file reads are freed at once, so that the next
        # files' tables do not sit beside them: link's peak memory on a big job)
        for kind, obj in steps.drops_after[sql.name]:
            con.execute(f"DROP {kind.upper()} IF EXISTS {obj}")
    return warnings


def _complete(
    con: duckdb.DuckDBPyConnection, name: str, complete: Callable[[str], None] | None
) -> None:
    """Derived table ``name``, which no later file reads, handed to ``complete`` and dropped;
    without ``complete``, kept, as a table. A file may make a derived table no other file
    reads as a view of its working tables (wire): written straight from its query, its rows
    are never held as a table."""
    view = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE view_name = ? AND NOT internal", [name]
    ).fetchone()[0]
    if complete is not None:
        complete(name)
        con.execute(f"DROP {'VIEW' if view else 'TABLE'} {name}")
    elif view:
        con.execute(f"CREATE TEMP TABLE _{name}_rows AS SELECT * FROM {name}")
        con.execute(f"DROP VIEW {name}")
        con.execute(f"ALTER TABLE _{name}_rows RENAME TO {name}")


#: Marks, in the comment before it, a statement whose rows all come from collectives of a
#: source other than the profiler's (an NCCL log, Nsight, a flight recorder: the calls
#: matched across sources). On a job whose collectives are all the profiler's it is made
#: empty: bound but not run (``LIMIT 0``), so its table has the same columns and types.
SECONDARY_ONLY = "-- (rows only from secondary sources)"


def _run_file(con: duckdb.DuckDBPyConnection, sql: SqlFile, *, secondary: bool) -> None:
    """Run one link SQL file; without secondary sources, its statements marked
    :data:`SECONDARY_ONLY` make their tables empty (their scans of the collectives cost
    some ms each for no row)."""
    if secondary or SECONDARY_ONLY not in sql.text:
        con.execute(sql.text)
        return
    for statement in duckdb.extract_statements(sql.text):
        if SECONDARY_ONLY in statement.query:
            con.execute(statement.query.rstrip().rstrip(";") + "\nLIMIT 0")
        else:
            con.execute(statement)


def _hold_communicators(con: duckdb.DuckDBPyConnection) -> None:
    """The communicators, in the form their parts store, held in memory for the run: a few
    rows per rank, which link reads six times (each rank set, the peers', roots' and
    followers' ranks, the NCCL logs' places), and each read of the view opens every part
    (some 5 ms at 32 ranks, whatever the rows). The communicators' view reads this one."""
    held = "_held_communicators"
    con.execute(f"CREATE TEMP TABLE {held} AS SELECT * FROM {STORED_VIEW}")
    con.execute(f"CREATE OR REPLACE VIEW {STORED_VIEW} AS SELECT * FROM {held}")


#: The raw tables that link reads besides those its SQL files name: the runner's (ranks, and
#: communicators for the layout's groups) and those of every connection's macros and views
#: (collectives: dataset/sources.sql).
_RUNNER_READS = ("collectives", "communicators", "ranks")


def _raw_tables(steps: Plan) -> set[str]:
    """The raw tables link reads: only these get views (each view reads the footers of all
    its parts; a job's files and time breakdown are never read by link)."""
    raw = {name for name, schema in load_schemas().items() if not schema.derived}
    return raw & {*_RUNNER_READS, *(r for f in steps.files for r in f.reads)}


#: Rows of one DuckDB row group: the unit its parallel scans of a table split by.
ROW_GROUP = 122_880


def _collectives_seen(con: duckdb.DuckDBPyConnection) -> tuple[int, bool]:
    """How many collectives the job has (from the Parquet footers, which the views have read)
    and whether any is of a source other than the profiler's (:data:`SECONDARY_ONLY`; from
    the column), in one scan."""
    return con.execute(
        "SELECT count(*), coalesce(bool_or(source <> 'kineto'), false) FROM collectives"
    ).fetchone()


def _small_job_threads(con: duckdb.DuckDBPyConnection, collectives: int) -> None:
    """One DuckDB thread for a job of fewer ``collectives`` than one row group: link's tables
    follow the collectives, so each of its statements would hand the other threads one
    piece or none, and on such a job their start and hand-over cost more CPU than they save
    time (0.15 s of 1.6 s at 2.1 M events; the same wall time)."""
    if collectives < ROW_GROUP:
        con.execute("SET threads = 1")


class _DerivedParts:
    """The derived tables of one link written as parts of the dataset, one per table and
    job, and swapped into its manifest in one commit."""

    def __init__(self, txn: Transaction, con: duckdb.DuckDBPyConnection) -> None:
        self.txn, self.con = txn, con
        self.derived: dict[str, list[str]] = {}
        self.rows: dict[str, int] = {}

    def write(self, name: str) -> None:
        """Write derived table ``name`` of the connection: a part per job, of its schema's
        columns with their types (the temp tables carry working columns beside them), split
        by DuckDB rather than by a filtered copy and written a row group at a time. (Cast by
        DuckDB: a cast by pyarrow imports pyarrow.compute, 0.1 s.)"""
        columns = typed_columns(table_schema(name))
        jobs = self.con.execute(f"SELECT DISTINCT job FROM {name} ORDER BY job").fetchall()
        self.rows[name] = 0
        for (job,) in jobs:
            # (every row where the table is one job's: no filter to evaluate on each)
            where, params = ("", None) if len(jobs) == 1 else (" WHERE job = ?", [job])
            rows = self.con.sql(f"SELECT {columns} FROM {name}{where}", params=params)
            rel = part_path(name, job, f"link-{_stamp()}")
            with PartWriter(self.txn.dataset, rel) as part:
                for group in row_groups(rows.to_arrow_reader(ROW_GROUP_ROWS)):
                    # (casts only a column whose type differs: they usually agree, and a
                    # cast of the whole table would import pyarrow.compute, 50 ms of a
                    # fresh process)
                    table = conform(name, pa.Table.from_batches(group))
                    self.rows[name] += table.num_rows
                    part.write(part_columns(name, table))
            self.derived.setdefault(name, []).append(rel)

    def commit(self, names: tuple[str, ...]) -> dict[str, int]:
        """Make the parts written the dataset's derived tables (those of an earlier link
        are deleted); the rows of each of ``names``, in their order."""
        old = [rel for rels in self.txn.manifest.derived.values() for rel in rels]
        self.txn.manifest.derived = {n: self.derived[n] for n in names if n in self.derived}
        self.txn.commit(removed=old)
        return {n: self.rows.get(n, 0) for n in names}


def _register_job_inputs(
    con: duckdb.DuckDBPyConnection, jobs: list[str], config: Job | None
) -> list[str]:
    """The runner's inputs (module docstring); the warnings on where job.yaml's layout
    contradicts the traces."""
    from ..model.link_inputs import TABLES, ModelInputs

    layout = {"job": [], "comm": [], "parallel_dim": [], "conflicts": []}
    warnings: list[str] = []
    model = ModelInputs()
    if config is not None:
        for job in jobs:
            model.add(job, config, _traced_ranks(con, job, config))
            groups = _comm_dims_from_layout(con, job, config)
            found = layout_check.conflicts(con, job, config, groups)
            for g in groups:
                layout["job"].append(job)
                layout["comm"].append(g.comm)
                layout["parallel_dim"].append(g.dim)
                layout["conflicts"].append(found.get(g.comm))
            warnings += _conflict_warnings(config, job, groups, found, len(jobs) > 1)
    # (built by DuckDB from the lists: pyarrow would import pandas, and arrow_convert's
    # Polars, 0.16 s to import, is otherwise not needed by a link without a job.yaml)
    types = ("VARCHAR", "VARCHAR", "VARCHAR", "VARCHAR[]")
    _table_of_lists(con, "_job_layout", layout, dict(zip(layout, types, strict=True)))
    for name, columns in model.columns.items():
        _table_of_lists(con, name, columns, TABLES[name])
    _register_exchange_directions(con, config)
    if model.predictions:
        con.register("_predictions_arrow", pa.concat_tables(model.predictions))
        con.execute("CREATE VIEW predictions AS SELECT * FROM _predictions_arrow")
    else:
        con.execute(f"CREATE VIEW predictions AS {empty_select(table_schema('predictions'))}")
    return warnings


def _traced_ranks(con: duckdb.DuckDBPyConnection, job: str, config: Job) -> list[int]:
    """The ranks ``job`` traced; a job.yaml whose world is not the job's is refused."""
    world = config.parallel.world_size
    ranks = [
        r
        for (r,) in con.execute(
            "SELECT DISTINCT rank FROM ranks WHERE job = ? AND rank >= 0", [job]
        ).fetchall()
    ]
    seen_world = con.execute("SELECT max(world_size) FROM ranks WHERE job = ?", [job]).fetchall()[
        0
    ][0]
    if seen_world is not None and seen_world != world:
        raise ConfigError(
            f"{_label(config)}: the layout gives {world} ranks but job {job!r} has "
            f"world size {seen_world}"
        )
    return ranks


def _table_of_lists(
    con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, list], types: dict[str, str]
) -> None:
    """Temp table ``table`` with a column per list of ``columns``, typed as ``types`` says."""
    select = ", ".join(f"unnest(?::{types[name]}[]) AS {name}" for name in columns)
    con.execute(f"CREATE TEMP TABLE {table} AS SELECT {select}", list(columns.values()))


def _conflict_warnings(
    config: Job, job: str, groups: list, found: dict[str, list[str]], several: bool
) -> list[str]:
    """One line per statement of ``found``: job.yaml's name, the statement, how many groups
    it holds for and the ranks of the first."""
    members = {g.comm: g.members for g in groups}
    by_statement: dict[str, set[tuple[int, ...]]] = {}
    for comm, statements in found.items():
        for s in statements:
            by_statement.setdefault(s, set()).add(members[comm])
    where = f" (job {job!r})" if several else ""
    lines = []
    for s, sets in sorted(by_statement.items()):
        first = ", ".join(str(r) for r in min(sets))
        lines.append(
            f"{_label(config)}: the layout contradicts the traces{where}: {s} "
            f"({len(sets):,} group{'s' if len(sets) > 1 else ''}, e.g. ranks {first})"
        )
    return lines


def _register_exchange_directions(con: duckdb.DuckDBPyConnection, config: Job | None) -> None:
    """``_moe_exchange_kernels`` (pattern, direction): what names an MoE library's token
    exchange kernels (vocab.MOE_EXCHANGE_KERNELS); ``_moe_library`` (pattern): its kernels
    (vocab.MOE_LIBRARY_KERNEL); ``_ep_directions`` (purpose, direction): the model's
    expert-parallel items (predict.EP_DIRECTIONS), empty without a job.yaml."""
    from ..vocab import MOE_EXCHANGE_KERNELS, MOE_LIBRARY_KERNEL

    con.execute(
        "CREATE TEMP TABLE _moe_library AS SELECT ?::VARCHAR AS pattern", [MOE_LIBRARY_KERNEL]
    )

    directions: dict[str, str] = {}
    if config is not None:
        from ..model.predict import EP_DIRECTIONS

        directions = EP_DIRECTIONS
    for name, pairs, key in (
        ("_moe_exchange_kernels", MOE_EXCHANGE_KERNELS, "pattern"),
        ("_ep_directions", directions, "purpose"),
    ):
        con.execute(
            f"CREATE TEMP TABLE {name} AS SELECT unnest(?::VARCHAR[]) AS {key}, "
            "unnest(?::VARCHAR[]) AS direction",
            [list(pairs), list(pairs.values())],
        )


def _comm_dims_from_layout(
    con: duckdb.DuckDBPyConnection, job: str, job_spec
) -> list[layout_check.TracedGroup]:
    """Each communicator's dimension: the layout's group over one dimension that equals its
    rank set (``world`` when it spans every rank, ``unknown`` when no group matches). A rank
    set that is the group of several dimensions (with dp = ep, one group is both the data-
    and the expert-parallel group) gets them all, ``|``-separated: its collectives then
    choose by their own evidence (communicator_dims.sql)."""
    from ..model.predict import group, span

    candidates = (
        ("tp", ("tp",), False),
        ("cp", ("cp",), False),
        ("dp", ("dp",), False),
        ("pp", ("pp",), False),
        ("ep", ("ep",), True),
        ("dp", ("dp", "cp"), False),
    )
    if job_spec.parallel.hsdp:  # (HSDP's shard and replicate groups are parts of dp)
        candidates += (("dp", ("dps",), False), ("dp", ("dpr",), False))

    def dims_of(members: tuple[int, ...]) -> list[str]:
        # each dimension's group of the first member, by its size and ends in closed form
        # (predict.span) and only then listed, so the cost is that of the communicators, not
        # of every group of the layout; the first dimension listed wins a group that is over
        # two (dp over dp x cp when cp = 1), and groups of one rank are nobody's
        names: list[str] = []
        for name, dims, expert in candidates:
            s = span(job_spec, members[0], dims, expert=expert)
            if s.size < 2 or (s.size, s.lo, s.hi) != (len(members), members[0], members[-1]):
                continue
            if tuple(group(job_spec, members[0], dims, expert=expert)) != members:
                continue
            if not names or name not in names and dims != ("dp", "cp"):
                names.append(name)
        return names

    world = job_spec.parallel.world_size
    # a profiler lists a group's ranks; an NCCL log knows only its own rank in each
    # communicator, so there the set is assembled from the rows of every rank
    # (member_ranks gives them sorted, without nulls: list_distinct drops those)
    comms = con.execute(
        "SELECT comm, member_ranks(ranks, ranks_first, ranks_stride, nranks, rank), "
        f"min(pg_desc) FROM {STORED_VIEW} WHERE job = ? AND rank >= 0 GROUP BY comm",
        [job],
    ).fetchall()
    out = []
    for comm, members, name in comms:
        if not members:
            continue
        dim = "|".join(dims_of(tuple(members)) or ["unknown"])
        if dim == "unknown" and len(members) == world:
            dim = "world"
        out.append(layout_check.TracedGroup(comm, tuple(members), dim, name))
    return out


def _label(config: Job) -> str:
    """How messages name the job description: the path it was loaded from, else
    ``job.yaml``."""
    return config.source or "job.yaml"


def _stamp() -> str:
    """A part name suffix unique to this link run, so old and new parts never collide."""
    return f"{time.time_ns():x}"
