-- The timeline's rows: what `tokenwire export` reads from a linked dataset. Each query starts
-- with `-- name: <name>` and a comment saying what it answers. `scope` runs first and makes
-- the one-row table `_export_scope` (job, steps, window) that the others read, beside
-- `_export_ranks` (the ranks asked for), which pipeline/export/timeline.py registers. Every
-- time that leaves here is on the job's aligned clock: the rank's clock_offsets.offset_ns
-- subtracted (clock_offsets.sql), so that the ranks of several hosts line up.

-- name: jobs
-- Which jobs the dataset holds ranks of (a small table; a job of nccl-tests output alone has
-- none, and nothing to put on a timeline).
SELECT job FROM ranks GROUP BY job ORDER BY job;

-- name: linked
-- Whether the job has been linked: its collectives, and the rows link derived from them
-- (ingesting more files drops the derived tables until the next link).
SELECT (SELECT count(*) FROM collectives WHERE job = $job) AS collectives,
       (SELECT count(*) FROM collective_links WHERE job = $job) AS links,
       (SELECT count(*) FROM clock_offsets WHERE job = $job) AS offsets;

-- name: job_ranks
-- The job's ranks and hosts (clock_offsets has one row per rank of the ranks table).
SELECT rank, host FROM clock_offsets WHERE job = $job ORDER BY rank;

-- name: scope
-- The export's scope as a table the queries below join: the job, the steps (inclusive range,
-- NULL = all) and the window on the aligned clock (NULL ends are open).
CREATE TEMP TABLE _export_scope AS
SELECT CAST($job AS VARCHAR) AS job, CAST($step_lo AS BIGINT) AS step_lo,
       CAST($step_hi AS BIGINT) AS step_hi, CAST($win_lo AS BIGINT) AS win_lo,
       CAST($win_hi AS BIGINT) AS win_hi;

-- name: calls
-- Every collective of the ranks and steps in scope that has a time, from one source per rank:
-- the most trusted source that timed the rank's calls (source_preference, sources.sql; an
-- NCCL log has no times). Kept as _export_calls for the queries below; the window is applied
-- by each of them, so that a phase or step crossing the window's edge keeps its full range.
CREATE TEMP TABLE _export_calls AS
WITH src AS (
    SELECT rank, arg_min(source, source_preference(source)) AS source
    FROM collectives
    WHERE job = (SELECT job FROM _export_scope) AND start_ns IS NOT NULL
      AND rank IN (SELECT rank FROM _export_ranks)
    GROUP BY rank
)
SELECT c.rank, c.source, c.collective_id, c.stream, c.op, c.parallel_dim, c.layer, c.phase,
       c.step, c.bytes, c.dtype, c.group_size, c.comm, c.pg_name, c.seq, c.algorithm,
       c.protocol,
       -- on the aligned clock
       c.start_ns - o.offset_ns AS start_ns,
       coalesce(c.dur_ns, c.end_ns - c.start_ns, 0) AS dur_ns
FROM collectives_linked c
JOIN src USING (rank, source)
JOIN clock_offsets o ON o.job = c.job AND o.rank = c.rank
CROSS JOIN _export_scope s
WHERE c.job = s.job AND c.start_ns IS NOT NULL
  AND (s.step_lo IS NULL OR c.step BETWEEN s.step_lo AND s.step_hi);

-- name: extent
-- Where the job's collectives in scope (ranks and steps, the window aside) lie on the aligned
-- clock: the window an export can take events from.
SELECT min(start_ns) AS start_ns, max(start_ns + dur_ns) AS end_ns FROM _export_calls;

-- name: untimed_ranks
-- Ranks in scope whose collectives have no times in any source (an NCCL log or a flight
-- recorder dump alone): they get no collective events.
SELECT DISTINCT rank FROM collectives
WHERE job = (SELECT job FROM _export_scope) AND rank IN (SELECT rank FROM _export_ranks)
  AND rank NOT IN (SELECT rank FROM _export_calls)
ORDER BY rank;

-- name: steps_known
-- The steps the job places anything in, on the ranks in scope (to tell an unknown --step).
SELECT DISTINCT step FROM (
    SELECT step FROM steps
    WHERE job = (SELECT job FROM _export_scope) AND rank IN (SELECT rank FROM _export_ranks)
    UNION ALL
    SELECT step FROM collective_links
    WHERE job = (SELECT job FROM _export_scope) AND rank IN (SELECT rank FROM _export_ranks)
) WHERE step IS NOT NULL ORDER BY step;

-- name: collectives
-- One row per collective event: the call in _export_calls inside the window, with the tokens
-- its rank processed in the step (steps.tokens) and, where collective_waits matched the call
-- to its instance, the instance (communicator and sequence number, which the flows connect),
-- the time it waited for the last rank and the time it moved data.
WITH tokens AS (
    SELECT rank, step, arg_min(tokens, source_preference(source)) AS tokens
    FROM steps WHERE job = (SELECT job FROM _export_scope) GROUP BY ALL
)
SELECT c.rank, c.stream, c.start_ns, c.dur_ns, c.op, c.parallel_dim, c.layer, c.phase, c.step,
       c.bytes, t.tokens, c.comm, c.pg_name, c.seq, c.dtype, c.group_size, c.algorithm,
       c.protocol, c.source, w.comm AS instance_comm, w.seq AS instance_seq, w.wait_ns,
       w.transfer_ns, w.late_rank
FROM _export_calls c
CROSS JOIN _export_scope s
LEFT JOIN tokens t ON t.rank = c.rank AND t.step = c.step
LEFT JOIN collective_waits w
    ON w.job = s.job AND w.rank = c.rank AND w.source = c.source
   AND w.collective_id = c.collective_id
WHERE (s.win_lo IS NULL OR c.start_ns + c.dur_ns >= s.win_lo)
  AND (s.win_hi IS NULL OR c.start_ns <= s.win_hi);

-- name: steps
-- One row per step range of a rank: the steps table's (its most trusted source), and, for a
-- rank without any (one known from NCCL logs only), the span of its collectives that link
-- placed in each step.
WITH own AS (
    SELECT st.rank, st.step, st.start_ns - o.offset_ns AS start_ns, st.dur_ns, st.tokens,
           'steps' AS range_from,
           row_number() OVER (PARTITION BY st.rank, st.step
                              ORDER BY source_preference(st.source), st.file_id) AS pick
    FROM steps st
    JOIN clock_offsets o ON o.job = st.job AND o.rank = st.rank
    CROSS JOIN _export_scope s
    WHERE st.job = s.job AND st.rank IN (SELECT rank FROM _export_ranks)
      AND (s.step_lo IS NULL OR st.step BETWEEN s.step_lo AND s.step_hi)
),
spans AS (
    SELECT rank, step, min(start_ns) AS start_ns, max(start_ns + dur_ns) - min(start_ns) AS dur_ns,
           CAST(NULL AS BIGINT) AS tokens, 'collectives' AS range_from
    FROM _export_calls
    WHERE step IS NOT NULL AND rank NOT IN (SELECT rank FROM own)
    GROUP BY ALL
)
SELECT r.* FROM (SELECT * EXCLUDE (pick) FROM own WHERE pick = 1 UNION ALL SELECT * FROM spans) r
CROSS JOIN _export_scope s
WHERE (s.win_lo IS NULL OR r.start_ns + r.dur_ns >= s.win_lo)
  AND (s.win_hi IS NULL OR r.start_ns <= s.win_hi);

-- name: phases
-- One row per phase range of a rank: a run of its consecutive collectives (by start, on every
-- stream) that link placed in the same step and phase, from the first one's start to the last
-- one's end, cut at the start of the next run so that ranges never overlap. A pipeline
-- schedule (1F1B) that alternates forward and backward micro-batches shows as alternating
-- runs. The dataset has no phase boundaries of its own: a phase without collectives has none.
-- Gaps and islands: a run starts where (step, phase) differs from the previous call's; the
-- running count of starts numbers the runs.
WITH ordered AS (
    SELECT rank, collective_id, step, phase, start_ns, start_ns + dur_ns AS end_ns,
           CASE WHEN lag(step) OVER w IS NOT DISTINCT FROM step
                 AND lag(phase) OVER w IS NOT DISTINCT FROM phase THEN 0 ELSE 1 END AS starts
    FROM _export_calls
    WINDOW w AS (PARTITION BY rank ORDER BY start_ns, collective_id)
),
numbered AS (
    SELECT *, sum(starts) OVER (PARTITION BY rank ORDER BY start_ns, collective_id
                                ROWS UNBOUNDED PRECEDING) AS run
    FROM ordered
),
runs AS (
    SELECT rank, run, any_value(step) AS step, any_value(phase) AS phase,
           min(start_ns) AS start_ns, max(end_ns) AS end_ns, count(*) AS collectives
    FROM numbered GROUP BY rank, run
),
cut AS (
    SELECT rank, step, phase, start_ns, collectives,
           least(end_ns, coalesce(lead(start_ns) OVER (PARTITION BY rank ORDER BY start_ns),
                                  end_ns)) - start_ns AS dur_ns
    FROM runs
)
SELECT cut.* FROM cut
CROSS JOIN _export_scope s
WHERE (s.win_lo IS NULL OR cut.start_ns + cut.dur_ns >= s.win_lo)
  AND (s.win_hi IS NULL OR cut.start_ns <= s.win_hi);

-- name: kernels
-- One row per GPU kernel, memcpy or memset of the ranks, steps and window in scope, from the
-- rank's kernel source (primary_kernel_sources, views.sql). NCCL kernels (kind comm) are left
-- out: the collective events stand for them, on the same stream.
SELECT k.rank, k.stream, k.start_ns - o.offset_ns AS start_ns, k.dur_ns, k.name, k.kind,
       k.step, k.correlation, k.bytes
FROM kernels k
JOIN primary_kernel_sources p USING (job, rank, source)
JOIN clock_offsets o ON o.job = k.job AND o.rank = k.rank
CROSS JOIN _export_scope s
WHERE k.job = s.job AND k.kind <> 'comm' AND k.rank IN (SELECT rank FROM _export_ranks)
  AND (s.step_lo IS NULL OR k.step BETWEEN s.step_lo AND s.step_hi)
  AND (s.win_lo IS NULL OR k.end_ns - o.offset_ns >= s.win_lo)
  AND (s.win_hi IS NULL OR k.start_ns - o.offset_ns <= s.win_hi);

-- name: ops
-- One row per host range (torch op, module scope, annotation, runtime call, NVTX range) of
-- the ranks, steps and window in scope, from the rank's most trusted source of ops.
-- gpu_user_annotation ranges are the profiler's annotations on a GPU stream (their tid is the
-- stream): on_stream marks them, for a track beside that stream's.
WITH src AS (
    SELECT rank, arg_min(source, source_preference(source)) AS source
    FROM (SELECT DISTINCT rank, source FROM ops
          WHERE job = (SELECT job FROM _export_scope)
            AND rank IN (SELECT rank FROM _export_ranks))
    GROUP BY rank
)
SELECT p.rank, p.kind = 'gpu_user_annotation' AS on_stream, p.tid,
       p.start_ns - o.offset_ns AS start_ns, p.dur_ns, p.name, p.kind, p.step, p.module_path
FROM ops p
JOIN src USING (rank, source)
JOIN clock_offsets o ON o.job = p.job AND o.rank = p.rank
CROSS JOIN _export_scope s
WHERE p.job = s.job
  AND (s.step_lo IS NULL OR p.step BETWEEN s.step_lo AND s.step_hi)
  AND (s.win_lo IS NULL OR p.end_ns - o.offset_ns >= s.win_lo)
  AND (s.win_hi IS NULL OR p.start_ns - o.offset_ns <= s.win_hi);
