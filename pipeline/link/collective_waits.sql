-- collective_waits: for every rank's call of a collective, how long it waited for the last
-- rank of its communicator to arrive, and how long it then spent moving data. One row per
-- call of one timed source per job, so that totals count each call once.
--
-- A collective cannot complete before every rank has entered it: on the aligned clock
-- (clock_offsets.sql) the last rank's start ends every rank's wait. So
--   wait_ns     = min(max(last_start_ns - own start, 0), dur_ns)
--   transfer_ns = dur_ns - wait_ns
-- (a send and its recv are one instance of two ranks: collective_instances.sql).
-- Instances that only one rank recorded have no one to wait for and are left out.
--
-- reads: _instance_rows, _source_instances, clock_offsets, source_preference
-- creates: collective_waits

-- The timed source of each job: of those with instances seen on several ranks, the most
-- trusted (source_preference, dataset/sources.sql: the profiler's, else Nsight's, ...).
CREATE TEMP TABLE _wait_source AS
SELECT job, arg_min(source, source_preference(source)) AS source
FROM (SELECT DISTINCT job, source FROM _source_instances
      WHERE ranks_seen > 1 AND first_start_ns IS NOT NULL)
GROUP BY job;

CREATE TEMP TABLE collective_waits AS
WITH calls AS (
    SELECT r.job, r.rank, r.source, r.collective_id, r.op, r.dur_ns,
           r.start_ns - o.offset_ns AS aligned_start_ns,
           i.comm, i.seq, i.bytes, i.step, i.phase, i.layer, i.parallel_dim,
           i.last_start_ns, i.late_rank
    FROM _instance_rows r
    JOIN _wait_source s USING (job, source)
    JOIN clock_offsets o USING (job, rank)
    JOIN _source_instances i
      ON i.job = r.job AND i.source = r.source AND i.comm IS NOT DISTINCT FROM r.instance_comm
     AND i.seq = r.instance_seq
    WHERE i.ranks_seen > 1 AND r.start_ns IS NOT NULL AND r.dur_ns IS NOT NULL
)
SELECT job, rank, source, collective_id, comm, seq, op, bytes, step, phase, layer,
       parallel_dim, aligned_start_ns, dur_ns,
       least(greatest(last_start_ns - aligned_start_ns, 0), dur_ns) AS wait_ns,
       dur_ns - least(greatest(last_start_ns - aligned_start_ns, 0), dur_ns) AS transfer_ns,
       late_rank
FROM calls;
