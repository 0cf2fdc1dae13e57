"""Every real trace is detected as its own format, from content alone."""

from __future__ import annotations


def _expected(rel: str) -> str | None:
    if rel.startswith("nccl_logs/") and rel.endswith(".log"):
        return "nccl_log"
    if rel.startswith("nccl_tests/") and rel.endswith(".txt"):
        return "nccl_tests"
    if "flight_recorder" in rel:
        return "flight_recorder"
    if rel.endswith((".pt.trace.json.gz",)) or rel.startswith("kineto/"):
        return "kineto"
    if rel.startswith("rocprof/") and rel.endswith((".json", ".json.gz")):
        return "rocprof"
    if rel.startswith("nsys_jax/") and rel.endswith(".zip"):
        return "nsys_jax"
    if rel.startswith("nsys/") and rel.endswith((".sqlite", ".json.gz")):
        return "nsys"
    return None
