"""Words to wire: count a text's words and tokens, and what training on it would move.

Tokens are counted from a local tokenizer file (nothing is downloaded): a HuggingFace
``tokenizer.json`` (``tokenizers``), a tiktoken ranks file (``tiktoken``: GPT, Llama 3) or a
SentencePiece model (``sentencepiece``: Llama 2). Without one, a byte-level BPE tokenizer is
trained on the text itself and the result is labelled as such: its counts are lower than a
general-purpose tokenizer's on the same text (in-domain vocabulary).
With a job, the token count becomes embedding bytes (``T·h·e_a``) and the bytes each
parallel dimension puts on the wire, over all ranks, to train one epoch over the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TraceFormatError
from ..guards import require_regular
from ..model.config import Job
from ..model.predict import predict

#: Characters per encode call: big enough to be fast, cut at a line end.
_CHUNK_CHARS = 1 << 20


@dataclass(frozen=True)
class TokenCount:
    """Words and tokens of one text file under one tokenizer."""

    path: str
    chars: int
    words: int
    tokens: int
    tokenizer: str
    vocab_size: int
    trained_on_text: bool

    @property
    def tokens_per_word(self) -> float:
        """Fertility: tokens per whitespace-separated word."""
        return self.tokens / self.words if self.words else 0.0

    @property
    def chars_per_token(self) -> float:
        """Characters per token."""
        return self.chars / self.tokens if self.tokens else 0.0


@dataclass(frozen=True)
class EpochTraffic:
    """What one epoch over the text costs a job (all ranks together)."""

    tokens: int
    embedding_bytes: int
    steps: float
    wire_bytes_by_dim: dict[str, float] = field(default_factory=dict)
    bytes_by_dim: dict[str, float] = field(default_factory=dict)


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text; unreadable or non-UTF-8 input is a :class:`TraceFormatError`."""
    path = Path(path)
    require_regular(path)  # (a FIFO would block, /dev/zero never end)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read: {exc.strerror or exc}") from exc
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(path, "not UTF-8 text", offset=exc.start) from exc


def _chunks(text: str) -> Iterator[str]:
    start = 0
    while start < len(text):
        end = min(start + _CHUNK_CHARS, len(text))
        if end < len(text):
            cut = text.rfind("\n", start, end)
            end = cut + 1 if cut > start else end
        yield text[start:end]
        start = end


def _tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "tokens: the HuggingFace 'tokenizers' package is needed; "
            "pip install 'tokenwire[tokens]'"
        ) from exc
    return tokenizers


def train_bpe(text: str, *, vocab_size: int = 8192, min_frequency: int = 2) -> Any:
    """A byte-level BPE ``tokenizers.Tokenizer`` trained on ``text`` itself."""
    tk = _tokenizers()
    bpe = tk.ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        (_short_words(chunk) for chunk in _chunks(text)),
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
    )
    return bpe


#: Longest run of characters without a space the BPE trainer sees as one word. Training
#: rescans each word for every merge, so one word of n characters (a file of one repeated
#: letter) costs about n x vocabulary steps: 200,000 letters took 14 s. Words longer than
#: this (URLs, base64, a repeated letter) are cut into pieces of this length for training;
#: counting tokens still reads the text as it is.
MAX_TRAIN_WORD_CHARS = 256
_LONG_WORD = re.compile(rf"\S{{{MAX_TRAIN_WORD_CHARS + 1},}}")


def _short_words(text: str) -> str:
    """``text`` with each word longer than :data:`MAX_TRAIN_WORD_CHARS` cut by spaces."""
    return _LONG_WORD.sub(
        lambda m: " ".join(
            m.group()[i : i + MAX_TRAIN_WORD_CHARS]
            for i in range(0, len(m.group()), MAX_TRAIN_WORD_CHARS)
        ),
        text,
    )


#: The pre-tokenizer pattern of Llama 3's tiktoken tokenizer (Meta ``llama3/tokenizer.py``
#: ``pat_str``), the one cl100k_base (GPT-4) splits with (tiktoken
#: ``tiktoken_ext/openai_public.py`` spells it with possessive quantifiers).
CL100K_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


@dataclass(frozen=True)
class Tokenizer:
    """A loaded tokenizer of any of the three kinds, as :func:`count_tokens` uses it:
    ``count(texts)`` is the number of tokens of the texts (no special tokens added)."""

    kind: str
    vocab_size: int
    count: Callable[[list[str]], int]


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A local tokenizer file: HuggingFace ``tokenizer.json``, a tiktoken ranks file
    (``.tiktoken``: one base64 token and its rank per line, split with the cl100k / Llama 3
    pattern) or a SentencePiece model (``.model``, Llama 2). Nothing is downloaded.

    Raises
    ------
    ConfigError
        A file the library cannot load, or the library missing.
    """
    require_regular(path)  # (before a library opens it: a FIFO would block it)
    suffix = Path(path).suffix
    if suffix == ".tiktoken":
        return _tiktoken(Path(path))
    if suffix == ".model":
        return _sentencepiece(Path(path))
    tk = _tokenizers()
    try:
        tok = tk.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises plain Exception subclasses
        raise ConfigError(f"{path}: not a tokenizer.json the tokenizers library can load") from exc
    return _hf("tokenizer.json", tok)


def _hf(kind: str, tok: Any) -> Tokenizer:
    def count(texts: list[str]) -> int:
        return sum(len(e.ids) for e in tok.encode_batch(texts, add_special_tokens=False))

    return Tokenizer(kind, tok.get_vocab_size(), count)


def _import(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigError(
            f"tokens: the '{module}' package is needed for this tokenizer; "
            "pip install 'tokenwire[tokens]'"
        ) from exc


def _tiktoken(path: Path) -> Tokenizer:
    import base64
    import binascii

    tiktoken = _import("tiktoken")
    ranks: dict[bytes, int] = {}
    for no, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        try:
            if len(parts) != 2:
                raise ValueError
            ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
        except (ValueError, binascii.Error):
            raise ConfigError(
                f"{path}: line {no}: not a tiktoken ranks line (base64 token, space, rank)"
            ) from None
    try:
        enc = tiktoken.Encoding(
            path.stem, pat_str=CL100K_PATTERN, mergeable_ranks=ranks, special_tokens={}
        )
    except Exception as exc:  # tiktoken's Rust core raises plain exceptions
        raise ConfigError(f"{path}: tiktoken cannot build an encoding from it: {exc}") from exc

    def count(texts: list[str]) -> int:
        return sum(len(ids) for ids in enc.encode_ordinary_batch(texts))

    return Tokenizer("tiktoken", enc.n_vocab, count)


def _sentencepiece(path: Path) -> Tokenizer:
    spm = _import("sentencepiece")
    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as exc:
        raise ConfigError(f"{path}: not a SentencePiece model: {exc}") from exc

    def count(texts: list[str]) -> int:
        return sum(len(ids) for ids in sp.encode(texts))

    return Tokenizer("sentencepiece", sp.get_piece_size(), count)


def count_tokens(
    path: str | Path, *, tokenizer: str | Path | None = None, train_vocab: int = 8192
) -> TokenCount:
    """Count the words and tokens of a UTF-8 text file.

    Parameters
    ----------
    path
        The text.
    tokenizer
        A local ``tokenizer.json``, ``.tiktoken`` ranks file or SentencePiece ``.model``
        (:func:`load_tokenizer`). ``None``: train a byte-level BPE of ``train_vocab`` tokens
        on the text and count with it (``trained_on_text`` is then true).
    train_vocab
        Vocabulary size of the trained tokenizer.
    """
    text = read_text(path)
    if tokenizer is None:
        tok = _hf("trained", train_bpe(text, vocab_size=train_vocab))
        label = f"byte-level BPE trained on this text (vocab {tok.vocab_size})"
        trained = True
    else:
        tok = load_tokenizer(tokenizer)
        label = f"{tokenizer} ({tok.kind})"
        trained = False
    chunks = list(_chunks(text))
    n = sum(tok.count(chunks[i : i + 16]) for i in range(0, len(chunks), 16))
    return TokenCount(
        path=str(path),
        chars=len(text),
        words=len(text.split()),
        tokens=n,
        tokenizer=label,
        vocab_size=tok.vocab_size,
        trained_on_text=trained,
    )


def epoch_traffic(tokens: int, job: Job) -> EpochTraffic:
    """Embedding bytes of ``tokens`` and the bytes per parallel dimension for one epoch.

    ``embedding_bytes = T·h·e_a``; steps = ``T / (B·s)`` (fractional); per dimension,
    the per-step bytes of every rank (:func:`~pipeline.model.predict.predict`) summed over
    ranks, times the steps.
    """
    steps = tokens / job.tokens_per_step
    wire: dict[str, float] = {}
    payload: dict[str, float] = {}
    for rank in range(job.parallel.world_size):
        for row in predict(job, rank).rows:
            wire[row.parallel_dim] = wire.get(row.parallel_dim, 0.0) + row.wire_bytes * steps
            payload[row.parallel_dim] = payload.get(row.parallel_dim, 0.0) + row.bytes * steps
    return EpochTraffic(
        tokens=tokens,
        embedding_bytes=tokens * job.model.hidden * job.dtypes.e_a,
        steps=steps,
        wire_bytes_by_dim=wire,
        bytes_by_dim=payload,
    )


def tokens_report(count: TokenCount, epoch: EpochTraffic | None) -> dict[str, Any]:
    """The JSON-able result of ``tokenwire tokens``."""
    out: dict[str, Any] = {
        "path": count.path,
        "tokenizer": count.tokenizer,
        "trained_on_text": count.trained_on_text,
        "vocab_size": count.vocab_size,
        "chars": count.chars,
        "words": count.words,
        "tokens": count.tokens,
        "tokens_per_word": count.tokens_per_word,
        "chars_per_token": count.chars_per_token,
    }
    if epoch is not None:
        out["epoch"] = {
            "embedding_bytes": epoch.embedding_bytes,
            "steps": epoch.steps,
            "bytes_by_dim": epoch.bytes_by_dim,
            "wire_bytes_by_dim": epoch.wire_bytes_by_dim,
            "wire_bytes": sum(epoch.wire_bytes_by_dim.values()),
        }
    return out


def format_tokens(report: dict[str, Any]) -> str:
    """Plain-text form of :func:`tokens_report`."""
    lines = [
        f"{report['path']}: {report['words']:,} words, {report['tokens']:,} tokens "
        f"({report['tokens_per_word']:.3f} tokens/word, {report['chars_per_token']:.3f} "
        "chars/token)",
        f"tokenizer: {report['tokenizer']}"
        + ("  [TRAINED ON THIS TEXT: not a published tokenizer]" if report["trained_on_text"]
           else ""),
    ]  # fmt: skip
    ep = report.get("epoch")
    if ep:
        lines.append(
            f"one epoch: {ep['steps']:.4g} steps, embedding activations "
            f"{ep['embedding_bytes']:,} bytes, {ep['wire_bytes']:,.0f} bytes on the wire "
            "(all ranks)"
        )
        for dim, w in ep["wire_bytes_by_dim"].items():
            lines.append(f"  {dim}: {w:,.0f} wire bytes ({ep['bytes_by_dim'][dim]:,.0f} payload)")
    return "\n".join(lines)
