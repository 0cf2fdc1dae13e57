-- collective_instances: one collective seen across all ranks of its communicator (matched
-- as in clock_offsets.sql), with arrival skew on the aligned clock, duration across ranks
-- and nccl-tests bandwidths. One row per collective, whatever the sources that recorded it.
--
-- Each source first makes its own rows (_source_instances: one per job, source,
-- communicator and sequence number, which the other link files join per source). A rank
-- seen by two sources (a profiler trace and its NCCL log or flight recorder dump) then holds
-- each collective twice; where a call of one source's instance matched a call of a more
-- trusted source's instance (collective_matches; source_preference, dataset/sources.sql),
-- the less trusted instance is left out and the row that stands lists both in `sources`.
-- The row that stands is the more trusted source's, whole, even where the other source saw
-- more ranks (an NCCL log of ranks the profiler skipped): its ranks_seen, skew, late rank
-- and durations then all come from the same records; the other source's calls of those
-- ranks stay in collective_links and collective_waits.
-- busbw uses nccl-tests' factors (nccl-tests doc/PERFORMANCE.md; bus_factor, defined by
-- every connection in dataset/sources.sql): all_reduce 2(n-1)/n; all_gather,
-- reduce_scatter, all_to_all (n-1)/n; others 1.
--
-- group_size is the calls' own, else the size of the communicator as any source knows it
-- (communicator_dims: a profiler's pg_config, a flight recorder's, an NCCL log's nranks),
-- else that of a less trusted source's instance of the same collective.
--
-- reads: _instance_rows, bus_factor, clock_offsets, collective_matches, communicator_dims,
--   source_preference
-- creates: _source_instances, collective_instances

CREATE VIEW _instance_aligned AS
SELECT r.*, r.start_ns - o.offset_ns AS aligned_start_ns,
       -- ranks with a step first, then by rank, then by collective_id: the pair as one
       -- HUGEINT (the high 64 bits the first, the low the second), which compares much
       -- faster than a struct of the two
       (r.rank + CASE WHEN r.step IS NULL THEN 1000000000000 ELSE 0 END)::HUGEINT
           * 18446744073709551616 + (r.collective_id::HUGEINT + 9223372036854775808)
           AS context_order
FROM _instance_rows r
JOIN clock_offsets o USING (job, rank);

CREATE TEMP TABLE _source_instances AS
WITH g AS (
    SELECT job, source, instance_comm AS comm, instance_seq AS seq,
           -- (op is never null: min = max says every rank reports the same op)
           min(op) AS min_op, max(op) AS max_op,
           bool_and(op IN ('send', 'recv')) AS p2p,
           max(bytes) AS bytes,
           max(group_size) AS group_size,
           -- (count(DISTINCT rank) keeps a second hash table of every call: slower)
           len(list_distinct(list(rank))) AS ranks_seen,
           min(bytes) IS NOT DISTINCT FROM max(bytes) AS same_bytes,
           min(aligned_start_ns) AS first_start_ns,
           max(aligned_start_ns) AS last_start_ns,
           arg_max(rank, (aligned_start_ns, -rank)) AS late_rank,  -- equal starts: lowest rank
           min(dur_ns) AS min_dur_ns,
           max(dur_ns) AS max_dur_ns,
           -- the context of the lowest rank that a step places (a rank without a profiler
           -- trace has none of its own); of one rank's calls in an instance (a job whose
           -- sequence numbers restarted), the first, so that every run agrees
           arg_min(step, context_order) AS step,
           arg_min(phase, context_order) AS phase,
           arg_min(layer, context_order) AS layer,
           arg_min(layer_kind, context_order) AS layer_kind,
           arg_min(parallel_dim, context_order) AS parallel_dim,
           -- (the model's size on any rank makes the instance's an estimate)
           CASE WHEN bool_or(size_source = 'estimated') THEN 'estimated'
                ELSE min(size_source) END AS size_source
    FROM _instance_aligned
    GROUP BY job, source, instance_comm, instance_seq
),
-- Where ranks disagree on the op (rare; a send and its recv always do: their instance is the
-- transfer, op `send`, whichever side recorded it, so that `op` means the same in every
-- table): the op most of them report, the first by name of equals, so that the table is the
-- same on every run.
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
    SELECT g.* REPLACE (coalesce(g.group_size, d.nranks) AS group_size),
           CASE WHEN p2p THEN 'send' WHEN min_op = max_op THEN min_op ELSE u.usual_op END AS op,
           same_bytes AND (min_op = max_op OR p2p) AS consistent
    FROM g LEFT JOIN usual u
      ON u.job = g.job AND u.source = g.source AND u.comm IS NOT DISTINCT FROM g.comm
     AND u.seq = g.seq
    -- (a send/recv instance's comm names its pair, no communicator: its calls' size stands)
    LEFT JOIN communicator_dims d ON d.job = g.job AND d.comm = g.comm
)
SELECT job, source, comm, seq, op, bytes, group_size, ranks_seen, consistent,
       first_start_ns, last_start_ns, last_start_ns - first_start_ns AS skew_ns,
       CASE WHEN ranks_seen > 1 THEN late_rank END AS late_rank,
       min_dur_ns, max_dur_ns,
       bytes / nullif(min_dur_ns, 0) AS algbw_gbps,
       bytes / nullif(min_dur_ns, 0) * bus_factor(op, coalesce(group_size, ranks_seen))
           AS busbw_gbps,
       step, phase, layer, layer_kind, parallel_dim, size_source
FROM i;

-- Pairs of instances of the same collective: one of a less trusted source (dropped) and
-- one of a more trusted source (kept), linked by a matched call of one rank.
-- (rows only from secondary sources)
CREATE TEMP TABLE _same_instances AS
SELECT DISTINCT s.job, s.source, s.instance_comm AS comm, s.instance_seq AS seq,
       p.source AS kept_source, p.instance_comm AS kept_comm, p.instance_seq AS kept_seq
FROM collective_matches m
JOIN _instance_rows s USING (job, rank, source, file_id, collective_id)
JOIN _instance_rows p
  ON p.job = m.job AND p.rank = m.rank AND p.source = m.primary_source
 AND p.file_id = m.primary_file_id AND p.collective_id = m.primary_collective_id
WHERE source_preference(p.source) < source_preference(s.source);

CREATE TEMP TABLE collective_instances AS
WITH also AS (
    SELECT d.job, d.kept_source AS source, d.kept_comm AS comm, d.kept_seq AS seq,
           list(DISTINCT d.source) AS others, max(o.group_size) AS group_size
    FROM _same_instances d
    LEFT JOIN _source_instances o
      ON o.job = d.job AND o.source = d.source AND o.comm IS NOT DISTINCT FROM d.comm
     AND o.seq = d.seq
    GROUP BY ALL
)
SELECT i.* REPLACE (coalesce(i.group_size, a.group_size) AS group_size),
       list_sort(list_distinct(coalesce(a.others, []) || [i.source])) AS sources
FROM _source_instances i
LEFT JOIN also a
  ON a.job = i.job AND a.source = i.source AND a.comm IS NOT DISTINCT FROM i.comm
 AND a.seq = i.seq
ANTI JOIN _same_instances d
  ON d.job = i.job AND d.source = i.source AND d.comm IS NOT DISTINCT FROM i.comm
 AND d.seq = i.seq;
