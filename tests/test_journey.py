"""docs/journey.md is what ``python -m pipeline.journey`` writes from the commands' output,
and the canto it walks is whole."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

for module in ("tokenizers", "tiktoken", "sentencepiece"):
    pytest.importorskip(module, reason=f"{module} not installed (the tokens extra)")


def test_the_canto_is_whole() -> None:
    # Inferno I has 136 lines: 45 tercets and a closing line, in both texts
    for lang, first, last in (
        ("it", "Nel mezzo del cammin di nostra vita", "Allor si mosse, e io li tenni dietro."),
        (
            "en",
            "Midway upon the journey of our life",
            "Then he moved on, and I behind him followed.",
        ),
    ):
        text = (REPO / "sample_traces" / "dante" / f"inferno-01.{lang}.txt").read_text("utf-8")
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        stanzas = [s for s in text.strip("\n").split("\n\n")]
        assert len(lines) == 136 and (lines[0], lines[-1]) == (first, last)
        assert [len(s.splitlines()) for s in stanzas] == [3] * 45 + [1]


def test_journey_doc_is_what_the_generator_writes() -> None:
    from pipeline import journey

    page, headline = journey.build()
    assert (REPO / "docs" / "journey.md").read_text("utf-8") == page, (
        "docs/journey.md is stale: run python -m pipeline.journey"
    )
    # the walk's figures: the sample job's 2,048 tokens a step, observed equal to predicted
    assert "$ tokenwire tokens sample_traces/dante/inferno-01.it.txt --tokenizer" in page
    assert "| tp | 18,456.0 | 18,456.0 |" in page
    assert headline.count("\n") == 1 and "docs/journey.md" in headline
