"""Benchmarks: each measures tokenwire next to a baseline in the same run, as ratios."""
