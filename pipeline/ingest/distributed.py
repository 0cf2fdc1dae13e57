"""Ingest on a Dask cluster (``tokenwire ingest --scheduler ADDR``): one task per file.

Each task is :func:`pipeline.ingest.run.parse_file`, the same function the local process pool
runs: it parses one file and writes that file's big tables as Parquet parts straight into
the dataset folder, so every worker must see the dataset (and the input files) at the same
absolute path on a shared file system; its small tables come back with its outcome. The
files are hashed on the cluster too (:meth:`Cluster.hashes`): the process that called
``ingest`` never reads a trace, so it does not cap the cluster at what one machine reads
from the shared file system. It keeps the rest: which files to skip, the rank checks, the
small tables and the ``files`` rows (a part per table and job) and the manifest (the commit
point), so the dataset is the same, row for row, as a local ingest of the same files.

``dask`` and ``distributed`` are an optional extra (``pip install 'tokenwire[dask]'``) and
are imported only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
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


#: Files hashed by one cluster task: up to this many bytes, or :data:`HASH_TASK_FILES` files.
#: (A task per small file would double the scheduler's work; one big task would hold back
#: the first parse tasks.)
HASH_TASK_BYTES = 256 * 1024 * 1024
HASH_TASK_FILES = 64


class Cluster:
    """The client of one ingest on the Dask scheduler at ``scheduler`` (a context manager:
    leaving it closes the client)."""

    def __init__(self, scheduler: str) -> None:
        self.client = _client(scheduler)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def hashes(
        self, hash_files: Callable[[list[Path]], list[Any]], paths: list[Path], sizes: list[int]
    ) -> Iterator[Any]:
        """``hash_files`` of ``paths`` run on the workers, a batch of files per task (see
        :data:`HASH_TASK_BYTES`); the results one per path, in the order of ``paths``."""
        futures = [
            self.client.submit(hash_files, [p.absolute() for p in batch], pure=False)
            for batch in _batches(paths, sizes)
        ]
        for future in futures:
            yield from future.result()
            future.release()

    def parse(
        self,
        task: Callable[..., Any],
        args: Iterable[tuple[Any, ...]],
        on_result: Callable[[Any], None] | None = None,
    ) -> list[Any]:
        """Run ``task(*a)`` for every ``a`` in ``args`` on the cluster.

        Each task is submitted as soon as ``args`` yields it (the caller learns the files'
        hashes while the first ones are parsed). Paths are made absolute (workers do not
        share our working folder). Returns the results in the order of ``args``;
        ``on_result`` sees each as it arrives.
        """
        as_completed = _distributed().as_completed
        # (before the hash tasks still queued: a worker parses what it may as soon as it may)
        futures = [
            self.client.submit(task, *(_absolute(v) for v in a), pure=False, priority=1)
            for a in args
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[Any] = [None] * len(futures)
        for future in as_completed(futures):
            out = future.result()
            results[index[future.key]] = out
            if on_result is not None:
                on_result(out)
            future.release()
        return results


def _batches(paths: list[Path], sizes: list[int]) -> Iterator[list[Path]]:
    """``paths`` in order, cut into lists of :data:`HASH_TASK_BYTES` or
    :data:`HASH_TASK_FILES` at most (a file bigger than that is a list alone)."""
    batch: list[Path] = []
    size = 0
    for path, n in zip(paths, sizes, strict=True):
        batch.append(path)
        size += n
        if size >= HASH_TASK_BYTES or len(batch) >= HASH_TASK_FILES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _absolute(value: Any) -> Any:
    return Path(value).absolute() if isinstance(value, Path) else value
