"""Property: a job.yaml of any structure or text either loads or raises ``ConfigError``, and
the error is one line of bounded length that names the file.

Structures are random nested mappings, lists and scalars of every type YAML reads, their keys
mostly drawn from the real keys of each section (so that they get past the unknown-key check
and reach the checks of values and of the layout), written out as YAML. Texts are random
sequences of YAML's punctuation, anchors, aliases, tags, real keys and numbers, and random
bytes. A job that loads is also predicted for rank 0 (its arithmetic may only fail with
``ConfigError``). Examples are derandomized and few, so the run is the same every time and
takes seconds.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.errors import MAX_MESSAGE_CHARS, ConfigError
from pipeline.model import config as c
from pipeline.model.config import build_job, job_from_dict, load_job
from pipeline.model.predict import predict
from pipeline.model.presets import PRESETS as _PRESETS

PRESETS = tuple(_PRESETS)

#: ``TOKENWIRE_FUZZ_EXAMPLES=5000`` explores further (random, not derandomized) by hand.
EXAMPLES = int(os.environ.get("TOKENWIRE_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=EXAMPLES or 80,
    deadline=None,
    derandomize=not EXAMPLES,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Predict only small layouts: a world of a million ranks lists a million group members.
PREDICT_MAX_WORLD = 64

SECTIONS: dict[str, tuple[str, ...]] = {
    "model": c._MODEL_KEYS, "parallel": c._PARALLEL_KEYS, "batch": c._BATCH_KEYS,
    "dtypes": c._DTYPE_KEYS, "network": c._NETWORK_KEYS,
}  # fmt: skip
#: Values that are right somewhere in a job.yaml, so that random picks are often valid.
WORDS = (*PRESETS, "bf16", "fp32", "fp8", "ring", "nvls", "swiglu", "rmsnorm", "rope", "full",
         "selective", "none", "tp-cp-ep-dp-pp", "tp-cp-pp-dp", "tp-dp-pp")  # fmt: skip

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 2, 4, 8, 16, 64, 128, 1024, 8192]),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([c.MAX_DIM, c.MAX_DIM + 1, c.MAX_RANKS + 1, 10**30, -1, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
    st.dates(),
)


def _weighted(*choices: tuple[int, st.SearchStrategy]) -> st.SearchStrategy:
    """One of the strategies, picked with the given weights (``one_of`` counts a strategy
    given twice once)."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def _section(keys: tuple[str, ...], values: st.SearchStrategy) -> st.SearchStrategy:
    junk_keys = st.one_of(st.text(max_size=8), st.integers(), st.booleans())
    key = _weighted((12, st.sampled_from(keys)), (1, junk_keys))
    return st.dictionaries(key, values, max_size=len(keys))


def _any(leaves: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.one_of(st.sampled_from(WORDS), st.text(max_size=6)), inner, max_size=4
            )
        ),  # fmt: skip
        max_leaves=12,
    )


#: Values right for many keys (small degrees, flags, names): most keys get one, so that a
#: document gets past the first check and on to the layout's.
good = st.one_of(st.sampled_from([1, 1, 2, 2, 4, 8]), st.booleans(), st.sampled_from(WORDS))
values = _weighted((6, good), (1, scalars), (1, _any(scalars)))
moe = _section(c._MOE_KEYS, values)
mla = _section(c._MLA_KEYS, values)


@st.composite
def _preset_dims(draw: st.DrawFn) -> dict[str, Any]:
    """A preset's dims written out, a few of them replaced."""
    dims = dict(_PRESETS[draw(st.sampled_from(PRESETS))])
    for key in draw(st.lists(st.sampled_from(c._MODEL_KEYS), max_size=3)):
        dims[key] = draw(st.one_of(values, moe, mla))
    return dims


model = _weighted(
    (2, st.sampled_from(PRESETS)),
    (2, st.fixed_dictionaries({"preset": st.sampled_from(PRESETS)},
                              optional={"moe": moe, "mla": mla, "seq_len": values})),
    (4, _preset_dims()),
    (1, _section(c._MODEL_KEYS, st.one_of(values, moe, mla))),
    (1, values),
)  # fmt: skip
sections = {name: _section(keys, values) for name, keys in SECTIONS.items() if name != "model"}
documents = _weighted(
    (9, st.fixed_dictionaries(
        {"model": model},
        optional={**{k: _weighted((4, s), (1, values)) for k, s in sections.items()},
                  "recompute": values},
    )),
    (1, _any(scalars)),
)  # fmt: skip
#: ``section.key`` overrides as the command line passes them.
overrides = st.dictionaries(
    st.sampled_from([f"{s}.{k}" for s, keys in SECTIONS.items() for k in keys] + ["recompute"]),
    scalars,
    max_size=3,
)

FRAGMENTS = [
    "\n", "\n  ", "  ", ": ", "- ", "? ", "[", "]", "{", "}", ", ", "&a ", "*a", "&b ", "*b",
    "<<: ", "!!int ", "!!str ", "!!binary ", "!!python/tuple ", "'", '"', "#", "---\n", "...\n",
    "|\n  ", ">\n  ", "~", "null", "true", "0x", "0b", "0o", "1_0", ".inf", ".nan", "1e400",
    "2024-13-45", "9" * 40, "\t", "\\", "%YAML 1.1\n", "\x85", "\u2028", "\x00", "é",
    *SECTIONS, *(k for keys in SECTIONS.values() for k in keys), *WORDS,
]  # fmt: skip
texts = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=60).map("".join)


def _check_error(exc: ConfigError, path: Path | None) -> None:
    msg = str(exc)
    assert len(msg.splitlines()) == 1, msg
    assert len(msg) <= 2 * MAX_MESSAGE_CHARS, msg
    if path is not None:
        assert msg.startswith(f"{path}: "), msg


def _use(job: Any) -> None:
    """What the commands do next with a loaded job: predict a rank (small layouts)."""
    if job.parallel.world_size <= PREDICT_MAX_WORLD:
        try:
            predict(job, 0)
        except ConfigError as exc:
            _check_error(exc, Path(job.source) if job.source else None)


def _load_file(path: Path) -> None:
    try:
        job = load_job(path)
    except ConfigError as exc:
        _check_error(exc, path)
    else:
        _use(job)


@pytest.fixture(scope="module")
def job_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz") / "job.yaml"


@FUZZ
@given(doc=documents, extra=overrides)
def test_random_structures_load_or_raise_config_error(doc, extra, job_path):
    try:
        job = job_from_dict(doc)
    except ConfigError as exc:
        _check_error(exc, None)
    else:
        _use(job)
    try:
        text = yaml.safe_dump(doc, allow_unicode=True)
    except yaml.YAMLError:  # (a mapping with keys safe_dump cannot write: nothing to test)
        return
    job_path.write_text(text, encoding="utf-8")
    _load_file(job_path)
    try:
        job = build_job(job_path, extra)
    except ConfigError as exc:
        _check_error(exc, job_path)
    else:
        _use(job)


@FUZZ
@given(text=texts)
def test_random_yaml_text_loads_or_raises_config_error(text, job_path):
    job_path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _load_file(job_path)


@FUZZ
@given(data=st.binary(max_size=200), start=st.sampled_from([b"", b"model: ", b"\xff\xfe"]))
def test_random_bytes_load_or_raise_config_error(data, start, job_path):
    job_path.write_bytes(start + data)
    _load_file(job_path)


def test_dates_and_odd_keys_reach_the_checks():
    """A sanity check of the strategies: values of these types do reach validation."""
    with pytest.raises(ConfigError, match=r"model\.preset: unknown preset datetime\.date"):
        job_from_dict({"model": {"preset": datetime.date(2024, 1, 1)}})
    with pytest.raises(ConfigError, match=r"^parallel\.7: unknown key"):
        job_from_dict({"model": "gpt2-small", "parallel": {7: 1}})
