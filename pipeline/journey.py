"""The walk of "The Life of a Token: from Words to Bits on the Wire" (arXiv 2609.19924) on
the sample job: ``docs/journey.md``, generated from tokenwire's own commands.

Canto I of Dante's Inferno (``sample_traces/dante/``, the Italian and Longfellow's English)
goes from words to tokens under three tokenizer families, trained here on the canto itself
(no tokenizer file can be downloaded): a GPT-2-style byte-level BPE (``tokenizers``'
``ByteLevelBPETokenizer``), a Llama-3-style BPE (byte-level merges in a tiktoken ranks file,
split by Llama 3's pattern) and a Llama-2-style SentencePiece BPE with byte fallback. Then
to embedding bytes and to the bytes each parallel dimension of the sample job puts on the
wire per token: observed in the dataset ``make demo`` builds from ``sample_traces`` and
predicted by the analytic model. ``python -m pipeline.journey`` writes the page and prints
its headline; ``--headline`` prints only the headline; ``--stdout`` the page.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "journey.md"
TEXTS = (("Italian", "sample_traces/dante/inferno-01.it.txt"),
         ("English (Longfellow)", "sample_traces/dante/inferno-01.en.txt"))  # fmt: skip
JOB = "sample_traces/job.yaml"
#: Vocabulary of each trained tokenizer: room for the canto's merges, far below a published
#: tokenizer's (GPT-2 50,257, Llama 3 128,256, Llama 2 32,000).
VOCAB = 1024
#: The families: name, file the trainer writes, how it is made.
FAMILIES = (
    ("GPT-2-style byte-level BPE", "tokenizers/gpt2-bpe.json",
     "`tokenizers.ByteLevelBPETokenizer` (GPT-2's byte-to-unicode alphabet and split pattern), "
     "as `tokenwire tokens --train-vocab` trains it (`pipeline.model.tokens.train_bpe`), "
     "saved as a HuggingFace tokenizer.json"),
    ("Llama-3-style BPE", "tokenizers/llama3-bpe.tiktoken",
     "byte-level BPE merges learnt by `tokenizers` on pieces split by Llama 3's pattern "
     "(`pipeline.model.tokens.CL100K_PATTERN`), written as a tiktoken ranks file (256 single "
     "bytes, then the merges in the order learnt)"),
    ("SentencePiece BPE", "tokenizers/spm-bpe.model",
     "`sentencepiece.SentencePieceTrainer`, `model_type=bpe`, `byte_fallback=True`, "
     "`character_coverage=1.0` (Llama 2's recipe), one thread"),
)  # fmt: skip
SQL_OBSERVED = (
    "SELECT w.parallel_dim, sum(w.bytes)::BIGINT AS wire_bytes, any_value(t.tokens) AS tokens, "
    "round(sum(w.bytes) / any_value(t.tokens), 1) AS wire_bytes_per_token FROM wire w "
    "JOIN (SELECT DISTINCT step, tokens FROM token_wire) t USING (step) "
    "WHERE w.step = (SELECT min(step) FROM token_wire) GROUP BY ALL ORDER BY ALL"
)
SQL_PAYLOAD = (
    "SELECT parallel_dim, sum(bytes)::BIGINT AS observed_bytes, "
    "sum(predicted_bytes)::BIGINT AS predicted_bytes, any_value(tokens) AS tokens "
    "FROM token_wire WHERE step = (SELECT min(step) FROM token_wire) GROUP BY ALL ORDER BY ALL"
)


@dataclass
class Walk:
    """The commands run, their outputs, and the figures the page tabulates."""

    shown: list[tuple[str, str]]
    counts: dict[tuple[str, str], dict[str, Any]]
    observed: dict[str, dict[str, Any]]
    payload: dict[str, dict[str, Any]]
    predicted_wire: dict[str, float]


def _corpus() -> str:
    return "".join((REPO / path).read_text(encoding="utf-8") for _, path in TEXTS)


def train_gpt2(text: str, out: Path) -> None:
    """GPT-2-style: the byte-level BPE ``tokens --train-vocab`` trains, as a tokenizer.json."""
    from .model.tokens import train_bpe

    train_bpe(text, vocab_size=VOCAB).save(str(out))


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character -> byte (``tokenizers``' ByteLevel order)."""
    from tokenizers import pre_tokenizers

    chars = pre_tokenizers.ByteLevel.alphabet()
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    assert set(table.values()) == set(chars)
    return {c: b for b, c in table.items()}


def train_llama3(text: str, out: Path) -> None:
    """Llama-3-style: byte-level BPE over Llama 3's split pattern, as a tiktoken ranks file."""
    import base64

    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    from .model.tokens import CL100K_PATTERN

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(CL100K_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])  # fmt: skip
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator([text], trainer)
    decode = _byte_decoder()
    ranks = [bytes([b]) for b in range(256)]
    seen = set(ranks)
    for merge in json.loads(tok.to_str())["model"]["merges"]:
        a, b = merge.split(" ") if isinstance(merge, str) else merge
        token = bytes(decode[c] for c in a + b)
        if token not in seen:
            seen.add(token)
            ranks.append(token)
    out.write_text("".join(f"{base64.b64encode(t).decode()} {i}\n" for i, t in enumerate(ranks)))


def train_sentencepiece(text: str, out: Path) -> None:
    """Llama-2-style: a SentencePiece BPE with byte fallback."""
    import sentencepiece as spm

    model = spm.SentencePieceTrainer.train(
        sentence_iterator=iter(line for line in text.splitlines() if line.strip()),
        model_prefix=str(out.with_suffix("")), vocab_size=VOCAB, model_type="bpe",
        byte_fallback=True, character_coverage=1.0, num_threads=1, hard_vocab_limit=False,
        minloglevel=2,
    )  # fmt: skip
    del model


def _run(
    shown: list[tuple[str, str]], args: list[str], *, show: bool = True, display: str = ""
) -> str:
    """Run ``tokenwire ARGS`` in this process; record the command (as ``display`` spells
    it, a shell glob for a list of files) and its stdout."""
    from click.testing import CliRunner

    from .cli import cli

    result = CliRunner().invoke(cli, args)
    if result.exit_code != 0:
        raise RuntimeError(f"tokenwire {shlex.join(args)}: {result.output}")
    if show:
        command = display or shlex.join(["tokenwire", *args])
        shown.append((command, result.stdout.rstrip("\n")))
    return result.stdout


def walk(work: Path) -> Walk:
    """Train the tokenizers, build the sample dataset and run the walk's commands in
    ``work`` (paths in the commands are relative to it)."""
    (work / "sample_traces").symlink_to(REPO / "sample_traces", target_is_directory=True)
    (work / "tokenizers").mkdir()
    text = _corpus()
    for (_, path, _), train in zip(
        FAMILIES, (train_gpt2, train_llama3, train_sentencepiece), strict=True
    ):
        train(text, work / path)
    shown: list[tuple[str, str]] = []
    counts: dict[tuple[str, str], dict[str, Any]] = {}
    with contextlib.chdir(work):
        traces = sorted(str(p) for p in Path("sample_traces").glob("rank*"))
        _run(shown, ["ingest", *traces, "sample_traces/job.nsys.sqlite", "-o", "dataset",
                     "--job", "sample"],
             display="tokenwire ingest sample_traces/rank* sample_traces/job.nsys.sqlite "
                     "-o dataset --job sample")  # fmt: skip
        _run(shown, ["link", "dataset", "--config", JOB])
        for family, tok, _ in FAMILIES:
            for lang, path in TEXTS:
                args = ["tokens", path, "--tokenizer", tok, "--config", JOB]
                _run(shown, args)
                counts[family, lang] = json.loads(
                    _run(shown, [*args, "--format", "json"], show=False)
                )
        for sql in (SQL_OBSERVED, SQL_PAYLOAD):
            _run(shown, ["sql", "dataset", sql])
        observed = _rows(
            _run(shown, ["sql", "dataset", SQL_OBSERVED, "--format", "json"], show=False)
        )
        payload = _rows(
            _run(shown, ["sql", "dataset", SQL_PAYLOAD, "--format", "json"], show=False)
        )
    epoch = next(iter(counts.values()))["epoch"]
    tokens = next(iter(counts.values()))["tokens"]
    wire = {d: w / tokens for d, w in epoch["wire_bytes_by_dim"].items()}
    return Walk(shown, counts, observed, payload, wire)


def _rows(out: str) -> dict[str, dict[str, Any]]:
    doc = json.loads(out)
    rows = doc if isinstance(doc, list) else doc.get("rows", doc)
    return {r["parallel_dim"]: r for r in rows}


def headline(w: Walk) -> str:
    """One or two lines: the canto's words, tokens and bytes on the wire per token."""
    family = FAMILIES[0][0]
    it = w.counts[family, TEXTS[0][0]]
    en = w.counts[family, TEXTS[1][0]]
    per_token = sum(r["wire_bytes_per_token"] for r in w.observed.values())
    predicted = sum(w.predicted_wire.values())
    return (
        f"Inferno I: {it['words']:,} Italian words -> {it['tokens']:,} tokens, "
        f"{en['words']:,} English words -> {en['tokens']:,} tokens ({family}, vocab {VOCAB});\n"
        f"the sample job puts {per_token:,.0f} bytes a token on the wire, observed "
        f"({predicted:,.0f} predicted): docs/journey.md"
    )


def render(w: Walk) -> str:
    """The page."""
    top = f"> {headline(w).replace(chr(10), ' ')}\n"
    out = [_intro(), top, _tokenizer_section(), _counts_table(w), _wire_table(w),
           _epoch_table(w), "## The commands and their output\n"]  # fmt: skip
    for command, output in w.shown:
        out.append(f"```console\n$ {command}\n{output}\n```\n".replace("\n\n```", "\n```"))
    return "\n".join(out)


def _intro() -> str:
    return (
        "# The life of a token: Inferno I on the sample job\n\n"
        "<!-- generated by `python -m pipeline.journey` from the output of the commands "
        "below; tests/test_journey.py checks this page is what it produces -->\n\n"
        'The walk of "The Life of a Token: from Words to Bits on the Wire" (arXiv '
        "2609.19924), from words to bits on the wire, taken with tokenwire's own commands on "
        "the first canto of Dante's Inferno (`sample_traces/dante/`: the Italian and "
        "Longfellow's 1867 English, both public domain; sources in "
        "`sample_traces/dante/README.md`) and the sample job (`sample_traces/job.yaml`: a "
        "4-layer GPT, hidden 256, vocabulary 8,192, tp=2 pp=2 dp=2, 2,048 tokens a step, "
        "`docs/sample-job.md`).\n"
    )


def _tokenizer_section() -> str:
    lines = [
        "## The tokenizers\n",
        "No tokenizer file can be downloaded here, so each family is trained on the canto "
        f"itself (both texts, {VOCAB} tokens of vocabulary) with the libraries of "
        "tokenwire's `tokens` extra, by `pipeline/journey.py`. Trained on the very text they "
        "count, they split it into fewer tokens than the published tokenizers would (GPT-2 "
        "50,257, Llama 3 128,256, Llama 2 32,000 tokens, trained on other text): the counts "
        "compare the families' methods, not the published vocabularies.\n",
    ]
    for family, path, how in FAMILIES:
        lines.append(f"- **{family}** (`{path}`): {how}.")
    return "\n".join(lines) + "\n"


def _counts_table(w: Walk) -> str:
    lines = [
        "## Words, tokens, embedding bytes\n",
        "Embedding bytes are the activations the input embedding hands the first layer: "
        "tokens × hidden × 2 bytes (bf16), `tokens`' `embedding_bytes`.\n",
        "| tokenizer | text | words | tokens | tokens per word | embedding bytes |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for (family, lang), c in w.counts.items():
        lines.append(
            f"| {family} | {lang} | {c['words']:,} | {c['tokens']:,} | "
            f"{c['tokens_per_word']:.3f} | {c['epoch']['embedding_bytes']:,} |"
        )
    return "\n".join(lines) + "\n"


def _wire_table(w: Walk) -> str:
    lines = [
        "## Bytes on the wire per token\n",
        "Per parallel dimension, over all 8 ranks, for one step of 2,048 tokens: observed in "
        "the dataset built from `sample_traces` (the `wire` table: bytes each collective puts "
        "on each connection; the `token_wire` table: message bytes) and predicted by the "
        "analytic model (`tokens --config`: every rank's `predict` rows). A pipeline "
        "send and its receive each count the message once; the wire carries it once. The "
        "sample traces are generated from the model's own layout, so observed and predicted "
        "agree here by construction; on a real job their ratio is the finding.\n",
        "| dimension | observed wire bytes / token | predicted wire bytes / token | "
        "observed message bytes / token | predicted message bytes / token |",
        "|---|---:|---:|---:|---:|",
    ]
    for dim in sorted(w.observed):
        o, p = w.observed[dim], w.payload[dim]
        lines.append(
            f"| {dim} | {o['wire_bytes_per_token']:,.1f} | {w.predicted_wire.get(dim, 0):,.1f} "
            f"| {p['observed_bytes'] / p['tokens']:,.1f} "
            f"| {p['predicted_bytes'] / p['tokens']:,.1f} |"
        )
    return "\n".join(lines) + "\n"


def _epoch_table(w: Walk) -> str:
    lines = [
        "## One epoch over the canto\n",
        "What training the sample job for one pass over each text would put on the wire "
        "(all ranks; `tokens --config`), by tokenizer: fewer tokens, fewer bytes.\n",
        "| tokenizer | text | steps | wire bytes |",
        "|---|---|---:|---:|",
    ]
    for (family, lang), c in w.counts.items():
        e = c["epoch"]
        lines.append(f"| {family} | {lang} | {e['steps']:.3f} | {e['wire_bytes']:,.0f} |")
    return "\n".join(lines) + "\n"


def build() -> tuple[str, str]:
    """The page and its headline, from a fresh walk in a temporary folder."""
    with tempfile.TemporaryDirectory(prefix="tokenwire-journey-") as tmp:
        w = walk(Path(tmp))
    return render(w), headline(w)


def main(argv: list[str] | None = None) -> int:
    """``python -m pipeline.journey [--headline | --stdout]``."""
    args = sys.argv[1:] if argv is None else argv
    page, head = build()
    if "--stdout" in args:
        sys.stdout.write(page)
        return 0
    if "--headline" not in args:
        DOC.write_text(page, encoding="utf-8")
    print(head)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
