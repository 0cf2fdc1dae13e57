"""tokenwire: traces of a training job -> Parquet dataset -> linked SQL -> report.

The package follows the flow: ``ingest`` (one module per source format), ``dataset``
(schemas, Parquet layout, DuckDB views), ``link`` (SQL that joins sources), ``model``
(analytic traffic predictions) and ``report``. Nothing heavy is imported at module load.
"""

__version__ = "0.1.0"
