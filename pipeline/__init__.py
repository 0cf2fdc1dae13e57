"""tokenwire: traces of a training job -> Parquet dataset -> linked SQL -> report.

The package follows the flow: ``ingest`` (one package per source format), ``dataset``
(schemas, Parquet layout, DuckDB views), ``link`` (SQL that joins sources), ``model``
(analytic traffic predictions), ``report`` and ``export`` (a linked job as a trace-viewer
timeline). Nothing heavy is imported at module load.

From a notebook::

    import tokenwire
    ds = tokenwire.open("run42.tw")
    ds.sql("SELECT parallel_dim, sum(bytes) AS bytes FROM collective_calls GROUP BY ALL")
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .dataset.handle import Dataset

__version__ = "0.1.0"
__all__ = ["open", "__version__"]


def open(path: Path | str) -> Dataset:  # noqa: A001 - the verb users expect: tokenwire.open(...)
    """Open a dataset folder made by ``tokenwire ingest`` (and ``tokenwire link``)."""
    from .dataset.handle import Dataset

    return Dataset(path)
