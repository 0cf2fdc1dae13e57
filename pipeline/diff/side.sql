-- One job's side of a diff: what `tokenwire diff` compares, aggregated per training step in
-- the job's own dataset (run on a read-only connection of that dataset, $job the job).
-- Counts and bytes are per step summed over all ranks (as token_wire); times are per step and
-- rank (the mean over the steps of the ranks that have the times), so that jobs of different
-- world sizes compare.
-- Only what lies in a training step counts: calls outside the profiled steps have no step to
-- be per.

-- name: steps
-- _side_steps: the job's training steps (of any source that places rows in steps), and the
-- ranks of each.
CREATE TEMP TABLE _side_steps AS
SELECT DISTINCT step FROM (
    SELECT step FROM steps WHERE job = $job AND step IS NOT NULL
    UNION ALL
    SELECT step FROM collective_links WHERE job = $job AND step IS NOT NULL
);

-- name: facts
-- facts: the job's steps and ranks, and tokens per step (token_wire's: the job.yaml's global
-- batch, else the tokens its embeddings saw).
SELECT (SELECT count(*) FROM _side_steps) AS steps,
       (SELECT count(DISTINCT rank) FROM collectives WHERE job = $job) AS ranks,
       (SELECT avg(tokens) FROM (SELECT step, any_value(tokens) AS tokens FROM token_wire
                                 WHERE job = $job AND step IS NOT NULL GROUP BY step))
           AS tokens_per_step,
       (SELECT count(*) > 0 FROM predictions WHERE job = $job) AS predicted;

-- name: layers
-- layers: per parallel dimension, op, phase and layer ('(none)' where link found no layer):
-- calls and bytes per step from each rank's primary source (as token_wire counts them), and
-- the time, waiting and transferring of the calls per step and rank (collective_waits, the
-- job's timed source; its instances carry the layer of their lowest rank).
WITH n AS (  -- (times are per rank of the timed source: the ranks it has calls of)
    SELECT greatest(count(*), 1) AS steps,
           greatest((SELECT count(DISTINCT rank) FROM collective_waits WHERE job = $job), 1)
               AS ranks
    FROM _side_steps
),
calls AS (
    SELECT l.parallel_dim, l.op, l.phase, coalesce(l.layer, '(none)') AS layer,
           count(*) AS calls, sum(l.bytes) AS bytes
    FROM collectives_linked l JOIN primary_sources p USING (job, rank, source)
    WHERE l.job = $job AND l.step IS NOT NULL
    GROUP BY ALL
),
waits AS (
    SELECT parallel_dim, op, phase, coalesce(layer, '(none)') AS layer,
           sum(dur_ns) AS time_ns, sum(wait_ns) AS wait_ns, sum(transfer_ns) AS transfer_ns
    FROM collective_waits
    WHERE job = $job AND step IS NOT NULL
    GROUP BY ALL
)
SELECT coalesce(c.parallel_dim, w.parallel_dim) AS parallel_dim, coalesce(c.op, w.op) AS op,
       coalesce(c.phase, w.phase) AS phase, coalesce(c.layer, w.layer) AS layer,
       coalesce(c.calls, 0) / n.steps AS calls,
       coalesce(c.bytes, 0) / n.steps AS bytes,
       w.time_ns / (n.steps * n.ranks) AS time_ns,
       w.wait_ns / (n.steps * n.ranks) AS wait_ns,
       w.transfer_ns / (n.steps * n.ranks) AS transfer_ns
FROM calls c
FULL JOIN waits w ON c.parallel_dim IS NOT DISTINCT FROM w.parallel_dim AND c.op = w.op
    AND c.phase IS NOT DISTINCT FROM w.phase AND c.layer = w.layer
CROSS JOIN n;

-- name: busbw
-- busbw: the achieved bus bandwidth per parallel dimension, op and phase, and per layer
-- (collective_instances of the job's timed source): bus bytes over transfer time, in GB/s
-- (achieved_busbw, dataset/measures.sql).
SELECT parallel_dim, op, phase, coalesce(layer, '(none)') AS layer,
       achieved_busbw(busbw_gbps, min_dur_ns) AS busbw_gbps,
       sum(min_dur_ns) AS min_dur_ns
FROM collective_instances
WHERE job = $job AND step IS NOT NULL AND busbw_gbps IS NOT NULL AND min_dur_ns > 0
    AND source IN (SELECT DISTINCT source FROM collective_waits WHERE job = $job)
GROUP BY ALL;

-- name: predicted
-- predicted: the analytic model's calls and bytes per step over all ranks, per parallel
-- dimension, op and phase (token_wire's predicted columns; none without a job.yaml).
SELECT parallel_dim, op, phase, avg(predicted_calls) AS predicted_calls,
       avg(predicted_bytes) AS predicted_bytes
FROM token_wire
WHERE job = $job AND predicted_bytes IS NOT NULL
GROUP BY ALL;

-- name: step_time
-- step_time: a step's time per rank and its breakdown, as metric rows: the step's duration
-- (steps, each rank's most trusted source), the time_breakdown of each timeline (gpu: kernels;
-- host: CPU ops and gloo work), the collectives' time, waiting and transferring, and the
-- waiting that each step's straggler caused the others (step_stragglers).
WITH n AS (  -- (times are per rank of the timed source: the ranks it has calls of)
    SELECT greatest(count(*), 1) AS steps,
           greatest((SELECT count(DISTINCT rank) FROM collective_waits WHERE job = $job), 1)
               AS ranks
    FROM _side_steps
),
step_rows AS (
    SELECT s.* FROM steps s
    JOIN (SELECT rank, arg_min(source, source_preference(source)) AS source
          FROM steps WHERE job = $job GROUP BY rank) p USING (rank, source)
    WHERE s.job = $job AND s.step IS NOT NULL
),
breakdown AS (
    UNPIVOT (SELECT timeline, avg(window_ns) AS window_ns, avg(compute_ns) AS compute_ns,
                    avg(overlapped_comm_ns) AS overlapped_comm_ns,
                    avg(exposed_comm_ns) AS exposed_comm_ns, avg(idle_ns) AS idle_ns
             FROM time_breakdown WHERE job = $job GROUP BY timeline)
    ON window_ns, compute_ns, overlapped_comm_ns, exposed_comm_ns, idle_ns
    INTO NAME metric VALUE value
)
SELECT 'step_ns' AS metric, 'steps' AS timeline, avg(dur_ns) AS value FROM step_rows
UNION ALL
SELECT metric, timeline, value FROM breakdown
UNION ALL
SELECT m.metric, 'collectives', m.value FROM (
    SELECT sum(dur_ns) / any_value(n.steps * n.ranks) AS collective_ns,
           sum(wait_ns) / any_value(n.steps * n.ranks) AS wait_ns,
           sum(transfer_ns) / any_value(n.steps * n.ranks) AS transfer_ns
    FROM collective_waits CROSS JOIN n WHERE job = $job AND step IS NOT NULL
) UNPIVOT INCLUDE NULLS (value FOR metric IN (collective_ns, wait_ns, transfer_ns)) m
UNION ALL
SELECT 'straggler_wait_ns', 'stragglers', sum(caused_wait_ns) / any_value(n.steps * n.ranks)
FROM step_stragglers CROSS JOIN n WHERE job = $job;

-- name: op_time
-- op_time: per GPU kernel name (each rank's primary kernel source) and per host op name
-- (cpu_op, the operators Holistic Trace Analysis and TraceLens compare; of the job's most
-- trusted source of them), calls and time per step and rank (of the ranks that have such
-- rows); a name's nested calls count in its own and its callers' time.
WITH n AS (SELECT greatest(count(*), 1) AS steps FROM _side_steps),
op_source AS (
    SELECT arg_min(source, source_preference(source)) AS source FROM ops
    WHERE job = $job AND kind = 'cpu_op'
),
kernel_rows AS (
    SELECT k.name, k.rank, k.dur_ns FROM kernels k
    JOIN primary_kernel_sources p USING (job, rank, source)
    WHERE k.job = $job AND k.step IS NOT NULL
),
op_rows AS (
    SELECT o.name, o.rank, o.dur_ns FROM ops o
    WHERE o.job = $job AND o.kind = 'cpu_op' AND o.step IS NOT NULL
        AND o.source = (SELECT source FROM op_source)
)
SELECT 'kernel' AS kind, name,
       count(*) / (any_value(n.steps) * (SELECT count(DISTINCT rank) FROM kernel_rows)) AS calls,
       sum(dur_ns) / (any_value(n.steps) * (SELECT count(DISTINCT rank) FROM kernel_rows))
           AS time_ns
FROM kernel_rows CROSS JOIN n GROUP BY name
UNION ALL
SELECT 'cpu_op', name,
       count(*) / (any_value(n.steps) * (SELECT count(DISTINCT rank) FROM op_rows)),
       sum(dur_ns) / (any_value(n.steps) * (SELECT count(DISTINCT rank) FROM op_rows))
FROM op_rows CROSS JOIN n GROUP BY name;
