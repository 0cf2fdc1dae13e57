"""Words -> tokens -> bytes: counting with a local tokenizer.json, the trained fallback, epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError, TraceFormatError
from pipeline.model.config import load_job
from pipeline.model.predict import predictions_table
from pipeline.model.tokens import count_tokens, epoch_traffic, tokens_report

tokenizers = pytest.importorskip("tokenizers")

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "job.yaml"
WORDS = ["nel", "mezzo", "del", "cammin", "di", "nostra", "vita", "mi", "ritrovai", "per",
         "una", "selva", "oscura"]  # fmt: skip


def _text(tmp_path: Path, lines: int = 300) -> Path:
    rows = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(7)) for i in range(lines)]
    p = tmp_path / "text.txt"
    p.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return p


def _word_level(tmp_path: Path) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(["[UNK]", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_word_level_tokenizer_counts_one_token_per_word(tmp_path):
    text = _text(tmp_path)
    words = len(text.read_text().split())
    c = count_tokens(text, tokenizer=_word_level(tmp_path))
    assert c.words == words == 300 * 7
    assert c.tokens == words and c.tokens_per_word == 1.0
    assert not c.trained_on_text and c.vocab_size == len(WORDS) + 1


def test_trained_bpe_is_labelled_and_compresses(tmp_path):
    text = _text(tmp_path)
    c = count_tokens(text, train_vocab=300)
    assert c.trained_on_text and "trained on this text" in c.tokenizer
    assert 0 < c.tokens < len(text.read_bytes())  # merges learned: fewer tokens than bytes
    assert c.vocab_size <= 300
    assert tokens_report(c, None)["trained_on_text"] is True


def test_epoch_traffic_of_the_sample_job(tmp_path):
    job = load_job(SAMPLE)
    ep = epoch_traffic(2 * job.tokens_per_step, job)
    assert ep.steps == 2
    assert ep.embedding_bytes == 2 * 2048 * 256 * 2
    table = predictions_table(job, 8).to_pylist()
    for dim in ("tp", "pp", "dp"):
        per_step = sum(r["wire_bytes"] for r in table if r["parallel_dim"] == dim)
        assert ep.wire_bytes_by_dim[dim] == pytest.approx(2 * per_step)


def test_bad_inputs(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9\n")
    with pytest.raises(TraceFormatError, match=r"latin1\.txt: byte 3: not UTF-8 text"):
        count_tokens(bad, tokenizer=None)
    junk = tmp_path / "tokenizer.json"
    junk.write_text("{not json")
    with pytest.raises(ConfigError, match="not a tokenizer.json"):
        count_tokens(_text(tmp_path), tokenizer=junk)
