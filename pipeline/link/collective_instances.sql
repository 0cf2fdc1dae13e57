-- collective_instances: one collective seen across all ranks of its communicator (matched
-- as in clock_offsets.sql), with arrival skew on the aligned clock, duration across ranks
-- and nccl-tests bandwidths. One row per job, source, communicator and sequence number.
-- busbw uses nccl-tests' factors (analytic-models.md §4.1): all_reduce 2(n-1)/n;
-- all_gather, reduce_scatter, all_to_all (n-1)/n; others 1.

CREATE VIEW _instance_aligned AS
SELECT r.*, r.start_ns - o.offset_ns AS aligned_start_ns,
       -- ranks with a step first, then by rank (one integer: faster than a pair)
       r.rank + CASE WHEN r.step IS NULL THEN 1000000000000 ELSE 0 END AS context_order
FROM _instance_rows r
JOIN clock_offsets o USING (job, rank);

-- The op most of an instance's ranks report (the first by name of equals), so that the
-- table is the same on every run when ranks disagree.
CREATE VIEW _instance_usual_op AS
SELECT job, source, instance_comm, instance_seq, first(op ORDER BY n DESC, op) AS usual_op
FROM (SELECT job, source, instance_comm, instance_seq, op, count(*) AS n
      FROM _instance_rows GROUP BY ALL)
GROUP BY ALL;

CREATE TEMP TABLE collective_instances AS
WITH g AS (
    SELECT job, source, instance_comm AS comm, instance_seq AS seq,
           CASE WHEN count(DISTINCT op) = 2 AND bool_and(op IN ('send', 'recv'))
                THEN 'send_recv' ELSE any_value(u.usual_op) END AS op,
           max(bytes) AS bytes,
           max(group_size) AS group_size,
           count(DISTINCT rank) AS ranks_seen,
           count(DISTINCT bytes) <= 1
               AND (count(DISTINCT op) = 1 OR bool_and(op IN ('send', 'recv'))) AS consistent,
           min(aligned_start_ns) AS first_start_ns,
           max(aligned_start_ns) AS last_start_ns,
           arg_max(rank, (aligned_start_ns, -rank)) AS late_rank,  -- equal starts: lowest rank
           min(dur_ns) AS min_dur_ns,
           max(dur_ns) AS max_dur_ns,
           -- the context of the lowest rank that a step places (a rank without a profiler
           -- trace has none of its own)
           arg_min(step, context_order) AS step,
           arg_min(phase, context_order) AS phase,
           arg_min(layer, context_order) AS layer,
           arg_min(layer_kind, context_order) AS layer_kind,
           arg_min(parallel_dim, context_order) AS parallel_dim
    FROM _instance_aligned
    JOIN _instance_usual_op u USING (job, source, instance_comm, instance_seq)
    GROUP BY job, source, instance_comm, instance_seq
)
SELECT job, source, comm, seq, op, bytes, group_size, ranks_seen, consistent,
       first_start_ns, last_start_ns, last_start_ns - first_start_ns AS skew_ns,
       CASE WHEN ranks_seen > 1 THEN late_rank END AS late_rank,
       min_dur_ns, max_dur_ns,
       bytes / nullif(min_dur_ns, 0) AS algbw_gbps,
       bytes / nullif(min_dur_ns, 0) * CASE
           WHEN op = 'all_reduce' THEN 2.0 * (coalesce(group_size, ranks_seen) - 1)
                                       / coalesce(group_size, ranks_seen)
           WHEN op IN ('all_gather', 'reduce_scatter', 'all_to_all')
               THEN (coalesce(group_size, ranks_seen) - 1.0) / coalesce(group_size, ranks_seen)
           ELSE 1.0 END AS busbw_gbps,
       step, phase, layer, layer_kind, parallel_dim
FROM g;
