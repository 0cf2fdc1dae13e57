-- critical_path: the chain of work that set each step's length, across ranks: segments of
-- compute (time a rank spent outside collectives: its kernels, ops and gaps) and transfer
-- (a collective moving data once every rank had arrived), from the step's start to its end.
--
-- Walked backwards from the rank whose step ends last, on the aligned clock: on rank r at
-- time t, the latest collective call of r that ended by t closes a compute segment (from its
-- end to t) and its instance's transfer (from the last arrival to its end) precedes it. The
-- data could not move before the last rank arrived, so the path goes on from that rank at
-- its arrival; a wait is never on the path (the path follows whom it waited for). Where a
-- rank has no earlier call in the step, compute runs back to its step's start. Shortening
-- one dimension's transfers can shorten a step by at most their time on this path.
--
-- Which call follows a call on the path depends on that call alone (its late rank and
-- arrival), so it is found once for every call by one as-of join, and the walk only
-- follows those links: one hash lookup per hop instead of a search of every call.
--
-- reads: clock_offsets, collective_waits, steps
-- creates: critical_path

-- Calls with a step, on the aligned clock: when each one's data began to move and ended,
-- and the time from which the walk searches the late rank's calls. That is the arrival,
-- one nanosecond earlier where the call moved no data (it ended before its last rank
-- arrived, by the clocks): then its own end is the arrival, and the call must not find
-- itself. So every hop finds a call that ended strictly earlier and the walk ends.
-- (What the call was, its op, dimension, layer and group, is read from its
-- collective_waits row for the few calls of the paths only: waits_row.)
CREATE TEMP TABLE _path_calls AS
SELECT row_number() OVER () AS call_id, job, step, rank,
       aligned_start_ns + wait_ns AS moving_ns, aligned_start_ns + dur_ns AS end_ns,
       coalesce(late_rank, rank) AS late_rank,
       aligned_start_ns + wait_ns - (wait_ns = dur_ns)::BIGINT AS search_ns,
       rowid AS waits_row
FROM collective_waits WHERE step IS NOT NULL;

-- Each rank's step on the aligned clock (steps of the job's timed source, as the calls).
CREATE TEMP TABLE _path_steps AS
SELECT s.job, s.step, s.rank, min(s.start_ns - o.offset_ns) AS start_ns,
       max(s.end_ns - o.offset_ns) AS end_ns
FROM steps s JOIN clock_offsets o USING (job, rank)
SEMI JOIN (SELECT DISTINCT job, source FROM collective_waits) w USING (job, source)
WHERE s.step IS NOT NULL
GROUP BY ALL;

-- The call that precedes each call on a path: the late rank's latest call that ended by
-- the search time (an as-of join: a merge of the sorted calls). Only the calls of ranks
-- that are some call's late rank in its step can be found, and only they are sorted (on
-- 16,384 ranks, 61,560 of 491,520 calls: a third of the join's CPU).
CREATE TEMP TABLE _path_next AS
SELECT c.call_id, n.call_id AS next_id
FROM _path_calls c
ASOF LEFT JOIN (
    SELECT p.job, p.step, p.rank, p.end_ns, p.call_id FROM _path_calls p
    SEMI JOIN (SELECT DISTINCT job, step, late_rank FROM _path_calls) l
        ON l.job = p.job AND l.step = p.step AND l.late_rank = p.rank
) n
  ON n.job = c.job AND n.step = c.step AND n.rank = c.late_rank AND n.end_ns <= c.search_ns;

-- Where each step's walk starts: the rank whose step ends last, and its last call by then.
CREATE TEMP TABLE _path_start AS
WITH last AS (
    SELECT job, step, arg_max(rank, (end_ns, -rank)) AS rank, max(end_ns) AS end_ns
    FROM _path_steps GROUP BY job, step
)
SELECT l.job, l.step, l.rank, l.end_ns, c.call_id
FROM last l
ASOF LEFT JOIN _path_calls c
  ON c.job = l.job AND c.step = l.step AND c.rank = l.rank AND c.end_ns <= l.end_ns;

-- The walk: the calls on each step's path, hop 1 the last.
CREATE TEMP TABLE _path_walk AS
WITH RECURSIVE walk(job, step, hop, call_id) AS (
    SELECT job, step, 1, call_id FROM _path_start WHERE call_id IS NOT NULL
    UNION ALL
    SELECT w.job, w.step, w.hop + 1, x.next_id
    FROM walk w JOIN _path_next x ON x.call_id = w.call_id
    WHERE x.next_id IS NOT NULL
)
SELECT w.job, w.step, w.hop, c.* EXCLUDE (job, step, call_id, waits_row),
       x.op, x.parallel_dim, x.layer, x.comm, x.seq
FROM walk w JOIN _path_calls c USING (call_id)
JOIN collective_waits x ON x.rowid = c.waits_row;

CREATE TEMP TABLE critical_path AS
WITH hops AS (
    -- each call with where the walk stood when it found the call: the step's end on the
    -- last rank, then the arrival of the call found before
    SELECT w.*, coalesce(lag(w.late_rank) OVER h, s.rank) AS from_rank,
           coalesce(lag(w.moving_ns) OVER h, s.end_ns) AS from_ns,
           hop = max(hop) OVER (PARTITION BY w.job, w.step) AS first_call
    FROM _path_walk w JOIN _path_start s USING (job, step)
    WINDOW h AS (PARTITION BY w.job, w.step ORDER BY hop)
),
segments AS (
    -- compute on the rank the walk stood on: from the call's end to where it stood
    SELECT job, step, hop, 2 AS part, from_rank AS rank, 'compute' AS segment,
           end_ns AS start_ns, from_ns AS end_ns, NULL AS op, NULL AS parallel_dim,
           NULL AS layer, NULL AS comm, NULL::BIGINT AS seq
    FROM hops
    UNION ALL
    -- the call's transfer, on its rank
    SELECT job, step, hop, 1, rank, 'transfer', moving_ns, end_ns, op, parallel_dim, layer,
           comm, seq
    FROM hops
    UNION ALL
    -- compute from the step's start on the rank reached last (or, with no call on the
    -- path, on the last rank), up to the first call's arrival
    SELECT s.job, s.step, coalesce(h.hop + 1, 1), 0, p.rank, 'compute',
           least(p.start_ns, coalesce(h.moving_ns, s.end_ns)),
           coalesce(h.moving_ns, s.end_ns), NULL, NULL, NULL, NULL, NULL
    FROM _path_start s
    LEFT JOIN hops h ON h.job = s.job AND h.step = s.step AND h.first_call
    JOIN _path_steps p
      ON p.job = s.job AND p.step = s.step AND p.rank = coalesce(h.late_rank, s.rank)
)
SELECT job, step,
       row_number() OVER (PARTITION BY job, step ORDER BY hop DESC, part) - 1 AS position,
       rank, segment, start_ns, end_ns - start_ns AS dur_ns, op, parallel_dim, layer, comm,
       seq
FROM segments
WHERE end_ns > start_ns;
