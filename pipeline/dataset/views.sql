-- Convenience views over the raw and derived tables, made by every connection.

-- collectives_linked: each collective with what tokenwire link found out about it (step,
-- phase, layer, parallel dimension; sizes filled from a matched call of another source where
-- the trace lacks them); empty until the dataset has been linked.
CREATE VIEW collectives_linked AS
SELECT c.* EXCLUDE (step, phase, layer, attributed_by, bytes, dtype, size_source),
       l.step, l.step_from, l.bytes, l.dtype, l.size_source, l.phase, l.layer, l.layer_index,
       l.layer_label, l.layer_kind, l.parallel_dim, l.attributed_by, l.instance_comm, l.instance_seq
FROM collectives c
JOIN collective_links l USING (job, rank, source, file_id, collective_id);

-- collective_calls: each rank's call of each collective once, as its most trusted source
-- recorded it (primary_sources, sources.sql: the profiler's, else Nsight's, else the NCCL
-- log's, else the flight recorder's), with collectives_linked's columns. A job traced
-- several ways holds each call once per source in collectives_linked; sums over this view
-- count each byte once, as token_wire does.
CREATE VIEW collective_calls AS
SELECT l.* FROM collectives_linked l JOIN primary_sources USING (job, rank, source);

-- primary_kernel_sources: per job and rank, the source whose kernels count, in the order of
-- source_preference (sources.sql): the profiler's, else Nsight's (the only sources of kernels).
CREATE VIEW primary_kernel_sources AS
SELECT job, rank, arg_min(source, source_preference(source)) AS source
FROM (SELECT DISTINCT job, rank, source FROM kernels)
GROUP BY ALL;

-- Traffic matrices over `wire` (tokenwire link; docs/wire.md): empty until the dataset has
-- been linked.

-- wire_rank_matrix: bytes each rank sent each other rank, per step.
CREATE VIEW wire_rank_matrix AS
SELECT job, step, src_rank, dst_rank, any_value(src_host) AS src_host,
       any_value(dst_host) AS dst_host, any_value(inter_host) AS inter_host,
       count(*) AS flows, sum(bytes) AS bytes, bool_or(estimated) AS estimated
FROM wire GROUP BY job, step, src_rank, dst_rank;

-- wire_host_matrix: bytes each host sent each host (itself included: NVLink, PCIe, SHM),
-- per step.
CREATE VIEW wire_host_matrix AS
SELECT job, step, src_host, dst_host, count(*) AS flows, sum(bytes) AS bytes,
       bool_or(estimated) AS estimated
FROM wire GROUP BY job, step, src_host, dst_host;

-- wire_split: bytes that stay inside a host and bytes that cross hosts, per step and
-- parallel dimension, and per token of the step (token_wire's tokens).
CREATE VIEW wire_split AS
WITH t AS (SELECT job, step, any_value(tokens) AS tokens FROM token_wire GROUP BY ALL)
SELECT w.job, w.step, w.parallel_dim,
       coalesce(sum(w.bytes) FILTER (NOT w.inter_host), 0) AS intra_host_bytes,
       coalesce(sum(w.bytes) FILTER (w.inter_host), 0) AS inter_host_bytes,
       coalesce(sum(w.bytes) FILTER (w.inter_host IS NULL), 0) AS unknown_host_bytes,
       any_value(t.tokens) AS tokens,
       coalesce(sum(w.bytes) FILTER (NOT w.inter_host), 0) / nullif(any_value(t.tokens), 0)
           AS intra_host_bytes_per_token,
       coalesce(sum(w.bytes) FILTER (w.inter_host), 0) / nullif(any_value(t.tokens), 0)
           AS inter_host_bytes_per_token
FROM wire w
LEFT JOIN t ON t.job = w.job AND t.step IS NOT DISTINCT FROM w.step
GROUP BY w.job, w.step, w.parallel_dim;

-- wire_demand: what each host (each NIC, where the NCCL log names it) sends ('out') and
-- receives ('in') in 1 ms buckets of the aligned clock, in Gbit/s: every transfer spread
-- evenly over its duration (from its last rank's start; a transfer without a duration
-- falls in the bucket of its start). scope: inter_host (the NIC's load), intra_host.
CREATE VIEW wire_demand AS
WITH spans AS (
    SELECT job, step, src_host, dst_host, src_nic, dst_nic, bytes, start_ns,
           greatest(coalesce(dur_ns, 0), 1) AS dur_ns,
           CASE WHEN inter_host THEN 'inter_host' WHEN NOT inter_host THEN 'intra_host'
           END AS scope
    FROM wire WHERE start_ns IS NOT NULL
),
cut AS (  -- (floor division, also for a time before 0)
    SELECT *, unnest(range((start_ns - ((start_ns % 1000000) + 1000000) % 1000000) // 1000000,
                           (start_ns + dur_ns - 1
                            - ((start_ns + dur_ns - 1) % 1000000 + 1000000) % 1000000)
                           // 1000000 + 1)) AS bucket
    FROM spans
),
parts AS (
    SELECT *, bytes * (least(start_ns + dur_ns, (bucket + 1) * 1000000)
                       - greatest(start_ns, bucket * 1000000)) / dur_ns AS part
    FROM cut
),
ends AS (
    SELECT job, step, src_host AS host, src_nic AS nic, 'out' AS direction, scope, bucket, part
    FROM parts
    UNION ALL
    SELECT job, step, dst_host, dst_nic, 'in', scope, bucket, part FROM parts
)
SELECT job, step, host, nic, direction, scope, bucket * 1000000 AS bucket_start_ns,
       CAST(1000000 AS BIGINT) AS bucket_ns, sum(part) AS bytes, sum(part) * 8 / 1e6 AS gbps
FROM ends GROUP BY job, step, host, nic, direction, scope, bucket;

-- wire_demand_peaks: per host (NIC), direction and scope, the peak and percentiles of
-- wire_demand over the buckets in which it moves bytes.
CREATE VIEW wire_demand_peaks AS
SELECT job, host, nic, direction, scope, count(*) AS buckets, max(gbps) AS peak_gbps,
       quantile_cont(gbps, 0.5) AS p50_gbps, quantile_cont(gbps, 0.9) AS p90_gbps,
       quantile_cont(gbps, 0.99) AS p99_gbps, avg(gbps) AS mean_gbps
FROM (SELECT job, host, nic, direction, scope, bucket_start_ns, sum(gbps) AS gbps
      FROM wire_demand GROUP BY ALL)
GROUP BY job, host, nic, direction, scope;

-- wire_flow_sizes: how many flows (one instance on one directed rank pair) of each size,
-- in powers of two from size_from, and the bytes they carry.
CREATE VIEW wire_flow_sizes AS
SELECT job, CAST(pow(2, floor(log2(bytes))) AS BIGINT) AS size_from, count(*) AS flows,
       sum(bytes) AS bytes, bool_or(inter_host) AS any_inter_host
FROM wire WHERE bytes >= 1
GROUP BY job, size_from;
