"""The predict and tokens commands, driven through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from pipeline.cli import cli

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "job.yaml"


def _run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_predict_json_for_the_sample_job():
    res = _run("predict", "--config", SAMPLE, "--rank", 4, "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["rank"] == 4 and doc["layout"]["coordinates"]["pp"] == 1
    assert doc["model"]["params"] == 7_386_624
    assert doc["layout"]["world_size"] == 8 and doc["tokens_per_step"] == 2048
    assert {r["parallel_dim"] for r in doc["rows"]} == {"tp", "pp", "dp"}
    assert "requirements" not in doc


def test_predict_table_with_requirements():
    res = _run("predict", "--config", SAMPLE, "--step-time", "0.5", "--comm-budget", "0.1")
    assert res.exit_code == 0, res.stderr
    assert "all_reduce" in res.stdout and "network requirements: step 0.5 s" in res.stdout
    res = _run("predict", "--config", SAMPLE, "--step-time", "0.5", "--format", "json")
    links = json.loads(res.stdout)["requirements"]["links"]
    assert {x["parallel_dim"] for x in links} == {"tp", "pp", "dp", "all"}


def test_predict_from_flags():
    res = _run("predict", "--model", "llama3-70b", "--tp", 8, "--pp", 4, "--dp", 16,
               "--sequence-parallel", "--global-batch", 1024, "--zero-stage", 1,
               "--format", "json")  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["layout"]["dp_scheme"] == "zero1" and doc["layout"]["microbatches"] == 64
    ops = {(r["parallel_dim"], r["op"]) for r in doc["rows"]}
    assert ("tp", "all_gather") in ops and ("dp", "reduce_scatter") in ops


def test_predict_flags_override_config():
    res = _run("predict", "--config", SAMPLE, "--tp", 1, "--dp", 4, "--format", "json")
    doc = json.loads(res.stdout)
    assert doc["layout"]["tp"] == 1 and not [r for r in doc["rows"] if r["parallel_dim"] == "tp"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "llama3-70b", "--tp", "3"],
         "Error: model.heads (64) must be divisible by parallel.tp (3)\n"),
        (["--model", "gpt5"], "Error: model.preset: unknown preset 'gpt5'; allowed: "),
        (["--config", str(SAMPLE), "--rank", "8"],
         "Error: rank: 8 is outside the job's ranks 0..7\n"),
        (["--config", str(SAMPLE), "--global-batch", "6"],
         f"Error: {SAMPLE}: batch.global_batch (6) must be divisible by batch.micro_batch x "
         "parallel.dp (2 x 2 = 4)\n"),
        (["--config", str(SAMPLE), "--step-time", "0"], "Error: step time: must be a positive"),
    ],
)  # fmt: skip
def test_predict_errors_are_one_line(args, message):
    res = _run("predict", *args)
    assert res.exit_code == 1
    assert res.stderr.startswith(message) and res.stderr.count("\n") == 1
    assert "Traceback" not in res.stderr


def test_predict_typo_in_yaml(tmp_path):
    doc = yaml.safe_load(SAMPLE.read_text())
    doc["parallel"]["tensor_paralel"] = doc["parallel"].pop("tp")
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(doc))
    res = _run("predict", "--config", job)
    assert res.exit_code == 1
    assert res.stderr.startswith(f"Error: {job}: parallel.tensor_paralel: unknown key")


def test_predict_needs_a_model():
    res = _run("predict")
    assert res.exit_code == 2 and "give --config job.yaml or --model PRESET" in res.stderr


def test_tokens_command(tmp_path):
    pytest.importorskip("tokenizers")
    text = tmp_path / "t.txt"
    text.write_text("la gloria di colui che tutto move\n" * 200, encoding="utf-8")
    res = _run("tokens", text, "--train-vocab", 280, "--config", SAMPLE, "--format", "json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["words"] == 7 * 200 and doc["trained_on_text"] is True
    assert doc["epoch"]["embedding_bytes"] == doc["tokens"] * 256 * 2
    assert set(doc["epoch"]["wire_bytes_by_dim"]) == {"tp", "pp", "dp"}
    res = _run("tokens", text, "--train-vocab", 280)
    assert res.exit_code == 0 and "TRAINED ON THIS TEXT" in res.stdout


def test_commands_have_help():
    for name in ("predict", "tokens"):
        res = _run(name, "--help")
        assert res.exit_code == 0 and "tokenwire " + name in res.stdout
