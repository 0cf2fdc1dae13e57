"""PyTorch flight recorder dumps: the last collectives each rank issued, as ``flight_recorder``.

A flight recorder dump (c10d ``FlightRecorder``, formerly ``NCCLTraceBuffer``) is written per
rank on a collective timeout or on demand (``TORCH_FR_BUFFER_SIZE`` /
``TORCH_NCCL_TRACE_BUFFER_SIZE``, ``TORCH_FR_DUMP_TEMP_FILE`` /
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), as a pickle (the default writer) or as JSON
(``_dump_nccl_trace_json`` / ``_dump_fr_trace_json``), plain or gzipped. This module owns reading
every layout PyTorch has written into ``collectives``, ``communicators`` and ``ranks``:

- unversioned (PyTorch 2.2): a bare list of entries with ``seq_id``, ``pg_id`` and
  ``time_created_us``;
- ``1.x``: ``{"entries", "version", "pg_config": {pg_id: [ranks]}, "nccl_comm_state"}``, entries
  with ``seq_id``, ``op_id``, ``record_id``, ``time_created_ns`` and ``time_discovered_*_ns``;
- ``2.x``: entries name their group (``process_group: [name, desc]``) and carry
  ``collective_seq_id``, ``p2p_seq_id`` and later ``input_dtypes``/``output_dtypes``, ``is_p2p``,
  ``timeout_ms``, ``thread_id``/``thread_name``; ``pg_config`` is
  ``{name: {"name", "desc", "ranks": "[0, 1]"}}``, plus ``pg_status`` and ``comm_lib_version``.
  A dump without collectives has no ``entries`` key.

A pickle is untrusted input: it is loaded by an unpickler whose ``find_class`` refuses every global,
so only the plain types PyTorch's pickler writes for a dump (dict, list, tuple, str, int, float,
bool, None) can come out of it, and nothing in the file runs. Its memo lets a few hundred bytes
reference one list from two places, level after level, a structure of 2**60 values: so sets and
dict keys other than str, int, float, bool and None are refused while loading (hashing such a key
is the only work loading does per value reached, and a deep one crashes the interpreter), and the
loaded dump is walked once, counting a value as often as it is reached, before anything reads it
(:data:`MIN_NODES`, :data:`MAX_DEPTH`). Error messages describe a value
(:func:`~pipeline.ingest.values.describe`), never print it. The unpickler is CPython's pure-Python
one (the C one cannot refuse keys): about 0.3 s per MB of pickle.

Entries are walked once in Python: a dump holds at most the ring buffer's size (2000 by default),
and every entry has to be checked for its types anyway so that bad input names the entry.
"""

from __future__ import annotations

import io
import pickle
import re
import struct
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ...dataset.arrow_convert import table_from_lists
from ...errors import TraceFormatError
from ...ingest.gz import gunzip
from ...ingest.result import ParseResult, Warnings, parser_schema
from ...ingest.values import (
    INT64_MAX,
    OutOfRange,
    check_bytes,
    check_int64,
    describe,
    rank_from_file_name,
)
from ...vocab import DTYPE_SIZES, op_of

FORMAT = "flight_recorder"

#: Version written for the bare-list dumps of PyTorch 2.2, which carry no version key.
UNVERSIONED = "unversioned"

#: c10::toString(ScalarType) -> tokenwire dtype name (its size: vocab.DTYPE_SIZES).
_DTYPES: dict[str, str] = {
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Half": "float16",
    "Float": "float32",
    "Double": "float64",
    "BFloat16": "bfloat16",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Bool": "bool",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e8m0fnu": "float8_e8m0fnu",
    "Float4_e2m1fn_x2": "float4_e2m1fn_x2",
}

#: Values (each counted as often as it is reached) a dump may hold: as many as its bytes, at least
#: this many. A dump without shared lists cannot exceed its byte count (every value it holds
#: costs at least one byte of JSON or one pickle opcode); only a memo reference reused level after
#: level can, and that is a structure no dump writer produces.
MIN_NODES = 1_000_000
#: Nesting a dump may have: real ones nest 5 deep (dump, entries, entry, frames, frame).
MAX_DEPTH = 100
#: Dict keys a dump holds: strings (and integer group ids in 1.x); all are cheap to hash.
_PLAIN_KEYS = (str, int, float, bool, type(None))

#: Backends whose work carries device events, so that ``state`` reaches started / completed.
EVENT_BACKENDS = frozenset({"nccl", "xccl", "hccl", "cncl"})

_PICKLE_MAGIC = b"\x80"
_GZIP_MAGIC = b"\x1f\x8b"

# --------------------------------------------------------------------------- detection


def sniff(path: Path, head: bytes) -> bool:
    """True when ``head`` (first 64 KiB, gunzipped) is clearly a flight recorder dump."""
    if head.startswith(_PICKLE_MAGIC) and len(head) > 2 and 2 <= head[1] <= 5:
        return b"profiling_name" in head or (b"pg_config" in head and b"version" in head)
    text = head.lstrip()
    if not text.startswith(b"{"):
        return False
    if b'"traceEvents"' in head or b'"schemaVersion"' in head:
        return False
    has_version = b'"version"' in head
    fr_keys = (b'"pg_status"', b'"nccl_comm_state"', b'"comm_lib_version"')
    if has_version and any(k in head for k in fr_keys):
        return True
    return b'"entries"' in head and b'"profiling_name"' in head


# --------------------------------------------------------------------------- loading


class _PlainDataUnpickler(pickle._Unpickler):  # noqa: SLF001 - the C one has no opcode hooks
    """An unpickler that can build plain data only: every global and persistent id is refused, and
    so are sets and dict keys that are not plain scalars (a key is hashed, and hashing a tuple walks
    all of it, a shared-reference DAG 2**60 times)."""

    dispatch = dict(pickle._Unpickler.dispatch)  # noqa: SLF001

    def find_class(self, module: str, name: str) -> Any:
        raise _RefusedPickle(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise _RefusedPickle(f"persistent id {describe(pid)}")

    def _refuse_set(self) -> None:
        raise _RefusedPickle("a set")

    def _set_item(self) -> None:
        value = self.stack.pop()
        key = _plain_key(self.stack.pop())
        self.stack[-1][key] = value

    def _set_items(self) -> None:
        items = self.pop_mark()
        target = self.stack[-1]
        for i in range(0, len(items), 2):
            target[_plain_key(items[i])] = items[i + 1]

    def _dict(self) -> None:
        items = self.pop_mark()
        self.append({_plain_key(items[i]): items[i + 1] for i in range(0, len(items), 2)})

    for _op in (pickle.EMPTY_SET, pickle.ADDITEMS, pickle.FROZENSET):
        dispatch[_op[0]] = _refuse_set
    dispatch[pickle.SETITEM[0]] = _set_item
    dispatch[pickle.SETITEMS[0]] = _set_items
    dispatch[pickle.DICT[0]] = _dict
    del _op


def _plain_key(key: Any) -> Any:
    if not isinstance(key, _PLAIN_KEYS):
        raise _RefusedPickle(f"a dict key that is {describe(key)}")
    return key


class _RefusedPickle(Exception):
    """A pickle asked for something other than plain data."""


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from exc
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    return gunzip(path, raw)


def _load(path: Path, data: bytes) -> Any:
    if not data.strip():
        raise TraceFormatError(path, "empty file, not a flight recorder dump", offset=0)
    if data.startswith(_PICKLE_MAGIC):
        obj = _load_pickle(path, data)
    elif data.lstrip()[:1] in (b"{", b"["):
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise TraceFormatError(path, f"invalid JSON: {exc.msg}", line=exc.lineno) from exc
    else:
        raise TraceFormatError(
            path, "neither JSON nor pickle: not a flight recorder dump", offset=0
        )
    _check_size(path, obj, max(MIN_NODES, len(data)))
    return obj


def _check_size(path: Path, obj: Any, max_nodes: int) -> None:
    """Refuse a dump with more than ``max_nodes`` values, each counted as often as it is reached
    (a list referenced twice counts twice), or nested deeper than :data:`MAX_DEPTH`: whatever
    reads the dump afterwards does work in proportion to that count. Stops at the limit, so
    the walk itself is bounded too. The error names the entry (or top-level key) it is in."""
    nodes = 0
    stack: list[tuple[Any, int, str]] = [*_top_parts(obj)]
    while stack:
        value, depth, place = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise TraceFormatError(
                path,
                f"{place}more than {max_nodes:,} values in the dump (a shared list counts each "
                "time it is used): refused, a dump holds fewer values than bytes",
            )
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth >= MAX_DEPTH and children:
            raise TraceFormatError(path, f"{place}values nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1, place) for child in children)


def _top_parts(obj: Any) -> list[tuple[Any, int, str]]:
    """The dump's parts to walk, with depth and the place an error names: ``entry N: `` for
    entries, ``'key': `` for the other top-level keys."""
    if isinstance(obj, list):
        return [(e, 2, f"entry {i}: ") for i, e in enumerate(obj)]
    if not isinstance(obj, dict):
        return [(obj, 1, "")]
    parts = []
    for key, value in obj.items():
        if key == "entries" and isinstance(value, list):
            parts += [(e, 3, f"entry {i}: ") for i, e in enumerate(value)]
        else:
            parts.append((value, 2, f"{describe(key)}: "))
    return parts[::-1]  # (popped from the end: entry 0 first)


def _load_pickle(path: Path, data: bytes) -> Any:
    stream = io.BytesIO(data)
    try:
        return _PlainDataUnpickler(stream).load()
    except _RefusedPickle as exc:
        raise TraceFormatError(
            path,
            f"pickle refused: it asks to load {exc}; a flight recorder dump holds only plain data "
            "(dict, list, tuple, str, int, float, bool, None), so it was not loaded",
            offset=stream.tell(),
        ) from exc
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        AttributeError,
        MemoryError,
        OverflowError,
        RecursionError,
        UnicodeDecodeError,
        struct.error,
    ) as exc:
        raise TraceFormatError(
            path, f"corrupt or truncated pickle: {type(exc).__name__}: {exc}", offset=stream.tell()
        ) from exc


# --------------------------------------------------------------------------- dump structure


@dataclass
class _Group:
    """One process group as the dump's pg_config describes it."""

    key: str
    pg_name: str | None
    pg_desc: str | None
    ranks: list[int] | None


@dataclass
class _Dump:
    version: str
    entries: list[Any]
    groups: list[_Group] = field(default_factory=list)
    rank: int | None = None
    comm_lib_version: str | None = None


def _structure(path: Path, obj: Any) -> _Dump:
    if isinstance(obj, list):
        return _Dump(version=UNVERSIONED, entries=obj)
    if not isinstance(obj, dict):
        raise TraceFormatError(
            path, f"top level is a {type(obj).__name__}, not a dump dict or list"
        )
    if "version" not in obj and "entries" not in obj:
        raise TraceFormatError(path, "not a flight recorder dump: no 'version' or 'entries' key")
    version = obj.get("version", UNVERSIONED)
    if not isinstance(version, str):
        raise TraceFormatError(path, f"'version' is {describe(version)}, not a string")
    entries = obj.get("entries", [])
    if not isinstance(entries, list):
        raise TraceFormatError(path, "'entries' is not a list")
    rank = obj.get("rank")
    if rank is not None and not _is_int(rank):
        raise TraceFormatError(path, f"'rank' is {describe(rank)}, not an integer")
    if rank is not None and not 0 <= rank <= INT64_MAX:
        raise TraceFormatError(path, f"'rank' is {describe(rank)}, not a rank")
    lib = obj.get("comm_lib_version")
    return _Dump(
        version=version,
        entries=entries,
        groups=_pg_config(path, obj.get("pg_config", {})),
        rank=rank,
        comm_lib_version=lib if isinstance(lib, str) and lib else None,
    )


def _pg_config(path: Path, cfg: Any) -> list[_Group]:
    if not isinstance(cfg, dict):
        raise TraceFormatError(path, "'pg_config' is not a dict")
    groups = []
    for key, value in cfg.items():
        if isinstance(value, (list, tuple)):  # 1.x: {pg_id: [ranks]}
            groups.append(_Group(str(key), None, None, _rank_list(path, key, value)))
        elif isinstance(value, dict):  # 2.x: {name: {"name", "desc", "ranks": "[0, 1]"}}
            name = _group_text(path, key, "name", value.get("name", key))
            desc = _group_text(path, key, "desc", value.get("desc"))
            groups.append(_Group(str(key), name, desc, _rank_list(path, key, value.get("ranks"))))
        else:
            raise TraceFormatError(
                path, f"pg_config[{describe(key)}] is neither a dict nor a rank list"
            )
    return groups


def _group_text(path: Path, key: Any, what: str, value: Any) -> str | None:
    """A group's name or description: text (integer ids read as their digits); "" is none."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if _is_int(value) and 0 <= value <= INT64_MAX:
        return str(value)
    raise TraceFormatError(path, f"pg_config[{describe(key)}] {what} is {describe(value)}")


def _rank_list(path: Path, key: Any, value: Any) -> list[int] | None:
    if value is None:
        return None
    where = f"pg_config[{describe(key)}] ranks"
    if isinstance(value, str):
        # 2.x writes the ranks as the text of a list; parse digits, never eval.
        if not re.fullmatch(r"\s*\[\s*(\d+\s*(,\s*\d+\s*)*)?\]\s*", value):
            raise TraceFormatError(path, f"{where} {describe(value)} is not a rank list")
        value = [_digits(x) for x in re.findall(r"\d+", value)]
    if not isinstance(value, (list, tuple)) or not all(_is_int(x) for x in value):
        raise TraceFormatError(path, f"{where} is not a list of integers")
    if not all(0 <= x <= INT64_MAX for x in value):
        raise TraceFormatError(path, f"{where}: a rank outside 0..2**63-1")
    return list(value)


def _digits(text: str) -> int:
    """The number ``text`` (decimal digits), or -1 when it has more digits than any int64:
    ``int()`` of thousands of digits is slow, and past 4,300 refused."""
    text = text.lstrip("0") or "0"
    return int(text) if len(text) <= 19 else -1


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


# --------------------------------------------------------------------------- entries


def _op_from_profiling_name(name: str) -> tuple[str, str | None, str, int | None, int | None]:
    """(op, backend, bare name, send/recv source, destination) from ``nccl:send 0->1`` etc."""
    backend, _, rest = name.partition(":") if ":" in name else ("", "", name)
    bare, _, meta = rest.partition(" ")
    src = dst = None
    m = re.fullmatch(r"(\d+)->(\d+)", meta) or None
    if bare == "send" and m:
        src, dst = _digits(m.group(1)), _digits(m.group(2))
    m = re.fullmatch(r"(\d+)<-(\d+)", meta) or None
    if bare == "recv" and m:
        dst, src = _digits(m.group(1)), _digits(m.group(2))
    if -1 in (src, dst):
        raise _EntryError(f"'profiling_name' {describe(name)} names a rank beyond 64-bit integers")
    return op_of(bare), backend or None, bare, src, dst


class _EntryError(Exception):
    pass


def _int_field(
    e: dict, key: str, *, required: bool = False, zero_is_null: bool = False
) -> int | None:
    v = e.get(key)
    if v is None:
        if required:
            raise _EntryError(f"missing '{key}'")
        return None
    if not _is_int(v):
        raise _EntryError(f"'{key}' is {describe(v)}, not an integer")
    if zero_is_null and v == 0:
        return None
    return _int64(int(v), key)


def _int64(v: int, what: str) -> int:
    try:
        return check_int64(v, f"'{what}'")
    except OutOfRange as exc:
        raise _EntryError(str(exc)) from None


def _sizes(e: dict, key: str) -> list[list[int]] | None:
    v = e.get(key)
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not all(
        isinstance(s, (list, tuple)) and all(_is_int(d) for d in s) for s in v
    ):
        raise _EntryError(f"'{key}' is not a list of shapes")
    return [list(s) for s in v]


def _dtypes(e: dict, key: str) -> list[str] | None:
    v = e.get(key)
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or not all(isinstance(s, str) for s in v):
        raise _EntryError(f"'{key}' is not a list of dtype names")
    return list(v)


def _numel(sizes: list[list[int]] | None) -> int | None:
    """Elements of all the shapes; each dimension and every partial result must fit int64 (so
    no product of thousands of huge dimensions is ever computed)."""
    if sizes is None:
        return None
    total = 0
    for shape in sizes:
        n = 1
        for d in shape:
            if d < 0:
                raise _EntryError(f"a dimension is {describe(d)}, negative")
            n = _int64(n * _int64(d, "dimension"), "element count")
        total = _int64(total + n, "element count")
    return total


def _ms_to_ns(v: Any, key: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise _EntryError(f"'{key}' is {describe(v)}, not a number")
    if isinstance(v, int):
        return _int64(_int64(v, key) * 1_000_000, key)
    try:
        # repr keeps the digits the writer produced; Decimal avoids binary float scaling.
        return _int64(int((Decimal(repr(v)) * 1_000_000).to_integral_value()), key)
    except (InvalidOperation, ValueError, OverflowError) as exc:
        raise _EntryError(f"'{key}' is {describe(v)}, not a finite number") from exc


def _message_bytes(
    op: str, count: int | None, out_count: int | None, esize: int | None
) -> int | None:
    """Message size M (``docs/dataset.md``) from this rank's input/output element counts."""
    if esize is None:
        return None
    if op in ("all_gather", "recv", "gather"):
        n = out_count if out_count else count
    else:
        n = count if count else out_count
    if n is None:
        return None
    try:
        return check_bytes(n * esize, "'bytes' (elements x element size)")
    except OutOfRange as exc:
        raise _EntryError(str(exc)) from None


_COLUMNS = (
    "rank",
    "collective_id",
    "comm",
    "pg_name",
    "seq",
    "p2p_seq",
    "op_seq",
    "is_p2p",
    "record_id",
    "op",
    "op_name",
    "dtype",
    "count",
    "out_count",
    "bytes",
    "group_size",
    "peer",
    "state",
    "retired",
    "enqueue_ns",
    "time_discovered_started_ns",
    "time_discovered_completed_ns",
    "dur_ns",
    "timeout_ns",
    "size_source",
)


@dataclass
class _Rows:
    cols: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in _COLUMNS})
    backends: dict[str, str] = field(default_factory=dict)  # comm -> backend
    pgs: dict[str, tuple[str | None, str | None]] = field(
        default_factory=dict
    )  # comm -> name, desc

    def add(self, **row: Any) -> None:
        for c in _COLUMNS:
            self.cols[c].append(row.get(c))


def _entry_pg(e: dict) -> tuple[str, str | None, str | None]:
    pg = e.get("process_group")
    if pg is not None:
        if not (
            isinstance(pg, (list, tuple)) and len(pg) == 2 and all(isinstance(x, str) for x in pg)
        ):
            raise _EntryError(f"'process_group' is {describe(pg)}, not [name, desc]")
        name, desc = pg
        return f"pg:{name}", name, (desc if desc not in ("", "undefined") else None)
    pg_id = _int_field(e, "pg_id", required=True)
    return f"pg_id:{pg_id}", None, None


def _entries(path: Path, dump: _Dump, rank: int, ranks_of: dict[str, list[int]]) -> _Rows:
    rows = _Rows()
    for i, e in enumerate(dump.entries):
        try:
            _add_entry(rows, i, e, rank, ranks_of)
        except _EntryError as exc:
            raise TraceFormatError(path, f"entry {i}: {exc}") from exc
    return rows


def _add_entry(rows: _Rows, i: int, e: Any, rank: int, ranks_of: dict[str, list[int]]) -> None:
    if not isinstance(e, dict):
        raise _EntryError(f"is a {type(e).__name__}, not a dict")
    name = e.get("profiling_name")
    if not isinstance(name, str):
        raise _EntryError("missing 'profiling_name'")
    op, backend, _bare, src, dst = _op_from_profiling_name(name)
    comm, pg_name, pg_desc = _entry_pg(e)
    rows.pgs.setdefault(comm, (pg_name, pg_desc))
    if backend:
        rows.backends.setdefault(comm, backend)
    seq_key = "collective_seq_id" if "collective_seq_id" in e else "seq_id"
    seq = _int_field(e, seq_key, required=True)
    in_sizes, out_sizes = _sizes(e, "input_sizes"), _sizes(e, "output_sizes")
    in_dt, out_dt = _dtypes(e, "input_dtypes"), _dtypes(e, "output_dtypes")
    raw_dtype = (in_dt or out_dt or [None])[0]
    dtype = _DTYPES.get(raw_dtype, raw_dtype) if raw_dtype else None
    esize = DTYPE_SIZES.get(dtype) if raw_dtype in _DTYPES else None
    count, out_count = _numel(in_sizes), _numel(out_sizes)
    members = ranks_of.get(comm)
    peer = dst if op == "send" else src if op == "recv" else None
    if peer is not None and members and peer < len(members):
        peer = members[peer]
    is_p2p = e.get("is_p2p")
    if is_p2p is not None and not isinstance(is_p2p, bool):
        raise _EntryError(f"'is_p2p' is {describe(is_p2p)}, not a bool")
    retired = e.get("retired")
    if retired is not None and not isinstance(retired, bool):
        raise _EntryError(f"'retired' is {describe(retired)}, not a bool")
    state = e.get("state")
    if state is not None and not isinstance(state, str):
        raise _EntryError(f"'state' is {describe(state)}, not a string")
    created = _int_field(e, "time_created_ns")
    if created is None and "time_created_us" in e:
        us = _int_field(e, "time_created_us")
        created = None if us is None else _int64(us * 1000, "time_created_us")
    timeout = _int_field(e, "timeout_ms")
    rows.add(
        rank=rank,
        collective_id=i,
        comm=comm,
        pg_name=pg_name,
        seq=seq,
        p2p_seq=_int_field(e, "p2p_seq_id"),
        op_seq=_int_field(e, "op_id"),
        is_p2p=is_p2p if is_p2p is not None else op in ("send", "recv"),
        record_id=_int_field(e, "record_id"),
        op=op,
        op_name=name,
        dtype=dtype,
        count=count,
        out_count=out_count,
        bytes=_message_bytes(op, count, out_count, esize),
        group_size=len(members) if members else None,
        peer=peer,
        state=state,
        retired=retired,
        enqueue_ns=created,
        # JSON dumps write 0 for "never seen", pickles write None.
        time_discovered_started_ns=_int_field(e, "time_discovered_started_ns", zero_is_null=True),
        time_discovered_completed_ns=_int_field(
            e, "time_discovered_completed_ns", zero_is_null=True
        ),
        dur_ns=_ms_to_ns(e.get("duration_ms"), "duration_ms"),
        timeout_ns=None if timeout is None else _int64(timeout * 1_000_000, "timeout_ms"),
        size_source="input_dims" if count is not None or out_count is not None else "none",
    )


# --------------------------------------------------------------------------- groups and ranks


def _group_comm(g: _Group, version: str) -> str | None:
    if g.pg_name is not None:
        return f"pg:{g.pg_name}"
    if version.startswith("1.") or version == UNVERSIONED:
        return f"pg_id:{g.key}"
    return None


def _resolve_groups(
    dump: _Dump, entry_pgs: dict[str, tuple[str | None, str | None]], warnings: Warnings
) -> dict[str, _Group]:
    """pg_config groups by comm id; the nameless entry gloo writes is attributed where it can be."""
    out: dict[str, _Group] = {}
    nameless = []
    for g in dump.groups:
        comm = _group_comm(g, dump.version)
        if comm is None:
            nameless.append(g)
        else:
            out[comm] = g
    unconfigured = [c for c in entry_pgs if c not in out]
    for g in nameless:
        # ProcessGroupGloo records its ranks before Python names the group, under ("", ""), and
        # each later gloo group overwrites that key; only when the entries use a single group
        # that pg_config does not name is it certain whose ranks these are.
        if len(nameless) == 1 and len(unconfigured) == 1 and len(entry_pgs) == 1:
            comm = unconfigured[0]
            name, desc = entry_pgs[comm]
            out[comm] = _Group(g.key, name, desc or g.pg_desc, g.ranks)
            warnings.add(
                f"pg_config entry without a name attributed to {comm}, the only group used"
            )
        else:
            warnings.add("pg_config entry without a group name skipped (cannot tell whose ranks)")
    return out


def _communicators(rank: int, groups: dict[str, _Group], rows: _Rows) -> pa.Table:
    comms = list(dict.fromkeys([*groups, *rows.pgs]))
    data: dict[str, list[Any]] = {
        k: []
        for k in (
            "rank",
            "comm",
            "pg_name",
            "pg_desc",
            "backend",
            "nranks",
            "ranks",
            "rank_in_comm",
        )
    }
    for comm in comms:
        g = groups.get(comm)
        name, desc = rows.pgs.get(comm, (None, None))
        members = g.ranks if g else None
        data["rank"].append(rank)
        data["comm"].append(comm)
        data["pg_name"].append(name if name is not None else (g.pg_name if g else None))
        data["pg_desc"].append(desc if desc is not None else (g.pg_desc if g else None))
        data["backend"].append(rows.backends.get(comm))
        data["nranks"].append(len(members) if members is not None else None)
        data["ranks"].append(members)
        data["rank_in_comm"].append(members.index(rank) if members and rank in members else None)
    return table_from_lists(
        data,
        pa.schema(
            [
                ("rank", pa.int64()),
                ("comm", pa.string()),
                ("pg_name", pa.string()),
                ("pg_desc", pa.string()),
                ("backend", pa.string()),
                ("nranks", pa.int64()),
                ("ranks", pa.list_(pa.int64())),
                ("rank_in_comm", pa.int64()),
            ]
        ),
    )


def _world_size(groups: dict[str, _Group]) -> int | None:
    for comm, g in groups.items():
        if g.ranks is not None and (comm == "pg:0" or g.pg_desc == "default_pg"):
            return len(g.ranks)
    return None


# --------------------------------------------------------------------------- parse


def parse(path: Path) -> ParseResult:
    """Read one flight recorder dump (JSON or pickle, plain or gzipped) into tokenwire tables."""
    path = Path(path)
    dump = _structure(path, _load(path, _read_bytes(path)))
    if dump.rank is not None:
        rank, rank_source = dump.rank, "rank_key"
    else:
        rank, rank_source = rank_from_file_name(path.name), "file_name"
        if rank is None:
            raise TraceFormatError(
                path, "no 'rank' key and no rank in the file name (rank<N>, rank-N, _N.)"
            )
    warnings = Warnings()
    # Entries need each group's members (peer ranks) and groups need the entries' names, so
    # read entries once for their groups, resolve pg_config, then build the rows.
    entry_pgs: dict[str, tuple[str | None, str | None]] = {}
    for i, e in enumerate(dump.entries):
        if isinstance(e, dict):
            try:
                comm, name, desc = _entry_pg(e)
            except _EntryError as exc:
                raise TraceFormatError(path, f"entry {i}: {exc}") from exc
            entry_pgs.setdefault(comm, (name, desc))
    groups = _resolve_groups(dump, entry_pgs, warnings)
    ranks_of = {c: g.ranks for c, g in groups.items() if g.ranks}
    rows = _entries(path, dump, rank, ranks_of)
    collectives = table_from_lists(rows.cols, _collectives_arrow())
    backend = next(iter(rows.backends.values()), None)
    ranks = table_from_lists(
        {
            "rank": [rank],
            "world_size": [_world_size(groups)],
            "backend": [backend],
            "comm_lib_version": [dump.comm_lib_version],
        },
        pa.schema(
            [
                ("rank", pa.int64()),
                ("world_size", pa.int64()),
                ("backend", pa.string()),
                ("comm_lib_version", pa.string()),
            ]
        ),
    )
    return ParseResult(
        format=FORMAT,
        tables={
            "collectives": collectives,
            "communicators": _communicators(rank, groups, rows),
            "ranks": ranks,
        },
        format_version=dump.version,
        rank_source=rank_source,
        warnings=warnings,
    )


def _collectives_arrow() -> pa.Schema:
    return parser_schema("collectives", _COLUMNS)
