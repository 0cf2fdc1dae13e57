-- time_breakdown: where one rank's time went in one step: compute alone, communication
-- overlapped with compute, communication exposed (nothing else running), and idle. One row
-- per job, rank and step.
-- GPU timeline when the rank has kernels in the step (comm = NCCL kernels, compute = all
-- other GPU work); otherwise the host timeline (comm = the collectives' execution, e.g. gloo
-- work; compute = aten ops on threads that run no collective). The window runs from the
-- step's start to the end of its last activity. A sweep over interval boundaries counts the
-- running compute and comm intervals, so nested and overlapping intervals are not counted
-- twice.

CREATE VIEW _gpu_steps AS
SELECT DISTINCT job, rank, step FROM kernels WHERE step IS NOT NULL;

-- Every interval once, with 1/0 flags for its class (read by the sweep below twice: for its
-- starts and for its ends).
CREATE TEMP TABLE _activity AS
SELECT job, rank, step, start_ns, end_ns, CASE WHEN kind = 'comm' THEN 0 ELSE 1 END AS compute,
       CASE WHEN kind = 'comm' THEN 1 ELSE 0 END AS comm, 'gpu' AS timeline
FROM kernels WHERE step IS NOT NULL
UNION ALL
SELECT c.job, c.rank, c.step, c.start_ns, c.end_ns, 0, 1, 'host'
FROM collectives c ANTI JOIN _gpu_steps g USING (job, rank, step)
WHERE c.step IS NOT NULL AND c.start_ns IS NOT NULL AND c.end_ns IS NOT NULL
UNION ALL
SELECT o.job, o.rank, o.step, o.start_ns, o.end_ns, 1, 0, 'host'
FROM ops o ANTI JOIN _gpu_steps g USING (job, rank, step)
WHERE o.step IS NOT NULL AND o.kind = 'cpu_op' AND o.name LIKE 'aten::%'
  AND o.tid NOT IN (SELECT DISTINCT stream FROM collectives c2
                    WHERE c2.job = o.job AND c2.rank = o.rank AND c2.stream IS NOT NULL);

-- Interval starts count +1, ends -1 (a union of two scans: 2x faster than a LATERAL
-- unnest of each row into two).
CREATE VIEW _bounds AS
SELECT job, rank, step, timeline, start_ns AS t, compute AS dc, comm AS dm FROM _activity
UNION ALL
SELECT job, rank, step, timeline, end_ns, -compute, -comm FROM _activity
UNION ALL
SELECT s.job, s.rank, s.step, a.timeline, s.start_ns, 0, 0
FROM steps s
JOIN (SELECT DISTINCT job, rank, step, timeline FROM _activity) a USING (job, rank, step);

CREATE VIEW _segments AS
SELECT job, rank, step, timeline,
       sum(dc) OVER w AS computing, sum(dm) OVER w AS communicating,
       lead(t) OVER w - t AS len_ns
FROM _bounds
WINDOW w AS (PARTITION BY job, rank, step, timeline ORDER BY t, dc + dm
             ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW);

CREATE TEMP TABLE time_breakdown AS
SELECT job, rank, step, timeline,
       CAST(sum(len_ns) AS BIGINT) AS window_ns,
       CAST(coalesce(sum(len_ns) FILTER (computing > 0 AND communicating = 0), 0) AS BIGINT)
           AS compute_ns,
       CAST(coalesce(sum(len_ns) FILTER (computing > 0 AND communicating > 0), 0) AS BIGINT)
           AS overlapped_comm_ns,
       CAST(coalesce(sum(len_ns) FILTER (computing = 0 AND communicating > 0), 0) AS BIGINT)
           AS exposed_comm_ns,
       CAST(coalesce(sum(len_ns) FILTER (computing = 0 AND communicating = 0), 0) AS BIGINT)
           AS idle_ns
FROM _segments
WHERE len_ns IS NOT NULL
GROUP BY ALL;
