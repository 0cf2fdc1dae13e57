-- Which source counts for a rank, and the bus-bandwidth factors: made by every connection
-- (tokenwire link's too, before any derived table exists).

-- source_preference: the order in which one rank's records of the same calls are trusted:
-- the profiler's (kineto), else a timeline's (Nsight, rocprofv3, nsys-jax, the JAX profiler),
-- else the NCCL log's, else the flight recorder's.
CREATE MACRO source_preference(source) AS CASE
    WHEN source = 'kineto' THEN 0
    WHEN source IN ('nsys', 'rocprof', 'nsys_jax', 'jax_trace') THEN 1
    WHEN source = 'nccl_log' THEN 2
    ELSE 3 END;

-- primary_sources: per job and rank, the one source whose records traffic totals count. A
-- rank traced by the profiler and also logged by NCCL or exported by Nsight holds each call
-- two or three times; totals take the most preferred source the rank has.
CREATE VIEW primary_sources AS
SELECT job, rank, arg_min(source, source_preference(source)) AS source
FROM (SELECT DISTINCT job, rank, source FROM collectives)
GROUP BY ALL;

-- member_ranks: an aggregate over a communicator's rows (of _communicators_stored, the rows
-- as the parts hold them): its members, sorted. A row lists its group (ranks), or stores it
-- as the sequence ranks_first + i x ranks_stride, i < nranks (pipeline/dataset/rank_sets.py),
-- or knows only its own rank (an NCCL log's). Each distinct list and sequence is expanded
-- once: a world-sized group repeats on every rank's row (world^2 ranks in all).
CREATE MACRO member_ranks(ranks, ranks_first, ranks_stride, nranks, rank) AS
list_sort(list_distinct(
    coalesce(flatten(list(DISTINCT ranks) FILTER (ranks_stride IS NULL)), [])
    || coalesce(flatten(list_transform(
           list(DISTINCT {'first': ranks_first, 'stride': ranks_stride, 'n': nranks})
               FILTER (ranks_stride IS NOT NULL),
           lambda s: range(s.first, s.first + s.stride * s.n, s.stride))), [])
    || list(rank)));

-- bus_factor: nccl-tests' bus-bandwidth factor of an op on n ranks (nccl-tests
-- doc/PERFORMANCE.md: busbw = algbw x factor), the one copy link's SQL and the report use.
-- k (n - 1) / n x M is also what a ring sends from each rank (docs/wire.md).
CREATE MACRO bus_factor(op, n) AS CASE
    WHEN op = 'all_reduce' THEN 2.0 * (n - 1.0) / n
    WHEN op IN ('all_gather', 'reduce_scatter', 'all_to_all') THEN (n - 1.0) / n
    ELSE 1.0 END;
