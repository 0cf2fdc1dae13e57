"""What the commands must not import.

- pandas: tokenwire never uses it, but pyarrow imports it (where it is installed) the first
  time it converts Python or NumPy objects, to check whether they are pandas': 0.25 to
  0.35 s of every process that does so, which was a quarter of ``tokenwire link`` on a 1 GB
  job (:mod:`pipeline.dataset.arrow_convert`).
- rfc3987_syntax: jsonschema, which altair imports, imports it where it is installed (it
  comes with JupyterLab) and it builds a grammar on import, 1.0 to 1.4 s of every report;
  ``tokenwire report`` marks it missing (``pipeline/cli.py``).

The commands run in one process with a finder first on ``sys.meta_path`` that records each
attempt to import either, whether or not it is installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SCRIPT = r"""
import json, sys, traceback

class Watch:
    def __init__(self):
        self.attempts = []

    def find_spec(self, name, path=None, target=None):
        if name in ("pandas", "rfc3987_syntax"):
            stack = traceback.format_stack()
            # (Polars looks whether pandas is there, without importing it)
            if not any("polars" in frame and "_dependencies" in frame for frame in stack):
                self.attempts.append(name + " from:\n" + "".join(stack[-8:-1]))
        return None

assert "pandas" not in sys.modules and "rfc3987_syntax" not in sys.modules
watch = Watch()
sys.meta_path.insert(0, watch)
from pipeline.cli import cli

commands = json.loads(sys.argv[1])
found = {}
for args in commands:
    try:
        cli(args, standalone_mode=False)
    except SystemExit as exc:
        assert not exc.code, (args, exc.code)
    found[" ".join(args)] = watch.attempts
    watch.attempts = []
# the watch itself: pyarrow converting a Python list does try
import pyarrow as pa
pa.array([1])
found["pa.array"] = watch.attempts
print(json.dumps(found))
"""


def test_commands_import_neither(tmp_path: Path) -> None:
    samples, dataset = REPO_ROOT / "sample_traces", str(tmp_path / "ds")
    job = str(samples / "job.yaml")
    _assert_no_attempts(
        [
            ["ingest", str(samples), "-o", dataset, "--job", "s", "--jobs", "1"],
            ["link", dataset, "--config", job],
            ["report", dataset, "--config", job, "-o", str(tmp_path / "r.html")],
            ["sql", dataset, "SELECT count(*) FROM token_wire"],
            ["predict", "--config", job, "--rank", "3"],
            ["diff", dataset, "s", "s", "--view", "steps"],
            ["diff", dataset, "s", "s", "--html", str(tmp_path / "d.html")],
        ]
    )


def test_real_traces_of_every_format_import_neither(real_traces: Path, tmp_path: Path) -> None:
    ddp = real_traces / "kineto_cpu_gloo" / "ddp" / "ws2"  # Kineto and flight recorder
    nsys = real_traces / "nsys" / "cpu_nvtx_nccl_like"
    formats = {
        "ddp": ddp,
        "log": real_traces / "nccl_logs" / "nccl-issue-1189.log",
        "tests": real_traces / "nccl_tests" / "nccl-issue-1530.txt",
        "nsys": nsys / "nsys2023.4_cpu_nvtx_nccl_like.sqlite",
    }
    commands = []
    for job, path in formats.items():
        dataset = str(tmp_path / job)
        commands.append(["ingest", str(path), "-o", dataset, "--job", job, "--jobs", "1"])
        if job != "tests":  # (bandwidth tables alone: no ranks to link)
            commands.append(["link", dataset])
        commands.append(["report", dataset, "-o", str(tmp_path / f"{job}.html")])
    _assert_no_attempts([*commands, ["hang", str(ddp)]])


def _assert_no_attempts(commands: list[list[str]]) -> None:
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(commands)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    watched = found.pop("pa.array")
    assert all(not stacks for stacks in found.values()), "\n".join(
        f"{command}:\n{''.join(stacks)}" for command, stacks in found.items() if stacks
    )
    assert watched, "the watch saw no attempt where pyarrow makes one"
