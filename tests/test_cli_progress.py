"""The ingest progress bar goes to stderr only when stderr is a terminal: a log or a pipe
gets the summary alone."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from pipeline.cli import cli
from tests.conftest import REPO_ROOT

LOG = REPO_ROOT / "sample_traces" / "rank0.nccl.log"


def test_no_progress_line_in_a_pipe(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["ingest", str(LOG), "-o", str(tmp_path / "ds")])
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("files: 1 ingested"), result.stderr


def test_progress_on_a_terminal(tmp_path: Path) -> None:
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pipeline", "ingest", str(LOG), "-o", str(tmp_path / "ds")],
            stdout=subprocess.DEVNULL, stderr=follower, cwd=REPO_ROOT, timeout=120, check=False,
        )  # fmt: skip
        os.close(follower)
        follower = -1
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # (the terminal's other end is closed: all is read)
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    assert done.returncode == 0
    text = seen.decode(errors="replace")
    assert "ingest" in text.split("files: 1 ingested")[0], text
