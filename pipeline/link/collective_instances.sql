-- collective_instances: one collective seen across all ranks of its communicator (matched
-- as in clock_offsets.sql), with arrival skew on the aligned clock, duration across ranks
-- and nccl-tests bandwidths. One row per job, source, communicator and sequence number.
-- busbw uses nccl-tests' factors (nccl-tests doc/PERFORMANCE.md; bus_factor, defined by
-- every connection in dataset/sources.sql): all_reduce 2(n-1)/n; all_gather,
-- reduce_scatter, all_to_all (n-1)/n; others 1.
--
-- reads: _instance_rows, bus_factor, clock_offsets
-- creates: collective_instances

CREATE VIEW _instance_aligned AS
SELECT r.*, r.start_ns - o.offset_ns AS aligned_start_ns,
       -- ranks with a step first, then by rank
       r.rank + CASE WHEN r.step IS NULL THEN 1000000000000 ELSE 0 END AS context_order
FROM _instance_rows r
JOIN clock_offsets o USING (job, rank);

CREATE TEMP TABLE collective_instances AS
WITH g AS (
    SELECT job, source, instance_comm AS comm, instance_seq AS seq,
           -- (op is never null: min = max says every rank reports the same op)
           min(op) AS min_op, max(op) AS max_op,
           bool_and(op IN ('send', 'recv')) AS p2p,
           max(bytes) AS bytes,
           max(group_size) AS group_size,
           count(DISTINCT rank) AS ranks_seen,
           min(bytes) IS NOT DISTINCT FROM max(bytes) AS same_bytes,
           min(aligned_start_ns) AS first_start_ns,
           max(aligned_start_ns) AS last_start_ns,
           arg_max(rank, (aligned_start_ns, -rank)) AS late_rank,  -- equal starts: lowest rank
           min(dur_ns) AS min_dur_ns,
           max(dur_ns) AS max_dur_ns,
           -- the context of the lowest rank that a step places (a rank without a profiler
           -- trace has none of its own); of one rank's calls in an instance (a job whose
           -- sequence numbers restarted), the first, so that every run agrees
           arg_min(step, (context_order, collective_id)) AS step,
           arg_min(phase, (context_order, collective_id)) AS phase,
           arg_min(layer, (context_order, collective_id)) AS layer,
           arg_min(layer_kind, (context_order, collective_id)) AS layer_kind,
           arg_min(parallel_dim, (context_order, collective_id)) AS parallel_dim
    FROM _instance_aligned
    GROUP BY job, source, instance_comm, instance_seq
),
-- Where ranks disagree on the op (rare; a send and its recv always do, and are send_recv): the
-- op most of them report, the first by name of equals, so that the table is the same on
-- every run.
usual AS (
    SELECT job, source, comm, seq, first(op ORDER BY n DESC, op) AS usual_op
    FROM (SELECT r.job, r.source, r.instance_comm AS comm, r.instance_seq AS seq, r.op,
                 count(*) AS n
          FROM _instance_rows r
          SEMI JOIN (SELECT * FROM g WHERE min_op <> max_op AND NOT p2p) d
              ON d.job = r.job AND d.source = r.source AND d.comm IS NOT DISTINCT FROM r.instance_comm
             AND d.seq = r.instance_seq
          GROUP BY ALL)
    GROUP BY ALL
),
i AS (
    SELECT g.*, 
           CASE WHEN p2p AND min_op <> max_op THEN 'send_recv'
                WHEN min_op = max_op THEN min_op ELSE u.usual_op END AS op,
           same_bytes AND (min_op = max_op OR p2p) AS consistent
    FROM g LEFT JOIN usual u
      ON u.job = g.job AND u.source = g.source AND u.comm IS NOT DISTINCT FROM g.comm
     AND u.seq = g.seq
)
SELECT job, source, comm, seq, op, bytes, group_size, ranks_seen, consistent,
       first_start_ns, last_start_ns, last_start_ns - first_start_ns AS skew_ns,
       CASE WHEN ranks_seen > 1 THEN late_rank END AS late_rank,
       min_dur_ns, max_dur_ns,
       bytes / nullif(min_dur_ns, 0) AS algbw_gbps,
       bytes / nullif(min_dur_ns, 0) * bus_factor(op, coalesce(group_size, ranks_seen))
           AS busbw_gbps,
       step, phase, layer, layer_kind, parallel_dim
FROM i;
