-- collective_matches: the same call seen by two sources of one rank. One row per
-- secondary-source collective (NCCL log, flight recorder, Nsight) that matched a profiler
-- (Kineto) collective. Used to fill the sizes and dtypes an old profiler trace lacks
-- (_filled_sizes) and to count how much of each source matched.
--
-- Communicators map by name (pg:<name> in Kineto and flight recorder) or, across naming
-- schemes (an NCCL commId, an Nsight comm hash), by an identical rank set; a secondary
-- communicator that could be several profiler ones is left unmatched.
-- Calls then match:
--   by time, where the secondary source has its own enqueue time on the same host clock
--   (flight recorder time_created, Nsight NVTX range): the nearest profiler call of the same
--   op within 50 ms, taken only when each is the other's nearest;
--   by order, otherwise (NCCL logs): the k-th call of an op on the communicator, shifted by
--   the offset that makes the most sizes agree (a log usually spans more steps than the
--   profiler's window), then the most sequence numbers (PyTorch's per-group seq against
--   NCCL's opCount: the only evidence left when the trace has no sizes); an offset tied
--   with another on both is ambiguous and matches nothing.
--
-- reads: _communicators_stored, collectives, member_ranks
-- creates: _comm_sets, _comm_map, _adopted_groups, collective_matches, _filled_sizes

-- A communicator's rank set, assembled across its rows (member_ranks, sources.sql): an NCCL
-- log knows only its own global rank in each communicator, the job's logs together know all.
CREATE TEMP TABLE _comm_sets AS
SELECT job, source, comm, max(nranks) AS nranks,
       member_ranks(ranks, ranks_first, ranks_stride, nranks, rank) AS ranks
FROM _communicators_stored
GROUP BY ALL;

-- (two equi-joins, by name and by rank set: one join on either condition compared every
-- communicator with every other, 1.2 s for the 6,000 groups of 16,384 ranks)
CREATE TEMP TABLE _comm_map AS
SELECT * FROM (
    SELECT o.job, o.source, o.comm, k.comm AS primary_comm
    FROM _comm_sets o
    JOIN _comm_sets k ON k.job = o.job AND k.source = 'kineto' AND k.comm = o.comm
    WHERE o.source <> 'kineto'
    UNION
    SELECT o.job, o.source, o.comm, k.comm AS primary_comm
    FROM _comm_sets o
    JOIN _comm_sets k ON k.job = o.job AND k.source = 'kineto' AND k.nranks = o.nranks
        AND k.ranks = o.ranks
    WHERE o.source <> 'kineto' AND o.comm NOT LIKE 'pg:%' AND len(k.ranks) = k.nranks)
QUALIFY count(*) OVER (PARTITION BY job, source, comm) = 1;

-- The op a flight recorder records for a profiler call: its own, except a reduce-scatter
-- that gloo ran as an all-reduce of the whole input (the profiler's work range is
-- gloo:all_reduce; PyTorch's ProcessGroupGloo::_reduce_scatter_base enqueues that work and
-- the recorder names it gloo:all_reduce, with the same input size).
CREATE MACRO _recorded_op(op, op_name) AS
    CASE WHEN op = 'reduce_scatter' AND op_name = 'gloo:all_reduce' THEN 'all_reduce'
         ELSE op END;

-- (only ranks another source also recorded: nothing else can match)
-- (rows only from secondary sources)
CREATE TEMP TABLE _primary_calls AS
SELECT job, rank, file_id, collective_id, comm, op, _recorded_op(op, op_name) AS recorded_op,
       bytes, dtype, seq, enqueue_ns,
       row_number() OVER (PARTITION BY job, rank, comm, op ORDER BY seq, enqueue_ns,
                          collective_id) - 1 AS k
FROM collectives
SEMI JOIN (SELECT DISTINCT job, rank FROM collectives WHERE source <> 'kineto') USING (job, rank)
WHERE source = 'kineto';

-- (rows only from secondary sources)
CREATE TEMP TABLE _secondary_calls AS
SELECT c.job, c.rank, c.source, c.file_id, c.collective_id, m.primary_comm, c.op, c.bytes,
       c.dtype, c.seq, c.enqueue_ns, c.source IN ('flight_recorder', 'nsys') AS timed,
       row_number() OVER (PARTITION BY c.job, c.rank, c.source, m.primary_comm, c.op
                          ORDER BY c.seq, c.collective_id) - 1 AS k
FROM collectives c
JOIN _comm_map m USING (job, source, comm);

-- Time: candidate pairs within 50 ms, kept when mutually nearest. Calls are put in 50 ms
-- buckets (floor division) and a call is paired only with the profiler's calls of its own
-- and the two neighbouring buckets, which hold every call within 50 ms: on the ranks, comm
-- and op alone the join paired every call of a long capture with every profiler call.
CREATE MACRO _bucket_50ms(ns) AS (ns - (ns % 50000000 + 50000000) % 50000000) // 50000000;

-- (rows only from secondary sources)
CREATE TEMP TABLE _time_matches AS
WITH primary_calls AS (
    SELECT *, _bucket_50ms(enqueue_ns) AS bucket
    FROM _primary_calls
), secondary_calls AS (
    SELECT s.*, _bucket_50ms(enqueue_ns) + n.step AS bucket
    FROM _secondary_calls s, (VALUES (-1), (0), (1)) n(step)
    WHERE s.timed
), pairs AS (
    SELECT s.job, s.rank, s.source, s.file_id, s.collective_id, p.file_id AS primary_file_id,
           p.collective_id AS primary_collective_id, abs(s.enqueue_ns - p.enqueue_ns) AS gap,
           s.bytes IS NOT DISTINCT FROM p.bytes OR s.bytes IS NULL OR p.bytes IS NULL
               AS sizes_agree,
           s.bytes, s.dtype
    FROM secondary_calls s
    JOIN primary_calls p ON p.job = s.job AND p.rank = s.rank AND p.comm = s.primary_comm
        AND p.recorded_op = s.op AND p.bucket = s.bucket
        AND p.enqueue_ns BETWEEN s.enqueue_ns - 50000000 AND s.enqueue_ns + 50000000
)
SELECT * EXCLUDE (gap), 'time' AS method
FROM pairs
-- (equal gaps, rare with ns clocks: the earliest call, so that every run agrees)
QUALIFY row_number() OVER (PARTITION BY job, rank, source, file_id, collective_id
                           ORDER BY gap, primary_file_id, primary_collective_id) = 1
    AND row_number() OVER (PARTITION BY job, rank, source, primary_file_id,
                                        primary_collective_id
                           ORDER BY gap, file_id, collective_id) = 1;

-- Profiler ranks whose trace names no process group (gloo emits no record_param_comms,
-- so its calls carry no group): their calls pair with the flight recorder's by time alone,
-- on the same rank and op, sizes agreeing, mutually nearest within 50 ms. The recorder
-- names the group and its sequence number (_adopted_groups), which the profiler's call
-- takes: the same call of two groups is then two instances, not one.
-- (rows only from secondary sources)
CREATE TEMP TABLE _commless_matches AS
WITH primary_calls AS (
    SELECT job, rank, file_id, collective_id, _recorded_op(op, op_name) AS recorded_op, bytes,
           enqueue_ns, _bucket_50ms(enqueue_ns) AS bucket
    FROM collectives
    WHERE source = 'kineto' AND comm IS NULL AND enqueue_ns IS NOT NULL
), secondary_calls AS (
    SELECT c.job, c.rank, c.source, c.file_id, c.collective_id, c.op, c.bytes, c.dtype,
           c.enqueue_ns, _bucket_50ms(c.enqueue_ns) + n.step AS bucket
    FROM collectives c
    CROSS JOIN (VALUES (-1), (0), (1)) n(step)
    WHERE c.source = 'flight_recorder' AND c.comm IS NOT NULL AND c.enqueue_ns IS NOT NULL
      AND (c.job, c.rank) IN (SELECT DISTINCT job, rank FROM primary_calls)
), pairs AS (
    SELECT s.job, s.rank, s.source, s.file_id, s.collective_id, p.file_id AS primary_file_id,
           p.collective_id AS primary_collective_id, abs(s.enqueue_ns - p.enqueue_ns) AS gap,
           s.bytes IS NOT DISTINCT FROM p.bytes OR s.bytes IS NULL OR p.bytes IS NULL
               AS sizes_agree,
           s.bytes, s.dtype
    FROM secondary_calls s
    JOIN primary_calls p ON p.job = s.job AND p.rank = s.rank AND p.recorded_op = s.op
        AND p.bucket = s.bucket
        AND p.enqueue_ns BETWEEN s.enqueue_ns - 50000000 AND s.enqueue_ns + 50000000
    -- (without a group to tell them apart, calls of other sizes are other calls)
    WHERE s.bytes IS NOT DISTINCT FROM p.bytes OR s.bytes IS NULL OR p.bytes IS NULL
)
SELECT * EXCLUDE (gap), 'time' AS method
FROM pairs
-- (equal gaps: the earliest call, so that every run agrees)
QUALIFY row_number() OVER (PARTITION BY job, rank, source, file_id, collective_id
                           ORDER BY gap, primary_file_id, primary_collective_id) = 1
    AND row_number() OVER (PARTITION BY job, rank, primary_file_id, primary_collective_id
                           ORDER BY gap, source, file_id, collective_id) = 1;

-- The group and sequence number each group-less profiler call takes from its recorder call.
-- (rows only from secondary sources)
CREATE TEMP TABLE _adopted_groups AS
SELECT m.job, m.rank, 'kineto' AS source, m.primary_file_id AS file_id,
       m.primary_collective_id AS collective_id, c.comm, c.seq
FROM _commless_matches m
JOIN collectives c USING (job, rank, source, file_id, collective_id);

-- Order, the quick way: the offset that pairs each profiler call with the log call of the
-- same sequence number. Where at that offset every size that can agree does (the most any
-- offset scores) and every sequence number does, it is the single best offset, the one the
-- full scoring below would keep: no other offset can pair every call with its own sequence
-- number when those are unique in the log. The full scoring pairs every call with every
-- call of its op: a log of a whole run against a profiler's window of a few steps is
-- millions of pairs a rank, and this settles that case in a pass.
-- (rows only from secondary sources)
CREATE TEMP TABLE _seq_offsets AS
WITH groups AS (  -- (rank, log, comm) whose log repeats no sequence number of an op
    SELECT job, rank, source, primary_comm
    FROM _secondary_calls
    WHERE NOT timed
    GROUP BY ALL
    HAVING count(seq) = count(*) AND count(DISTINCT (op, seq)) = count(*)
), bounds AS (  -- the most any offset can score: profiler calls of the ops the log has
    SELECT g.job, g.rank, g.source, g.primary_comm, count(*) AS calls, count(p.bytes) AS sized
    FROM groups g
    JOIN (SELECT DISTINCT job, rank, source, primary_comm, op FROM _secondary_calls) o
        USING (job, rank, source, primary_comm)
    JOIN _primary_calls p ON p.job = g.job AND p.rank = g.rank AND p.comm = g.primary_comm
        AND p.op = o.op
    GROUP BY ALL
), candidates AS (
    SELECT DISTINCT s.job, s.rank, s.source, s.primary_comm, s.k - p.k AS offset_calls
    FROM _secondary_calls s
    SEMI JOIN groups USING (job, rank, source, primary_comm)
    JOIN _primary_calls p ON p.job = s.job AND p.rank = s.rank AND p.comm = s.primary_comm
        AND p.op = s.op AND p.seq = s.seq
    WHERE NOT s.timed
), wanted AS (  -- (the log position of each call first, as for _order_matches below)
    SELECT c.job, c.rank, c.source, c.primary_comm, c.offset_calls, p.op,
           p.k + c.offset_calls AS k, p.bytes, p.seq
    FROM candidates c
    JOIN _primary_calls p ON p.job = c.job AND p.rank = c.rank AND p.comm = c.primary_comm
), scored AS (
    SELECT w.job, w.rank, w.source, w.primary_comm, w.offset_calls,
           count(*) FILTER (s.bytes = w.bytes) AS agree,
           count(*) FILTER (s.bytes <> w.bytes) AS disagree,
           count(*) FILTER (s.seq = w.seq) AS same_seq
    FROM wanted w
    JOIN _secondary_calls s USING (job, rank, source, primary_comm, op, k)
    WHERE NOT s.timed
    GROUP BY ALL
)
SELECT c.job, c.rank, c.source, c.primary_comm, c.offset_calls
FROM scored c
JOIN bounds b USING (job, rank, source, primary_comm)
WHERE c.agree - c.disagree = b.sized AND c.same_seq = b.calls;

-- Order, in full, where the quick way settled nothing: score every offset by the sizes that
-- agree, then the sequence numbers; keep the single best per rank and comm.
-- (rows only from secondary sources)
CREATE TEMP TABLE _order_offsets AS
WITH scored AS (
    SELECT s.job, s.rank, s.source, s.primary_comm, s.k - p.k AS offset_calls,
           count(*) FILTER (s.bytes = p.bytes) AS agree,
           count(*) FILTER (s.bytes <> p.bytes) AS disagree,
           count(*) FILTER (s.seq = p.seq) AS same_seq
    FROM _secondary_calls s
    ANTI JOIN _seq_offsets USING (job, rank, source, primary_comm)
    JOIN _primary_calls p ON p.job = s.job AND p.rank = s.rank AND p.comm = s.primary_comm
        AND p.op = s.op
    WHERE NOT s.timed
    GROUP BY ALL
), ranked AS (
    SELECT *, rank() OVER (PARTITION BY job, rank, source, primary_comm
                           ORDER BY agree - disagree DESC, same_seq DESC) AS place
    FROM scored
)
SELECT job, rank, source, primary_comm, any_value(offset_calls) AS offset_calls
FROM ranked WHERE place = 1
GROUP BY ALL
HAVING count(*) = 1
UNION ALL
SELECT * FROM _seq_offsets;

-- (the log position of each profiler call is worked out first: joined on an expression of
-- two tables, DuckDB paired every call with every call of its op and then filtered)
-- (rows only from secondary sources)
CREATE TEMP TABLE _order_matches AS
WITH wanted AS (
    SELECT o.job, o.rank, o.source, o.primary_comm, p.op, p.k + o.offset_calls AS k,
           p.file_id AS primary_file_id, p.collective_id AS primary_collective_id, p.bytes
    FROM _order_offsets o
    JOIN _primary_calls p ON p.job = o.job AND p.rank = o.rank AND p.comm = o.primary_comm
)
SELECT s.job, s.rank, s.source, s.file_id, s.collective_id, w.primary_file_id,
       w.primary_collective_id,
       s.bytes IS NOT DISTINCT FROM w.bytes OR s.bytes IS NULL OR w.bytes IS NULL
           AS sizes_agree,
       'order' AS method, s.bytes, s.dtype
FROM _secondary_calls s
JOIN wanted w USING (job, rank, source, primary_comm, op, k)
WHERE NOT s.timed;

-- (with the matched call's own size and dtype, for _filled_sizes, not published: read
-- again from the collectives, 0.2 s of a link of 16,384 ranks)
-- (rows only from secondary sources)
CREATE TEMP TABLE collective_matches AS
SELECT job, rank, source, file_id, collective_id, 'kineto' AS primary_source,
       primary_file_id, primary_collective_id, method, sizes_agree, bytes, dtype
FROM _time_matches
UNION ALL
SELECT job, rank, source, file_id, collective_id, 'kineto', primary_file_id,
       primary_collective_id, method, sizes_agree, bytes, dtype
FROM _order_matches
UNION ALL
SELECT job, rank, source, file_id, collective_id, 'kineto', primary_file_id,
       primary_collective_id, method, sizes_agree, bytes, dtype
FROM _commless_matches;

-- Sizes and dtypes a profiler collective lacks, from the call matched to it.
-- (rows only from secondary sources)
CREATE TEMP TABLE _filled_sizes AS
SELECT m.job, m.rank, 'kineto' AS source, m.primary_file_id AS file_id,
       m.primary_collective_id AS collective_id,
       arg_min(m.bytes, CASE m.source WHEN 'nccl_log' THEN 0 ELSE 1 END) AS bytes,
       arg_min(m.dtype, CASE m.source WHEN 'nccl_log' THEN 0 ELSE 1 END) AS dtype,
       arg_min(m.source, CASE m.source WHEN 'nccl_log' THEN 0 ELSE 1 END) AS filled_from
FROM collective_matches m
WHERE m.bytes IS NOT NULL
GROUP BY ALL;
