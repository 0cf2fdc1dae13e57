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

-- rank_hosts: per job and rank, the one host, device and accelerator it ran on, however its
-- sources spell them. Sources name a host their own way (an NCCL log's `node0`, Nsight's
-- `node-0`, a profiler trace none): the names the sources of one rank give are one host. A
-- rank's own name is its most trusted source's (source_preference); every name is then
-- replaced by the own name of the lowest rank that any source gives it, so two spellings of
-- a host count once, on every rank of it. device and gpu_name: the most trusted source's
-- that gives one. A rank no source names a host of has a NULL host.
CREATE VIEW rank_hosts AS
WITH named AS (
    SELECT DISTINCT job, rank, source, host FROM ranks WHERE host IS NOT NULL
),
own AS (
    SELECT job, rank, arg_min(host, (source_preference(source), host)) AS host
    FROM named GROUP BY ALL
),
alias AS (
    SELECT n.job, n.host AS name, arg_min(o.host, (n.rank, o.host)) AS host
    FROM named n JOIN own o USING (job, rank)
    GROUP BY ALL
),
facts AS (
    SELECT job, rank,
           arg_min(device, (source_preference(source), device))
               FILTER (device IS NOT NULL) AS device,
           arg_min(gpu_name, (source_preference(source), gpu_name))
               FILTER (gpu_name IS NOT NULL) AS gpu_name
    FROM ranks GROUP BY ALL
)
SELECT f.job, f.rank, a.host, f.device, f.gpu_name
FROM facts f
LEFT JOIN own o USING (job, rank)
LEFT JOIN alias a ON a.job = o.job AND a.name = o.host;

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
