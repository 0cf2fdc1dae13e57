"""``import tokenwire`` works, also in a project with a ``pipeline`` package of its own: the
package imports itself relatively, so that its folder's name (``pipeline``, kept as an
alias) is never looked up."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SAMPLE = REPO_ROOT / "sample_traces"

SCRIPT = """
import sys, tokenwire
from tokenwire.ingest.run import ingest
from tokenwire.link.runner import link
import pipeline
assert pipeline.OWN == "the project's own", pipeline
assert "pipeline.dataset" not in sys.modules
ingest([tokenwire_sample / "rank0.nccl.log", tokenwire_sample / "rank1.nccl.log"],
       out, job="x", jobs=2)
link(out)
print(tokenwire.open(out).sql("SELECT count(*) AS n FROM collective_instances").item())
"""


def test_a_project_s_own_pipeline_package_does_not_shadow_tokenwire(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "pipeline").mkdir(parents=True)
    (project / "pipeline" / "__init__.py").write_text('OWN = "the project\'s own"\n')
    (project / "pipeline" / "dataset.py").write_text("raise ImportError('not tokenwire')\n")
    prelude = (
        "from pathlib import Path\n"
        f"tokenwire_sample = Path({str(SAMPLE)!r})\nout = Path({str(tmp_path / 'ds')!r})\n"
    )
    # (run from the project: its folder is first on sys.path, as in a notebook there)
    done = subprocess.run(
        [sys.executable, "-c", prelude + SCRIPT], cwd=project, capture_output=True, text=True,
        timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) > 0
    cli = subprocess.run(
        [sys.executable, "-m", "tokenwire", "tables", str(tmp_path / "ds")], cwd=project,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    assert "collectives" in cli.stdout


def test_the_package_never_names_itself() -> None:
    """No absolute import of ``pipeline`` (nor a module named by it as text) in the
    package: ``python scripts/relative_imports.py`` rewrites any."""
    own = re.compile(r"^\s*(?:from|import) pipeline\b|[\"']pipeline\.\w", re.M)
    found = []
    for path in sorted((REPO_ROOT / "pipeline").rglob("*.py")):
        code = "\n".join(
            line for line in path.read_text(encoding="utf-8").splitlines()
            if not line.lstrip().startswith(("#", ">>>"))
        )  # fmt: skip
        found += [f"{path.relative_to(REPO_ROOT)}: {m[0].strip()}" for m in own.finditer(code)]
    assert not found
