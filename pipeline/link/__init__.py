"""Link: SQL that joins the raw tables into answers, materialized as derived tables.

Each ``.sql`` file here answers one question and creates the view of the same name (plus
``_``-prefixed intermediate views); :mod:`pipeline.link.runner` runs them in order over the
dataset's DuckDB views and writes the public views as Parquet tables beside the raw ones.
"""
