"""Hostile job.yaml files through the real command line: one located error line, exit 1.

Each case builds its file, runs ``tokenwire predict --config`` and ``tokenwire link
--config`` (``report --config`` for some) in a child process limited to 1.5 GB of address
space and 30 s of CPU, and checks the exit code, that stderr is exactly one line
``Error: FILE: PLACE: what`` of bounded length, and that the file is unchanged.
"""

from __future__ import annotations

import hashlib
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.errors import MAX_MESSAGE_CHARS, MAX_VALUE_CHARS
from pipeline.model.config import (
    MAX_JOB_BYTES,
    MAX_LAYERS,
    MAX_RANKS,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
)
from tests.conftest import REPO_ROOT

SAMPLE = (REPO_ROOT / "sample_traces" / "job.yaml").read_text()
#: A valid job (world size 8, as the sample dataset) that the cases below change.
GOOD = "model: {preset: gpt2-small}\nparallel: {tp: 2, pp: 2, dp: 2}\n"
#: Longest stderr line: ``Error: `` and a ConfigError message, itself cut to twice
#: MAX_MESSAGE_CHARS with the file name (tmp paths are short).
MAX_LINE = len("Error: ") + 2 * MAX_MESSAGE_CHARS


def _limits() -> None:
    # (a child that expands an alias bomb or recurses without end dies here, not the machine)
    resource.setrlimit(resource.RLIMIT_AS, (1_500_000_000, 1_500_000_000))
    resource.setrlimit(resource.RLIMIT_CPU, (30, 30))


def _billion_laughs() -> bytes:
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for i in range(1, 10):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    # under a real key, so validation (and an error message showing the value) reaches it
    lines.append("model: {preset: gpt2-small}\nparallel: {tp: *l9}")
    return "\n".join(lines).encode() + b"\n"


def _alias_chain() -> bytes:
    # each alias adds a level: nesting beyond the limit from a few hundred bytes
    lines = ["c0: &c0 [x]"] + [f"c{i}: &c{i} [*c{i - 1}]" for i in range(1, MAX_YAML_DEPTH + 8)]
    return ("\n".join(lines) + "\n" + GOOD).encode()


def _many_nodes() -> bytes:
    items = ", ".join(["1"] * (MAX_YAML_NODES + 10))
    return f"{GOOD}batch: {{micro_batch: [{items}]}}\n".encode()


def _deep(open_: str, close: str) -> Callable[[], bytes]:
    return lambda: f"model: {open_ * 100_000}1{close * 100_000}\n".encode()


def _sample_with(old: str, new: str) -> Callable[[], bytes]:
    def build() -> bytes:
        assert old in SAMPLE
        return SAMPLE.replace(old, new).encode()

    return build


def _past_64_bit() -> bytes:
    # every value within its limit, world size 8 as the dataset's, but the TP message
    # b·s·h·e alone is 2^74 bytes
    big = 1 << 24
    edits = {"seq_len: 128": f"seq_len: {big}", "hidden: 256": f"hidden: {big}",
             "micro_batch: 2": f"micro_batch: {big}", "global_batch: 16": f"global_batch: {big}",
             "  tp: 2": "  tp: 4", "  dp: 2": "  dp: 1"}  # fmt: skip
    text = SAMPLE
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    return text.encode()


def _text(text: str) -> Callable[[], bytes]:
    return lambda: text.encode()


# (case, the file's bytes, the PLACE of the error line, a regex the rest must match)
CASES: list[tuple[str, Callable[[], bytes], str, str]] = [
    ("billion-laughs", _billion_laughs, r"line 4, column \d+",
     rf"alias \*l\d .*{MAX_YAML_NODES:,}"),  # fmt: skip
    ("alias-to-itself", _text(f"{GOOD}batch: &b {{micro_batch: [*b]}}\n"),
     r"line 3, column \d+", "contains itself"),  # fmt: skip
    ("alias-chain-depth", _alias_chain, r"line \d+, column \d+", rf"deeper than {MAX_YAML_DEPTH}"),
    ("many-nodes", _many_nodes, r"line 3, column \d+", f"{MAX_YAML_NODES:,} YAML nodes"),
    ("deep-lists", _deep("[", "]"), r"line 1, column \d+", f"deeper than {MAX_YAML_DEPTH}"),
    ("deep-maps", _deep("{a: ", "}"), r"line 1, column \d+", f"deeper than {MAX_YAML_DEPTH}"),
    ("latin-1", lambda: GOOD.encode() + b"# caf\xe9\n", "line 3", r"not UTF-8 text \(byte 0xe9"),
    # (UTF-16 without its byte order mark reads as UTF-8 with a NUL after each letter)
    ("utf-16-without-bom", lambda: GOOD.encode("utf-16-le"), "line 1", "U\\+0000 is not allowed"),
    ("control-character", _text(GOOD + "\x07\n"), "line 3", "U\\+0007 is not allowed"),
    ("over-1-MiB", lambda: GOOD.encode() + b"#" * MAX_JOB_BYTES + b"\n", f"byte {MAX_JOB_BYTES}",
     "a job.yaml is a few KB"),  # fmt: skip
    ("5000-digit-int", _sample_with("  tp: 2", "  tp: " + "9" * 5000), r"line \d+, column 7",
     "an integer of 5,000 digits"),  # fmt: skip
    ("huge-hex-int", _sample_with("  tp: 2", "  tp: 0x" + "f" * 200_000), "parallel.tp",
     f"must be at most {MAX_RANKS:,}, got <an integer of about"),  # fmt: skip
    ("tp-10**30", _sample_with("  tp: 2", f"  tp: {10**30}"), "parallel.tp",
     f"must be at most {MAX_RANKS:,}"),  # fmt: skip
    ("layout-past-max-ranks", _text("model: gpt2-small\nparallel: {dp: 32768, pp: 65536}\n"),
     "parallel", f"more than the {MAX_RANKS:,}"),  # fmt: skip
    ("layers-past-max", _sample_with("layers: 4", f"layers: {MAX_LAYERS + 1}"), "model.layers",
     f"must be at most {MAX_LAYERS:,}"),  # fmt: skip
    ("bandwidth-1e400", _sample_with("intra_node_GBps: 450", "intra_node_GBps: 1.0e+400"),
     "network.intra_node_GBps", "must be a finite number, got inf"),  # fmt: skip
    ("capacity-nan", _text("model: {preset: mixtral-8x7b, moe: {capacity_factor: .nan}}\n"),
     "model.moe.capacity_factor", "must be a positive number, got nan"),  # fmt: skip
    ("past-64-bit-bytes", _past_64_bit, "model and batch", "past 64-bit byte counts"),
    ("preset-list", _text("model: {preset: [a]}\n"), "model.preset", r"unknown preset \['a'\]"),
    ("preset-mapping", _text("model: {preset: {a: 1}}\n"), "model.preset", "unknown preset"),
    ("model-list", _text("model: [gpt2-small]\n"), "model", "must be a mapping"),
    ("model-null", _text("model:\nparallel: {tp: 2}\n"), "model", "must be a mapping"),
    ("section-scalar", _text("model: gpt2-small\nparallel: 8\n"), "parallel", "got 8"),
    ("section-false", _text("model: gpt2-small\nbatch: false\n"), "batch", "got False"),
    ("string-degree", _sample_with("  tp: 2", '  tp: "2"'), "parallel.tp", "got '2'"),
    ("bool-degree", _sample_with("  tp: 2", "  tp: true"), "parallel.tp", "got True"),
    ("zero-degree", _sample_with("  dp: 2", "  dp: 0"), "parallel.dp", "got 0"),
    ("negative-degree", _sample_with("  pp: 2", "  pp: -2"), "parallel.pp", "got -2"),
    ("float-zero-stage", _sample_with("zero_stage: 0", "zero_stage: 1.0"), "parallel.zero_stage",
     "got 1.0"),  # fmt: skip
    ("list-dtype", _sample_with("params: bf16", "params: [bf16]"), "dtypes.params", "got"),
    ("1-MB-preset-name", _text("model: {preset: '" + "x" * 500_000 + "'}\n"), "model.preset",
     r"'x+\.\.\.x+'"),  # fmt: skip
    # (an explicit key: a plain one ends at 1,024 characters)
    ("long-unknown-key", _text(GOOD + "? " + "k" * 100_000 + "\n: 1\n"), r"'k+\.\.\.k+'",
     "unknown key"),  # fmt: skip
    ("month-13", _sample_with("order: tp-cp-ep-dp-pp", "order: 2024-13-45"),
     r"line \d+, column 10", "timestamp '2024-13-45' cannot be read"),  # fmt: skip
    ("binary-int-without-digits", _sample_with("  tp: 2", "  tp: 0b_"), r"line \d+, column 7",
     "int '0b_' cannot be read"),  # fmt: skip
    ("duplicate-key", _text(GOOD + "parallel: {tp: 1}\n"), "line 3, column 1",
     "'parallel' given twice in one mapping \\(first at line 2\\)"),  # fmt: skip
    ("broken-yaml", _text("model: {preset: gpt2-small\n  parallel: [\n"), r"line 2, column \d+",
     "not valid YAML: while parsing a flow mapping"),  # fmt: skip
    ("python-tag", _text("model: !!python/object/apply:os.system [true]\n"), r"line 1, column 8",
     "not valid YAML: could not determine a constructor"),  # fmt: skip
]  # fmt: skip


#: Cases also run through ``tokenwire link`` (one of each kind: a limit of the loader, bytes
#: that do not decode, a scalar that does not construct, a value past its maximum, a wrong
#: type, the model's 64-bit check, a duplicate key); every case runs through ``predict``.
LINKED = {"billion-laughs", "deep-lists", "latin-1", "5000-digit-int", "tp-10**30",
          "preset-list", "past-64-bit-bytes", "duplicate-key"}  # fmt: skip


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """The sample traces ingested: a real dataset, so that only the job.yaml is bad."""
    out = tmp_path_factory.mktemp("hostile") / "sample.tw"
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "ingest", "sample_traces", "-o", str(out)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return out


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline", *args],
        cwd=REPO_ROOT, capture_output=True, text=True, errors="replace", timeout=300,
        preexec_fn=_limits,
    )  # fmt: skip


def _check(done: subprocess.CompletedProcess, path: Path, place: str, what: str) -> None:
    lines = done.stderr.splitlines()
    assert done.returncode == 1, done.stderr[-2000:]
    assert len(lines) == 1, done.stderr[-2000:]
    line = lines[0]
    assert len(line) <= MAX_LINE, len(line)
    prefix = f"Error: {path}: "
    assert line.startswith(prefix), line
    rest = line[len(prefix) :]
    assert re.match(rf"{place}: ", rest), line
    assert re.search(what, rest), line


@pytest.mark.parametrize(("name", "build", "place", "what"), CASES, ids=[c[0] for c in CASES])
def test_hostile_job_yaml_is_one_located_line(tmp_path, dataset, name, build, place, what):
    path = tmp_path / "job.yaml"
    path.write_bytes(build())
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    _check(_run("predict", "--config", str(path)), path, place, what)
    if name in LINKED:
        _check(_run("link", str(dataset), "--config", str(path)), path, place, what)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("name", ["billion-laughs", "deep-lists", "latin-1", "preset-list"])
def test_report_and_tokens_say_the_same(tmp_path, name):
    _, build, place, what = next(c for c in CASES if c[0] == name)
    path = tmp_path / "job.yaml"
    path.write_bytes(build())
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    out = tmp_path / "report.html"
    # (the job.yaml is read before the dataset: a missing one is not reached)
    _check(_run("report", str(tmp_path / "none.tw"), "--config", str(path), "-o", str(out)),
           path, place, what)  # fmt: skip
    text = tmp_path / "words.txt"
    text.write_text("a few words")
    _check(_run("tokens", str(text), "--config", str(path)), path, place, what)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert not out.exists()


def test_value_in_a_message_is_cut(tmp_path):
    """The 1 MB preset name shows as at most MAX_VALUE_CHARS characters."""
    path = tmp_path / "job.yaml"
    path.write_text("model: {preset: '" + "y" * 1_000_000 + "'}\n")
    done = _run("predict", "--config", str(path))
    shown = re.search(r"unknown preset ('y+\.\.\.y+')", done.stderr)
    assert shown and len(shown.group(1)) <= MAX_VALUE_CHARS, done.stderr[:500]
