"""Words -> tokens -> bytes: counting with a local tokenizer.json, the trained fallback, epochs."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import ConfigError, TraceFormatError
from pipeline.model.config import load_job
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
    # Per step, summed over the 8 ranks; every group has 2 ranks, so a ring all-reduce sends
    # 2*(1/2)*M = M and a send M (a recv sends nothing). Messages are ACT = b*s*h*e_a = 131,072.
    # TP: 36 all-reduces of ACT on each rank, + 12 loss all-reduces of b*s*4 = 1,024 on the 4
    # last-stage ranks. PP: 4 sends of ACT per rank. DP: the gradient bucket, 2 bytes per
    # element (1,872,640 elements on the first stage, 1,840,384 on the last) + the last
    # stage's 8-byte loss all-reduce.
    act = 2 * 128 * 256 * 2
    per_step = {
        "tp": 8 * 36 * act + 4 * 12 * 2 * 128 * 4,
        "pp": 8 * 4 * act,
        "dp": 4 * 1_872_640 * 2 + 4 * (1_840_384 * 2 + 8),
    }
    assert ep.wire_bytes_by_dim == pytest.approx({d: 2 * b for d, b in per_step.items()})


def test_bad_inputs(tmp_path):
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9\n")
    with pytest.raises(TraceFormatError, match=r"latin1\.txt: byte 3: not UTF-8 text"):
        count_tokens(bad, tokenizer=None)
    junk = tmp_path / "tokenizer.json"
    junk.write_text("{not json")
    with pytest.raises(ConfigError, match="not a tokenizer.json"):
        count_tokens(_text(tmp_path), tokenizer=junk)
