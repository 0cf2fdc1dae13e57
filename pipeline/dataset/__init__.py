"""The dataset: table schemas, the atomic Parquet writer, the manifest and DuckDB views.

Layout: ``DATASET/<table>/job=<job>/part-<id>.parquet`` (a file's rows, a job's merged small
parts or a link run's rows; ``rank`` is a column) plus ``manifest.json``, which lists every
part that belongs to the dataset. Readers go through the manifest, so a part left by a
crashed ingest is never read.
"""
