"""The built wheel works on its own, away from the checkout.

A wheel is built from a copy of the sources (pyproject.toml, README.md, pipeline/, schemas/),
installed with ``--no-deps`` into a fresh venv whose dependencies come from the running
interpreter's site-packages through a ``.pth`` file (no network), and the CLI is run from a
temporary folder: ingest, link, sql and report on ``sample_traces``. Anything the code reads
at run time (schemas, .sql files) that the wheel lacks makes a command fail here.

Bounded: marked ``slow``; one module-scoped build and install (about 5 s), and every
subprocess has a timeout. The build uses the installed setuptools (``--no-build-isolation``,
``--no-index``); the dev extra brings one new enough.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces"
TIMEOUT_S = 300  # per subprocess: each takes a few seconds on 2 cores

pytestmark = pytest.mark.slow


def _setuptools_major() -> int:
    try:
        return int(version("setuptools").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return 0


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, **kw)
    assert proc.returncode == 0, (
        f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the sources so the checkout gets no build/ folder."""
    if _setuptools_major() < 77:
        pytest.skip("setuptools>=77 (the build backend, in the dev extra) is not installed")
    src = tmp_path_factory.mktemp("src")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("pipeline", "schemas"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", out, src])
    (whl,) = out.glob("tokenwire-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed and the running interpreter's packages (the
    dependencies) on its path; the checkout is not on it."""
    root = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", root])
    python = root / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run([*pip, "--python", python, "install", "--no-deps", "--no-index", wheel])
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([python, "-c", purelib]).stdout.strip())
    # Written after the install: pip would otherwise see (and replace) a tokenwire installed
    # in those folders. A path line in a .pth file only extends sys.path: the .pth files in
    # the added folder (an editable tokenwire's import hook among them) are not run.
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (site / "_tokenwire_test_deps.pth").write_text("".join(f"{d}\n" for d in deps))
    return root


def _clean_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "TOKENWIRE_SCHEMAS"):
        env.pop(name, None)
    env["PYTHONNOUSERSITE"] = "1"
    return env


@pytest.mark.parametrize("name", ["tokenwire", "pipeline"])
def test_wheel_holds_every_package_file_and_schema(wheel, name):
    """The package installs as ``tokenwire`` and as ``pipeline``, the folder's name."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
    expected = {
        f"{name}/{p.relative_to(REPO / 'pipeline')}"
        for p in (REPO / "pipeline").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    expected |= {f"{name}/schemas/{p.name}" for p in (REPO / "schemas").glob("*.yaml")}
    assert any(n.startswith(f"{name}/schemas/") for n in expected)
    assert sorted(expected - names) == []
    outside = {n for n in names if not n.startswith(("tokenwire/", "pipeline/", "tokenwire-0"))}
    assert sorted(outside) == []


@pytest.mark.parametrize("name", ["tokenwire", "pipeline"])
def test_installed_package_is_the_wheel_not_the_checkout(venv, tmp_path, name):
    code = (
        f"import {name} as package; from {name}.dataset.schema import load_schemas, "
        "schemas_dir; print(package.__file__); print(schemas_dir()); print(len(load_schemas()))"
    )
    out = _run([venv / "bin" / "python", "-c", code], cwd=tmp_path, env=_clean_env())
    package, schemas, count = out.stdout.split("\n")[:3]
    assert Path(package).resolve().is_relative_to(venv.resolve() / "lib")
    assert Path(package).parent.name == name
    assert Path(schemas).resolve().is_relative_to(venv.resolve())
    assert int(count) == len(list((REPO / "schemas").glob("*.yaml")))


def test_cli_from_the_wheel_ingests_links_and_reports(venv, tmp_path):
    tokenwire = str(venv / "bin" / "tokenwire")
    config = str(SAMPLE / "job.yaml")
    kw = {"cwd": tmp_path, "env": _clean_env()}
    _run([tokenwire, "ingest", str(SAMPLE), "-o", "DS", "--job", "sample"], **kw)
    assert (tmp_path / "DS" / "manifest.json").is_file()
    _run([tokenwire, "link", "DS", "--config", config], **kw)
    assert any((tmp_path / "DS" / "token_wire").rglob("*.parquet"))
    out = _run([tokenwire, "sql", "DS", "SELECT count(*) AS n FROM token_wire"], **kw)
    assert "│ 16" in out.stdout  # the sample job: 2 steps x 8 (dimension, op, phase)
    _run([tokenwire, "report", "DS", "--config", config, "-o", "r.html"], **kw)
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert html.startswith("<!DOCTYPE html>")
    assert "vega" in html
    _run([tokenwire, "export", "DS", "-o", "t.json", "--step", "2"], **kw)
    assert '"job":"sample"' in (tmp_path / "t.json").read_text(encoding="utf-8")
    out = _run([tokenwire, "diff", "DS", "sample", "sample", "--view", "traffic"], **kw)
    assert "all_reduce" in out.stdout  # diff's .sql files came with the wheel
