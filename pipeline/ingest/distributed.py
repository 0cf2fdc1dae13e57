"""Ingest on a Dask cluster (``tokenwire ingest --scheduler ADDR``): a task per big file or
batch of small ones.

Each task runs :func:`pipeline.ingest.run.parse_file`, the same function the local process
pool runs, on each of its files: it parses one file and writes that file's big tables as
Parquet parts straight into the dataset folder, so every worker must see the dataset (and
the input files) at the same absolute path on a shared file system; its small tables come
back with its outcome. The files are hashed on the cluster too (:meth:`Cluster.hashes`):
the process that called ``ingest`` never reads a trace, so it does not cap the cluster at
what one machine reads from the shared file system. It keeps the rest: which files to skip,
the rank checks, the small tables and the ``files`` rows (a part per table and job) and the
manifest (the commit point), so the dataset is the same, row for row, as a local ingest of
the same files.

``dask`` and ``distributed`` are an optional extra (``pip install 'tokenwire[dask]'``) and
are imported only here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError

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
#: Files parsed by one cluster task: up to this many bytes or :data:`PARSE_TASK_FILES`
#: files (a big trace is a task alone). Each task costs the client a few ms whatever its
#: size: with a task per file, a job of many small files kept the client busier than the
#: workers.
PARSE_TASK_BYTES = 64 * 1024 * 1024
PARSE_TASK_FILES = 16


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
            self.client.submit(hash_files, [_absolute(p) for p in batch], pure=False)
            for batch in _batches(zip(sizes, paths, strict=True), HASH_TASK_BYTES, HASH_TASK_FILES)
        ]
        for future in futures:
            yield from future.result()
            future.release()

    def parse(
        self,
        task: Callable[[list[tuple]], list[Any]],
        args: Iterable[tuple[int, tuple]],
        on_result: Callable[[Any], None] | None = None,
    ) -> list[Any]:
        """Run ``task`` on the cluster over every argument tuple of ``args``, given as (file
        size, tuple) and cut into batches (see :data:`PARSE_TASK_BYTES`); ``task`` returns a
        result per tuple of its batch.

        Each batch is submitted as soon as ``args`` has yielded it (the caller learns the
        files' hashes while the first ones are parsed). Paths are made absolute (workers do
        not share our working folder). Returns the results in the order of ``args``;
        ``on_result`` sees each as its batch arrives.
        """
        as_completed = _distributed().as_completed
        # (before the hash tasks still queued: a worker parses what it may as soon as it may)
        futures = [
            self.client.submit(
                task, [tuple(_absolute(v) for v in a) for a in batch], pure=False, priority=1
            )
            for batch in _batches(args, PARSE_TASK_BYTES, PARSE_TASK_FILES)
        ]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[list[Any]] = [[] for _ in futures]
        for future in as_completed(futures):
            outs = future.result()
            results[index[future.key]] = outs
            if on_result is not None:
                for out in outs:
                    on_result(out)
            future.release()
        return [out for outs in results for out in outs]


def _batches(sized: Iterable[tuple[int, Any]], max_bytes: int, max_items: int) -> Iterator[list]:
    """The items of ``sized`` ((size in bytes, item) pairs) in order, in lists of
    ``max_bytes`` or ``max_items`` at most (an item bigger than that is a list alone); each
    list as soon as ``sized`` has yielded its last item."""
    batch: list = []
    size = 0
    for n, item in sized:
        batch.append(item)
        size += n
        if size >= max_bytes or len(batch) >= max_items:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _absolute(value: Any) -> Any:
    return Path(value).absolute() if isinstance(value, Path) else value
