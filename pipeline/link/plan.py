"""The order the link SQL files run in, from what each says it reads, creates and takes.

Every ``pipeline/link/*.sql`` file ends its opening comment with::

    -- reads: collective_links, primary_sources, predictions
    -- creates: ledger
    -- takes: _links_attributed

``reads`` names the tables, views and macros the file uses that it does not make itself
(the dataset's, the runner's inputs, or another file's); ``creates`` the objects it makes
for others (derived tables and any working object another file reads); ``takes`` an object
of another file that this file renames to one of its own (``ALTER TABLE a RENAME TO b``), so
that it can complete it in place without a copy. A file's other objects are its own: no
other file names them, and the runner drops them once the file has run.

The plan: a file runs after the files that create what it reads or takes, and a file that
takes an object runs after every other file that reads it. Objects named ``_...`` are
working objects, dropped once the last file that reads them has run; the others are the
derived tables the runner publishes, each once the last file that reads it has run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from importlib import resources

from ..dataset.sql_files import sql_text

_HEADER = re.compile(r"^--\s*(reads|creates|takes):(.*(?:\n--\s{2,}\S.*)*)", re.M)
_CREATE = re.compile(
    r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(TABLE|VIEW|MACRO)\s+"
    r"(?:IF\s+NOT\s+EXISTS\s+)?(\w+)",
    re.I,
)
_RENAME = re.compile(r"\bALTER\s+TABLE\s+(\w+)\s+RENAME\s+TO\s+(\w+)", re.I)


class PlanError(ValueError):
    """The link SQL files' headers do not give one valid order (a bug in the package)."""


@dataclass(frozen=True)
class SqlFile:
    """One link SQL file: its name, text and header statements."""

    name: str
    text: str
    reads: tuple[str, ...]
    creates: tuple[str, ...]
    takes: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """The files in run order, the working objects to drop after each, and the tables to
    publish (in the order they are made)."""

    files: tuple[SqlFile, ...]
    #: per file, the (kind, name) of each table or view to drop once it has run
    drops_after: dict[str, tuple[tuple[str, str], ...]]
    published: tuple[str, ...]
    #: per file, the published tables no later file reads: complete once it has run
    complete_after: dict[str, tuple[str, ...]] = field(default_factory=dict)


def strip_comments(text: str) -> str:
    """``text`` without its ``--`` comments (no link SQL string literal holds ``--``)."""
    return re.sub(r"--[^\n]*", "", text)


def created_objects(text: str) -> dict[str, str]:
    """Every object a SQL text creates (by CREATE or by a rename), name -> kind (table,
    view or macro), in the order made."""
    sql = strip_comments(text)
    made: list[tuple[int, str, str]] = [
        (m.start(), m.group(2), m.group(1).lower()) for m in _CREATE.finditer(sql)
    ]
    made += [(m.start(), m.group(2), "table") for m in _RENAME.finditer(sql)]
    return {name: kind for _, name, kind in sorted(made)}


def parse(name: str, text: str) -> SqlFile:
    """One file's header statements."""
    found: dict[str, list[str]] = {"reads": [], "creates": [], "takes": []}
    opening = text.split("\n\n", 1)[0]  # the file's opening comment
    for key, value in _HEADER.findall(opening):
        value = value.replace("--", " ")
        found[key] += [v.strip() for v in value.split(",") if v.strip()]
    return SqlFile(
        name, text, tuple(found["reads"]), tuple(found["creates"]), tuple(found["takes"])
    )


def sql_files() -> list[SqlFile]:
    """Every link SQL file of the package, parsed, in name order."""
    folder = resources.files(__package__)
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [parse(n, sql_text(__package__, n)) for n in names]


def plan(files: list[SqlFile] | None = None) -> Plan:
    """The run order of ``files`` (the package's by default), from their headers.

    Raises
    ------
    PlanError
        An object created (or taken) by two files, or a cycle among the files.
    """
    files = sql_files() if files is None else files
    by_name = {f.name: f for f in files}
    creator = _owners(files, "creates")
    taker = _owners(files, "takes")
    graph: dict[str, set[str]] = {f.name: set() for f in files}
    for f in files:
        for obj in (*f.reads, *f.takes):
            if obj in creator and creator[obj] != f.name:
                graph[f.name].add(creator[obj])
            if obj in taker and taker[obj] != f.name:
                graph[taker[obj]].add(f.name)
    try:
        order = tuple(by_name[n] for n in _stable_order(graph))
    except CycleError as exc:
        raise PlanError(f"link SQL files read each other in a cycle: {exc.args[1]}") from exc
    published = _published(order)
    return Plan(
        order,
        _drops_after(order, creator, taker),
        published,
        _complete_after(order, published),
    )


def _owners(files: list[SqlFile], key: str) -> dict[str, str]:
    owner: dict[str, str] = {}
    for f in files:
        for obj in getattr(f, key):
            if obj in owner:
                verb = {"creates": "created", "takes": "taken"}[key]
                raise PlanError(f"{obj} is {verb} by both {owner[obj]} and {f.name}")
            owner[obj] = f.name
    return owner


def _stable_order(graph: dict[str, set[str]]) -> list[str]:
    """A topological order that takes, of the files ready at each point, the first by name
    (so that the order never depends on a set's iteration)."""
    sorter = TopologicalSorter(graph)
    sorter.prepare()
    order: list[str] = []
    ready: list[str] = []
    while sorter.is_active():
        ready = sorted({*ready, *sorter.get_ready()})
        name = ready.pop(0)
        order.append(name)
        sorter.done(name)
    return order


def _drops_after(
    order: tuple[SqlFile, ...], creator: dict[str, str], taker: dict[str, str]
) -> dict[str, tuple[tuple[str, str], ...]]:
    """The working tables and views each file leaves that no later file reads: its own
    undeclared ones, and shared ones whose last reader it is (a taken object is gone already;
    macros cost nothing to keep)."""
    kinds = {name: kind for f in order for name, kind in created_objects(f.text).items()}
    last: dict[str, str] = {}
    for f in order:
        for obj in (*f.creates, *f.reads):
            if obj.startswith("_") and obj in creator and obj not in taker:
                last[obj] = f.name
    drops: dict[str, list[str]] = {f.name: [] for f in order}
    for f in order:
        drops[f.name] += [o for o in created_objects(f.text) if o not in f.creates]
    for obj, name in last.items():
        drops[name].append(obj)
    return {
        name: tuple((kinds[o], o) for o in objs if kinds[o] != "macro")
        for name, objs in drops.items()
    }


def _published(order: tuple[SqlFile, ...]) -> tuple[str, ...]:
    return tuple(obj for f in order for obj in f.creates if not obj.startswith("_"))


def _complete_after(
    order: tuple[SqlFile, ...], published: tuple[str, ...]
) -> dict[str, tuple[str, ...]]:
    """Each published table under the last file that creates or reads it (in the order
    they are made)."""
    last: dict[str, str] = {}
    for f in order:
        for obj in (*f.creates, *f.reads):
            if obj in published:
                last[obj] = f.name
    return {f.name: tuple(t for t in published if last[t] == f.name) for f in order}
