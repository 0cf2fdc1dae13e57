"""The ledger section: the observed collectives set against the model's items (the ledger
table tokenwire link writes with a job.yaml), matched bytes per dimension first, then every
item that was missing, unpredicted, resized or seen another number of times, by name."""

from __future__ import annotations

from ..report import fmt
from ..report.context import Context
from ..report.page import Note, Section, Table


def section(ctx: Context, limit: int = 40) -> Section:
    """Observed against the model, item by item."""
    sec = Section("ledger", "Observed against the model, item by item")
    dims = ctx.query("ledger_dims")
    if dims.height == 0:
        return sec.add(
            Note(
                "Needs the job's job.yaml (tokenwire report --config job.yaml; tokenwire "
                "link --config job.yaml stores it): the ledger sets every observed "
                "collective of a traced step against the model's items (dimension, op, "
                "phase, purpose, size).",
                "missing",
            )
        )
    sec.add(
        Table(
            ["dimension", "predicted per step", "observed per step", "matched per step",
             "items that differ"],
            [
                [r["parallel_dim"], r["predicted_bytes"], r["bytes"], r["matched_bytes"] or 0,
                 r["differing_rows"]]
                for r in dims.iter_rows(named=True)
            ],
            caption="Bytes per step of each dimension: matched are items seen with their "
            "predicted size and count",
            numeric=[False, True, True, True, True],
            units=[None, "bytes", "bytes", "bytes", None],
        )
    )  # fmt: skip
    estimated = dims.filter(dims["estimated_bytes"] > 0)
    if estimated.height:
        sec.add(
            Note(
                f"Estimated: {fmt.nbytes(estimated['estimated_bytes'].sum())} per step of "
                f"the observed bytes ({', '.join(estimated['parallel_dim'])}) are the "
                "model's sizes for calls the trace records without one (an MoE library's "
                "dispatch and combine kernels): their calls, phases and layers were seen, "
                "their bytes were not.",
                "warn",
            )
        )
    _differences(ctx, sec, limit)
    return sec


def _differences(ctx: Context, sec: Section, limit: int) -> None:
    items = ctx.query("ledger_items", limit=limit)
    if items.height == 0:
        sec.add(Note("Every observed collective is a predicted item, with its size and count."))
        return
    sec.add(
        Table(
            ["status", "dimension", "op", "phase", "predicted item", "observed in",
             "predicted", "observed", "bytes difference", "reason"],
            [
                [r["status"], r["parallel_dim"], r["op"], r["phase"], r["purpose"],
                 r["layer_label"],
                 _calls(r["predicted_calls"], r["predicted_message_bytes"]),
                 _calls(r["calls"], r["message_bytes"])
                 + (" (estimated)" if r["estimated"] and r["calls"] else ""),
                 _signed(r["bytes_difference"]), r["reason"]]
                for r in items.iter_rows(named=True)
            ],
            caption="Items that differ, per step, largest difference first",
            numeric=[False] * 6 + [True, True, True, False],
        )
    )  # fmt: skip


def _calls(calls: float | None, message: int | None) -> str:
    """``n × size``, or – where that side has none."""
    if not calls or message is None:
        return "–"
    return f"{fmt.count(calls)} × {fmt.nbytes(message)}"


def _signed(value: float | None) -> str:
    """A byte difference with its sign."""
    return ("+" if value and value > 0 else "") + fmt.nbytes(value)
