"""tiktoken ranks files and SentencePiece models in ``tokenwire tokens``: counts by hand and
against each library's own count, on tokenizers the tests build themselves."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from click.testing import CliRunner

from pipeline.cli import cli
from pipeline.errors import ConfigError
from pipeline.model.tokens import CL100K_PATTERN, count_tokens, load_tokenizer

tiktoken = pytest.importorskip("tiktoken", reason="tiktoken not installed (the tokens extra)")

TEXT = "the cat sat on the mat\nthe dog sat on the log\n" * 50


def _ranks(tmp_path: Path, merges: list[bytes]) -> Path:
    """A tiktoken ranks file: the 256 single bytes, then ``merges`` in rank order."""
    tokens = [bytes([b]) for b in range(256)] + merges
    path = tmp_path / "tiny.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(tokens)))
    return path


def test_tiktoken_counts_by_hand(tmp_path: Path) -> None:
    # merges "th", "the", " t", " th", " the": the pattern splits "the the cat" into "the",
    # " the" and " cat"; the first two are one token each, " cat" stays 4 single bytes (no
    # merge starts " c"). By hand: 1 + 1 + 4 = 6
    path = _ranks(tmp_path, [b"th", b"the", b" t", b" th", b" the"])
    text = tmp_path / "t.txt"
    text.write_text("the the cat")
    c = count_tokens(text, tokenizer=path)
    assert c.tokens == 1 + 1 + 4 and c.vocab_size == 261
    assert "tiktoken" in c.tokenizer and not c.trained_on_text


def test_tiktoken_matches_the_librarys_own_count(tmp_path: Path) -> None:
    merges = [b"th", b"the", b" t", b" th", b" the", b"at", b" s", b" sat", b"on", b" on"]
    path = _ranks(tmp_path, merges)
    text = tmp_path / "t.txt"
    text.write_text(TEXT)
    ranks = {
        base64.b64decode(a): int(b) for a, b in (ln.split() for ln in path.read_text().splitlines())
    }
    enc = tiktoken.Encoding("ref", pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={})
    assert count_tokens(text, tokenizer=path).tokens == len(enc.encode_ordinary(TEXT))


def test_bad_ranks_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("dGhl 0\nnot-base64! 1\n")
    with pytest.raises(ConfigError, match=r"bad\.tiktoken: line 2: not a tiktoken ranks line"):
        load_tokenizer(bad)


def test_sentencepiece_matches_the_librarys_own_count(tmp_path: Path) -> None:
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece not installed (tokens extra)")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(TEXT)
    prefix = tmp_path / "tiny"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=30, model_type="bpe",
        minloglevel=2,
    )  # fmt: skip
    model = prefix.with_suffix(".model")
    sp = spm.SentencePieceProcessor(model_file=str(model))
    want = sum(len(sp.encode(line)) for line in [TEXT])
    c = count_tokens(corpus, tokenizer=model)
    assert c.tokens == want and c.vocab_size == 30 and "sentencepiece" in c.tokenizer
    out = CliRunner().invoke(cli, ["tokens", str(corpus), "--tokenizer", str(model)])
    assert out.exit_code == 0, out.output
    assert f"{want:,}" in out.output


def test_bad_sentencepiece_model(tmp_path: Path) -> None:
    pytest.importorskip("sentencepiece", reason="sentencepiece not installed (tokens extra)")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match=r"bad\.model: not a SentencePiece model"):
        load_tokenizer(bad)
