"""The dataset: table schemas, the atomic Parquet writer, the manifest and DuckDB views.

Layout: ``DATASET/<table>/job=<job>/rank=<rank>/part-<file_id>.parquet`` (``files`` is
partitioned by job only) plus ``manifest.json``, which lists every part that belongs to the
dataset. Readers go through the manifest, so a part left by a crashed ingest is never read.
"""
