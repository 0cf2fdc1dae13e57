"""The pieces of the hostile-input matrix (``test_matrix.py``): one built dataset per session,
a fast runner of the real command line (:mod:`tests.reliability.forkserver`) and the checks
every cell makes.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq

from tests.conftest import REPO_ROOT
from tests.reliability.hostile import digest

SAMPLES = REPO_ROOT / "sample_traces"
#: Seconds a command may run before its cell fails as blocked (a safety net: the CPU limit
#: of :mod:`tests.reliability.hostile` bounds work; this bounds a wait on a FIFO or a lock).
WAIT_S = 120
#: The commands of ``tokenwire --help``; ``export-flows`` is ``export --flows``.
COMMANDS = (
    "ingest",
    "link",
    "tables",
    "sql",
    "report",
    "export",
    "export-flows",
    "diff",
    "predict",
    "tokens",
    "hang",
)
#: The classes of issue 44, numbered as docs/reliability.md numbers them.
CLASSES = {
    1: "location",
    2: "unwritable-output",
    3: "special-file",
    4: "out-of-schema-part",
    5: "huge-claim",
    6: "number-out-of-range",
    7: "native-code",
    8: "signals-and-limits",
    9: "terminal-text",
}


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str


class Runner:
    """Runs ``tokenwire ARGS`` through one fork server for the session."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        env = {**os.environ, "MALLOC_ARENA_MAX": "2", "PYTHONPATH": str(REPO_ROOT)}
        env.pop("TOKENWIRE_DEBUG", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.forkserver"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._pending = b""
        self.count = 0

    def __call__(
        self,
        *args: str | Path,
        cwd: Path | None = None,
        stdout: str | None = None,
        stdin: str = os.devnull,
        file_bytes: int | None = None,
        open_files: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Result:
        self.count += 1
        out = stdout or str(self.scratch / f"out-{self.count}")
        err = str(self.scratch / f"err-{self.count}")
        request = {
            "args": [str(a) for a in args],
            "cwd": str(cwd or REPO_ROOT),
            "stdin": stdin,
            "stdout": out,
            "stderr": err,
            "file_bytes": file_bytes,
            "open_files": open_files,
            "env": env,
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = json.loads(self._line(None))["pid"]
        answer = self._line(WAIT_S)
        if answer is None:  # blocked (on a FIFO, a lock): a failed cell, not a hung session
            os.killpg(pid, signal.SIGKILL)
            self._line(None)
            raise AssertionError(f"tokenwire {request['args']} still ran after {WAIT_S} s")
        code = json.loads(answer)["code"]
        text = "" if stdout else Path(out).read_text(errors="backslashreplace")
        return Result(code, text, Path(err).read_text(errors="backslashreplace"))

    def _line(self, timeout: float | None) -> str | None:
        """The server's next answer line; None when none came within ``timeout`` s."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._pending:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            data = os.read(fd, 65536)
            assert data, "the fork server died"
            self._pending += data
        line, _, self._pending = self._pending.partition(b"\n")
        return line.decode()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)
        self.proc.stdout.close()


def refused(result: Result, *fragments: str, code: int = 1) -> str:
    """Exit ``code``, exactly one ``Error:`` line on stderr holding every fragment, short,
    escaped (no control character), no traceback, no internal error; the line."""
    assert result.code == code, (result.code, result.stderr[-2000:])
    lines = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    assert len(lines) == 1, result.stderr[-2000:]
    line = lines[0]
    assert "Traceback" not in result.stderr and "internal error" not in line, result.stderr
    assert len(line) <= 1000, line
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", line), line
    for fragment in fragments:
        assert fragment in line, (fragment, line)
    return line


def usage_error(result: Result, option: str) -> str:
    """Exit 2, click's one usage error naming ``option``."""
    line = refused(result, code=2)
    assert option in line, (option, line)
    return line


def ok(result: Result, *, code: int = 0) -> Result:
    assert result.code == code, (result.code, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    return result


def table_rows(dataset: Path) -> dict[str, int]:
    """Rows of each table, read with pyarrow from the parts the manifest lists (nothing of
    tokenwire's own reading in between)."""
    doc = json.loads((dataset / "manifest.json").read_text())
    return {
        table: sum(pq.ParquetFile(dataset / rel).metadata.num_rows for rel in dict.fromkeys(rels))
        for table, rels in doc["tables"].items()
    }


class Watch:
    """Digests of folders taken now, to show later that they did not change."""

    def __init__(self, *folders: Path) -> None:
        self.before = {f: digest(f) for f in folders}

    def unchanged(self, *, except_: tuple[str, ...] = ()) -> None:
        for folder, before in self.before.items():
            after = digest(folder)
            for name in except_:
                before = {k: v for k, v in before.items() if not k.startswith(name)}
                after = {k: v for k, v in after.items() if not k.startswith(name)}
            assert after == before, (folder, set(after.items()) ^ set(before.items()))


@dataclass
class World:
    """What the session builds once: trace files of a small job and its linked dataset."""

    root: Path
    src: Path
    dataset: Path
    job_yaml: Path
    text: Path
    rows: dict[str, int]
    run: Runner

    def copy(self, to: Path) -> Path:
        """A copy of the dataset at ``to`` (its parents made)."""
        to.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.dataset, to, symlinks=True)
        return to

    def part(self, dataset: Path, table: str) -> Path:
        """The first part of ``table`` the manifest of ``dataset`` lists."""
        doc = json.loads((dataset / "manifest.json").read_text())
        return dataset / doc["tables"][table][0]


def build_world(root: Path) -> World:
    src = root / "src"
    src.mkdir(parents=True)
    for name in ("rank0.nccl.log", "rank1.nccl.log"):
        shutil.copy(SAMPLES / name, src / name)
    for rank in (0, 1):
        kineto = next(SAMPLES.glob(f"rank{rank}.*.pt.trace.json.gz"))
        shutil.copy(kineto, src / kineto.name)
    from tests.reliability.corpus import flight_recorder_doc

    for rank in (0, 1):
        doc = flight_recorder_doc(rank)
        (src / f"rank{rank}.flight_recorder.json").write_text(json.dumps(doc))
    job_yaml = root / "job.yaml"
    shutil.copy(SAMPLES / "job.yaml", job_yaml)
    text = root / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    scratch = Path(tempfile.mkdtemp(dir=root, prefix="streams-"))
    run = Runner(scratch)
    dataset = root / "base" / "ds"
    ok(run("ingest", src, "-o", dataset, "--job", "j"))
    ok(run("link", dataset, "--config", job_yaml))
    # The report's chart library is built once by V8, which cannot start under the cells'
    # memory limit: built here, without one, into the session's cache.
    from pipeline.report.page import javascript_bundle

    javascript_bundle()
    return World(root, src, dataset, job_yaml, text, table_rows(dataset), run)
