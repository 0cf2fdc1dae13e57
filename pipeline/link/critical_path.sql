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
-- reads: collective_waits, clock_offsets, steps
-- creates: critical_path

-- Calls with a step, on the aligned clock: when each one's data began to move and ended.
CREATE TEMP TABLE _path_calls AS
SELECT job, step, rank, aligned_start_ns + wait_ns AS moving_ns,
       aligned_start_ns + dur_ns AS end_ns, late_rank, op, parallel_dim, layer, comm, seq
FROM collective_waits WHERE step IS NOT NULL;

-- Each rank's step on the aligned clock (steps of the job's timed source, as the calls).
CREATE TEMP TABLE _path_steps AS
SELECT s.job, s.step, s.rank, min(s.start_ns - o.offset_ns) AS start_ns,
       max(s.end_ns - o.offset_ns) AS end_ns
FROM steps s JOIN clock_offsets o USING (job, rank)
SEMI JOIN (SELECT DISTINCT job, source FROM collective_waits) w USING (job, source)
WHERE s.step IS NOT NULL
GROUP BY ALL;

-- The walk: each hop leaves (rank, t) for the call found there, or ends the step.
CREATE TEMP TABLE _path_walk AS
WITH RECURSIVE walk(job, step, hop, rank, t, done, from_rank, from_t, moving_ns, end_ns,
                    op, parallel_dim, layer, comm, seq) AS (
    SELECT job, step, 0, arg_max(rank, (end_ns, -rank)), max(end_ns), false,
           NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT, NULL::VARCHAR,
           NULL::VARCHAR, NULL::VARCHAR, NULL::VARCHAR, NULL::BIGINT
    FROM _path_steps GROUP BY job, step
    UNION ALL
    SELECT w.job, w.step, w.hop + 1, coalesce(c.late_rank, w.rank),
           coalesce(least(c.moving_ns, w.t - 1), w.t), c.end_ns IS NULL, w.rank, w.t, c.moving_ns,
           c.end_ns, c.op, c.parallel_dim, c.layer, c.comm, c.seq
    FROM walk w
    -- (an as-of join: the call of the greatest end_ns at or before t, found by a merge
    -- rather than a search per row)
    ASOF LEFT JOIN _path_calls c
      ON c.job = w.job AND c.step = w.step AND c.rank = w.rank AND c.end_ns <= w.t
    WHERE NOT w.done
)
SELECT * FROM walk WHERE hop > 0;

CREATE TEMP TABLE critical_path AS
WITH segments AS (
    -- compute on the rank the hop left: from the call's end (or its step's start) to t
    SELECT w.job, w.step, w.hop, 1 AS part, w.from_rank AS rank, 'compute' AS segment,
           coalesce(w.end_ns, least(s.start_ns, w.from_t)) AS start_ns, w.from_t AS end_ns,
           NULL AS op, NULL AS parallel_dim, NULL AS layer, NULL AS comm, NULL::BIGINT AS seq
    FROM _path_walk w
    LEFT JOIN _path_steps s ON s.job = w.job AND s.step = w.step AND s.rank = w.from_rank
    UNION ALL
    -- the transfer of the call found
    SELECT job, step, hop, 0, from_rank, 'transfer', moving_ns, end_ns, op, parallel_dim,
           layer, comm, seq
    FROM _path_walk WHERE NOT done
)
SELECT job, step,
       row_number() OVER (PARTITION BY job, step ORDER BY hop DESC, part) - 1 AS position,
       rank, segment, start_ns, end_ns - start_ns AS dur_ns, op, parallel_dim, layer, comm,
       seq
FROM segments
WHERE end_ns > start_ns;
