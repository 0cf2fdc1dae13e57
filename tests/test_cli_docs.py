"""Every command has help text and appears in the README."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from tests.conftest import REPO_ROOT


@pytest.mark.parametrize("name", sorted(cli.commands))
def test_command_has_help_and_is_documented(name: str) -> None:
    command = cli.commands[name]
    assert command.help and len(command.help.strip()) > 20
    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0
    assert f"tokenwire {name}" in (REPO_ROOT / "README.md").read_text()


def test_internal_errors_are_one_line(tmp_path, monkeypatch) -> None:
    import pipeline.dataset.catalog as catalog

    def boom(dataset):
        raise ZeroDivisionError("simulated bug")

    monkeypatch.setattr(catalog, "describe", boom)
    monkeypatch.delenv("TOKENWIRE_DEBUG", raising=False)
    result = CliRunner().invoke(cli, ["tables", str(tmp_path)])
    assert result.exit_code == 3
    assert result.stderr == "Error: internal error: ZeroDivisionError: simulated bug\n"


def test_shared_options_mean_one_thing() -> None:
    """``--config`` is an existing job.yaml file and ``--format`` fills ``fmt`` in every
    command; ``--job`` names the job written in ingest and picks a stored job elsewhere
    (pipeline/cli_options.py)."""
    import click

    seen = set()
    for name, command in cli.commands.items():
        for param in command.params:
            if "--config" in param.opts:
                assert isinstance(param.type, click.Path), name
                assert param.type.exists and not param.type.dir_okay, name
                seen.add("config")
            if "--format" in param.opts:
                assert param.name == "fmt" and param.show_default, name
                seen.add("format")
            if "--job" in param.opts:
                named = "Job name for every file" in (param.help or "")
                assert named == (name == "ingest"), name
                seen.add("job")
    assert seen == {"config", "format", "job"}


def test_readme_says_what_make_test_needs_and_the_quick_target_exists() -> None:
    import re

    readme = (REPO_ROOT / "README.md").read_text()
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert re.search(r"^test-quick:", makefile, flags=re.M)
    assert "make test-quick" in readme
    # what make test installs, and where the real-trace tests' files come from
    assert "Chromium" in readme and "apt-get" in readme and "as root" in readme
    assert "../shared/real_traces/" in readme and "$TOKENWIRE_REAL_TRACES" in readme
    quick = re.search(r"^test-quick:.*?\n((?:\t.*\n)+)", makefile, flags=re.M)
    assert quick and "TOKENWIRE_REAL_TRACES= " in quick[1] and "not slow" in quick[1]


def test_empty_real_traces_variable_leaves_the_real_traces_out(monkeypatch) -> None:
    from tests.conftest import real_traces_dir

    monkeypatch.setenv("TOKENWIRE_REAL_TRACES", "")
    assert real_traces_dir() is None
