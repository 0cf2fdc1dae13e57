"""Checks of Chrome's trace event format that tokenwire's writer does not share: a JSON
schema of the events it uses (from the format's public description, "Trace Event Format",
Google, the document catapult's and Perfetto's importers follow), and the two rules a viewer
relies on beyond single events: complete events on one track nest, and a flow event lies
inside a slice of its track."""

from __future__ import annotations

from collections import defaultdict

_ID = {"type": "integer"}
_TIME = {"type": "number", "minimum": 0}
_COMMON = {"name": {"type": "string"}, "pid": _ID, "tid": _ID}

SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "traceEvents": {
            "type": "array",
            "items": {
                "oneOf": [
                    {  # complete event
                        "type": "object",
                        "required": ["ph", "name", "cat", "ts", "dur", "pid", "tid"],
                        "properties": {
                            "ph": {"const": "X"},
                            "cat": {"type": "string"},
                            "ts": _TIME,
                            "dur": _TIME,
                            "args": {"type": "object"},
                            **_COMMON,
                        },
                    },
                    {  # flow start / finish
                        "type": "object",
                        "required": ["ph", "name", "cat", "id", "ts", "pid", "tid"],
                        "properties": {
                            "ph": {"enum": ["s", "t", "f"]},
                            "cat": {"type": "string"},
                            "id": _ID,
                            "ts": _TIME,
                            "bp": {"const": "e"},
                            **_COMMON,
                        },
                    },
                    {  # metadata
                        "type": "object",
                        "required": ["ph", "name", "pid", "args"],
                        "properties": {
                            "ph": {"const": "M"},
                            "name": {
                                "enum": [
                                    "process_name",
                                    "process_sort_index",
                                    "thread_name",
                                    "thread_sort_index",
                                ]
                            },
                            "pid": _ID,
                            "tid": _ID,
                            "args": {"type": "object"},
                        },
                    },
                ]
            },
        },
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "otherData": {"type": "object"},
    },
}


def slices_by_track(events: list[dict]) -> dict[tuple[int, int], list[dict]]:
    tracks: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[(e["pid"], e["tid"])].append(e)
    for slices in tracks.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
    return tracks


def improper_nesting(events: list[dict], eps: float = 1e-6) -> list[tuple[dict, dict]]:
    """Pairs of complete events on one track that overlap without one holding the other."""
    bad = []
    for slices in slices_by_track(events).values():
        stack: list[dict] = []
        for e in slices:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + eps:
                stack.pop()
            if stack and e["ts"] + e["dur"] > stack[-1]["ts"] + stack[-1]["dur"] + eps:
                bad.append((stack[-1], e))
            stack.append(e)
    return bad


def enclosing(tracks: dict[tuple[int, int], list[dict]], flow: dict) -> dict | None:
    """The innermost complete event on the flow event's track (``tracks``: of
    :func:`slices_by_track`) that holds its time."""
    held = [
        e for e in tracks[(flow["pid"], flow["tid"])] if e["ts"] <= flow["ts"] <= e["ts"] + e["dur"]
    ]
    return min(held, key=lambda e: e["dur"]) if held else None
