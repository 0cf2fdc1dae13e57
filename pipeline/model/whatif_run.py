"""``tokenwire predict --from``: a traced run's observed layout beside other layouts.

:func:`what_if` reads the observation from a linked dataset (:mod:`pipeline.model.whatif`),
times the observed job with the run's fits, picks the layouts to project (the flags' or
``--target``'s, else every layout of the observed world), ranks them by projected step,
and works out the measured step's MFU and what a person would warn about each layout.
:class:`WhatIf` gives the result as text or JSON.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model import memory, timing, whatif
from ..model.config import Job, build_job


@dataclass
class WhatIf:
    """The projections of ``predict --from`` and what goes with them."""

    obs: Any
    base: Job
    rows: list
    notes: list
    warnings: list[dict]
    accelerator: Any
    #: The measured step's MFU, the peak it used (FLOP/s a GPU) and where the peak came
    #: from; all None without a peak.
    mfu: float | None
    peak: float | None
    peak_source: str | None

    def notes_text(self) -> list[str]:
        """One line per layout adjusted or dropped."""
        return [f"{n.layout}: {n.action}: {n.reason}" for n in self.notes]

    def to_text(self) -> str:
        """The projections, the observed job's timing and the measured MFU, as text."""
        lines = [whatif.format_projections(self.obs, self.rows), timing.format_summary(self.base)]
        if self.mfu is not None:
            lines.append(
                f"MFU of the measured step: {self.mfu:.1%} of {self.peak / 1e12:g} TFLOP/s a "
                f"GPU ({self.peak_source})"
            )
        return "\n".join(lines)

    def to_json(self) -> str:
        """The same as a JSON document."""
        doc = whatif.as_dict(self.obs, self.rows)
        doc |= {"mfu": self.mfu, "timing": timing.summary(self.base)}
        doc |= {"peak_flops": self.peak,
                "accelerator": memory.accelerator_summary(self.accelerator),
                "layouts": [vars(n) for n in self.notes], "warnings": self.warnings}  # fmt: skip
        return json.dumps(doc, indent=2)


def what_if(
    config: Path,
    dataset: Path,
    job_name: str | None,
    target: str | None,
    overrides: dict[str, Any],
    nccl_tests: Path | None,
    peak: float | None,
) -> WhatIf:
    """The observed run of ``job_name`` in ``dataset`` (described by ``config``) and the
    layouts ``overrides`` or ``target`` give (else every layout of its world), ranked by
    projected step; ``peak``: FLOP/s a GPU for the MFU (else job.yaml's ``hardware``, else
    the GPU the traces name)."""
    obs, base, acc = observed_run(config, dataset, job_name, nccl_tests)
    targets, notes = what_if_targets(config, base, target, overrides)
    rows = whatif.project(base, obs, targets)
    measured, peak, source = measured_mfu(base, obs, acc, peak)
    warnings = [w for t in [base, *targets] for w in memory.layout_warnings(t, acc)]
    return WhatIf(obs, base, rows, notes, warnings, acc, measured, peak, source)


def observed_run(config: Path, dataset: Path, job_name: str | None, nccl_tests: Path | None):  # noqa: ANN201
    """The observation, the observed job (timed with the run's fits) and its accelerator:
    job.yaml's ``hardware``, else the GPU the dataset's ``ranks`` name."""
    import duckdb

    from ..dataset.location import overflow_error
    from ..dataset.views import connect

    con = connect(dataset, read_only=True)
    try:
        obs = whatif.observed_in(con, job_name, str(dataset))
        acc = memory.job_accelerator(build_job(config, {}))
        acc = acc or memory.traced_accelerator(con, obs.job)
    except duckdb.Error as exc:  # (values near int64's limits adding up past it)
        overflow_error(Path(dataset), "whatif.sql", exc)
        raise
    finally:
        con.close()
    base = whatif.with_observed_fits(timing.with_fits(build_job(config, {}), nccl_tests), obs)
    return obs, base, acc


def what_if_targets(
    config: Path, base: Job, target: str | None, overrides: dict[str, Any]
) -> tuple[list[Job], list]:
    """The layouts to project and the notes on those adjusted or dropped: the flags' or
    ``--target``'s layout, else every layout of the observed world."""
    given = {k: v for k, v in overrides.items() if v is not None}
    if given or target is not None:
        one = whatif.target(config, given, target)
        note = whatif.batch_note(base, one)
        notes = [] if note is None else [whatif.LayoutNote(memory.describe(one), "differs", note)]
        targets = [one]
    else:
        targets, notes = whatif.layouts_explained(config, base.parallel.world_size, {})
        targets = [t for t in targets if t.parallel != base.parallel]
    return [dataclasses.replace(t, network=base.network) for t in targets], notes


def measured_mfu(
    base: Job, obs: Any, acc: Any, peak: float | None
) -> tuple[float | None, float | None, str | None]:
    """The measured step's MFU, the peak it used and where the peak came from (None, None,
    None without a peak)."""
    from ..model.compute import mfu

    source = "--peak-tflops"
    if peak is None:
        peak, source = base.peak_flops, "job.yaml hardware"
    if peak is None and acc is not None:
        peak = acc.peak_flops(base.dtypes.activations)
        source = f"{acc.name}, {acc.source}"
    if peak is None:
        return None, None, None
    return mfu(base, obs.step_s, peak), peak, source
