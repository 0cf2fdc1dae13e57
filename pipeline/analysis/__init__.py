"""Analyses over ingested tables: each module takes DataFrames and returns a typed result."""
