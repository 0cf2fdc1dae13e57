"""Ingest on a Dask cluster (``tokenwire ingest --scheduler ADDR``): one task per file.

Each task is :func:`pipeline.ingest.run.parse_file`, the same function the local process pool
runs: it parses one file and writes that file's big tables as Parquet parts straight into
the dataset folder, so every worker must see the dataset (and the input files) at the same
absolute path on a shared file system; its small tables come back with its outcome. The
process that called ``ingest`` keeps the rest: hashing, the rank checks, the small tables
and the ``files`` rows (a part per table and job) and the manifest (the commit point), so
the dataset is the same, row for row, as a local ingest of the same files.

``dask`` and ``distributed`` are an optional extra (``pip install 'tokenwire[dask]'``) and
are imported only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pipeline.errors import ConfigError

EXTRA_HINT = "pip install 'tokenwire[dask]'"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        raise ConfigError(
            f"--scheduler needs Dask distributed, which is not installed: {EXTRA_HINT}"
        ) from exc
    return distributed


def _client(scheduler: str) -> Any:
    try:
        return _distributed().Client(scheduler, timeout="30s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise ConfigError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from exc


def parse_on_cluster(
    task: Callable[..., Any],
    args: Iterable[tuple[Any, ...]],
    scheduler: str,
    on_result: Callable[[Any], None] | None = None,
) -> list[Any]:
    """Run ``task(*a)`` for every ``a`` in ``args`` on the cluster at ``scheduler``.

    Each task is submitted as soon as ``args`` yields it (the caller hashes files while the
    first ones are parsed). Paths are made absolute (workers do not share our working
    folder). Returns the results in the order of ``args``; ``on_result`` sees each as it
    arrives.
    """
    as_completed = _distributed().as_completed
    client = _client(scheduler)
    try:
        futures = [client.submit(task, *(_absolute(v) for v in a), pure=False) for a in args]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        for future in as_completed(futures):
            out = future.result()
            results[index[future.key]] = out
            if on_result is not None:
                on_result(out)
            future.release()
        return results
    finally:
        client.close()


def _absolute(value: Any) -> Any:
    return Path(value).absolute() if isinstance(value, Path) else value
