-- The diff of two jobs, as views over each job's side (side.sql's results, kept as tables
-- a_<name> for job A and b_<name> for job B). Rows are matched on their key (parallel
-- dimension, op, phase, layer; metric; op or kernel name); a key only one job has is in the
-- diff with the other job's calls and bytes 0 and its times null, and `found` says which
-- (both, a, b). Changes are B - A.

-- diff_layers: per parallel dimension, op, phase and layer: calls, bytes, bytes per token and
-- time per step, waiting versus transferring, achieved bus bandwidth, A next to B.
CREATE VIEW diff_layers AS
SELECT coalesce(a.parallel_dim, b.parallel_dim) AS parallel_dim,
       coalesce(a.op, b.op) AS op, coalesce(a.phase, b.phase) AS phase,
       coalesce(a.layer, b.layer) AS layer,
       CASE WHEN a.op IS NULL THEN 'b' WHEN b.op IS NULL THEN 'a' ELSE 'both' END AS found,
       coalesce(a.calls, 0) AS calls_a, coalesce(b.calls, 0) AS calls_b,
       coalesce(a.bytes, 0) AS bytes_a, coalesce(b.bytes, 0) AS bytes_b,
       coalesce(b.bytes, 0) - coalesce(a.bytes, 0) AS bytes_change,
       coalesce(a.bytes, 0) / nullif((SELECT tokens_per_step FROM a_facts), 0)
           AS bytes_per_token_a,
       coalesce(b.bytes, 0) / nullif((SELECT tokens_per_step FROM b_facts), 0)
           AS bytes_per_token_b,
       a.time_ns AS time_ns_a, b.time_ns AS time_ns_b, b.time_ns - a.time_ns AS time_change_ns,
       a.wait_ns AS wait_ns_a, b.wait_ns AS wait_ns_b,
       a.transfer_ns AS transfer_ns_a, b.transfer_ns AS transfer_ns_b,
       (SELECT busbw_gbps FROM a_busbw x WHERE x.parallel_dim IS NOT DISTINCT FROM a.parallel_dim
        AND x.op = a.op AND x.phase IS NOT DISTINCT FROM a.phase AND x.layer = a.layer)
           AS busbw_gbps_a,
       (SELECT busbw_gbps FROM b_busbw x WHERE x.parallel_dim IS NOT DISTINCT FROM b.parallel_dim
        AND x.op = b.op AND x.phase IS NOT DISTINCT FROM b.phase AND x.layer = b.layer)
           AS busbw_gbps_b
FROM a_layers a
FULL JOIN b_layers b ON a.parallel_dim IS NOT DISTINCT FROM b.parallel_dim AND a.op = b.op
    AND a.phase IS NOT DISTINCT FROM b.phase AND a.layer = b.layer;

-- diff_traffic: diff_layers summed over layers (per parallel dimension, op and phase), with
-- the achieved bus bandwidth of all its instances and the analytic model's predicted bytes
-- of each job where it has a job.yaml.
CREATE VIEW diff_traffic AS
WITH t AS (
    SELECT parallel_dim, op, phase,
           CASE WHEN bool_and(found = 'both') THEN 'both' WHEN bool_and(found = 'a') THEN 'a'
                WHEN bool_and(found = 'b') THEN 'b' ELSE 'both' END AS found,
           sum(calls_a) AS calls_a, sum(calls_b) AS calls_b,
           sum(bytes_a) AS bytes_a, sum(bytes_b) AS bytes_b, sum(bytes_change) AS bytes_change,
           sum(bytes_per_token_a) AS bytes_per_token_a,
           sum(bytes_per_token_b) AS bytes_per_token_b,
           sum(time_ns_a) AS time_ns_a, sum(time_ns_b) AS time_ns_b,
           sum(wait_ns_a) AS wait_ns_a, sum(wait_ns_b) AS wait_ns_b,
           sum(transfer_ns_a) AS transfer_ns_a, sum(transfer_ns_b) AS transfer_ns_b
    FROM diff_layers GROUP BY ALL
),
bw AS (  -- (over every layer, one it shares with no call too)
    SELECT 'a' AS side, parallel_dim, op, phase,
           achieved_busbw(busbw_gbps, min_dur_ns) AS busbw_gbps
    FROM a_busbw GROUP BY ALL
    UNION ALL
    SELECT 'b', parallel_dim, op, phase, achieved_busbw(busbw_gbps, min_dur_ns)
    FROM b_busbw GROUP BY ALL
)
SELECT t.* EXCLUDE (time_ns_a, time_ns_b, wait_ns_a, wait_ns_b, transfer_ns_a, transfer_ns_b),
       t.time_ns_a, t.time_ns_b, t.time_ns_b - t.time_ns_a AS time_change_ns,
       t.wait_ns_a, t.wait_ns_b, t.transfer_ns_a, t.transfer_ns_b,
       ba.busbw_gbps AS busbw_gbps_a, bb.busbw_gbps AS busbw_gbps_b,
       pa.predicted_bytes AS predicted_bytes_a, pb.predicted_bytes AS predicted_bytes_b
FROM t
LEFT JOIN bw ba ON ba.side = 'a' AND ba.parallel_dim IS NOT DISTINCT FROM t.parallel_dim
    AND ba.op = t.op AND ba.phase IS NOT DISTINCT FROM t.phase
LEFT JOIN bw bb ON bb.side = 'b' AND bb.parallel_dim IS NOT DISTINCT FROM t.parallel_dim
    AND bb.op = t.op AND bb.phase IS NOT DISTINCT FROM t.phase
LEFT JOIN a_predicted pa ON pa.parallel_dim IS NOT DISTINCT FROM t.parallel_dim
    AND pa.op = t.op AND pa.phase IS NOT DISTINCT FROM t.phase
LEFT JOIN b_predicted pb ON pb.parallel_dim IS NOT DISTINCT FROM t.parallel_dim
    AND pb.op = t.op AND pb.phase IS NOT DISTINCT FROM t.phase;

-- diff_predicted: when both jobs have a prediction (a job.yaml at link), per parallel
-- dimension and op: the bytes per step the model predicts for each and the change it
-- predicts, next to the observed bytes and change ("tp all_reduce should add 2.1 GB per
-- step; observed +2.0 GB"); empty otherwise.
CREATE VIEW diff_predicted AS
WITH p AS (
    SELECT coalesce(a.parallel_dim, b.parallel_dim) AS parallel_dim, coalesce(a.op, b.op) AS op,
           coalesce(a.predicted_bytes, 0) AS predicted_a, coalesce(b.predicted_bytes, 0) AS predicted_b
    FROM (SELECT parallel_dim, op, sum(predicted_bytes) AS predicted_bytes
          FROM a_predicted GROUP BY ALL) a
    FULL JOIN (SELECT parallel_dim, op, sum(predicted_bytes) AS predicted_bytes
               FROM b_predicted GROUP BY ALL) b
        ON a.parallel_dim IS NOT DISTINCT FROM b.parallel_dim AND a.op = b.op
),
o AS (
    SELECT parallel_dim, op, sum(bytes_a) AS observed_a, sum(bytes_b) AS observed_b
    FROM diff_layers GROUP BY ALL
)
SELECT coalesce(p.parallel_dim, o.parallel_dim) AS parallel_dim, coalesce(p.op, o.op) AS op,
       coalesce(p.predicted_a, 0) AS predicted_bytes_a,
       coalesce(p.predicted_b, 0) AS predicted_bytes_b,
       coalesce(p.predicted_b, 0) - coalesce(p.predicted_a, 0) AS predicted_change,
       coalesce(o.observed_a, 0) AS observed_bytes_a, coalesce(o.observed_b, 0) AS observed_bytes_b,
       coalesce(o.observed_b, 0) - coalesce(o.observed_a, 0) AS observed_change
FROM p
FULL JOIN o ON p.parallel_dim IS NOT DISTINCT FROM o.parallel_dim AND p.op = o.op
WHERE (SELECT predicted FROM a_facts) AND (SELECT predicted FROM b_facts);

-- diff_steps: a step's time per rank and its breakdown (step_ns; each timeline's window,
-- compute, overlapped and exposed communication, idle; the collectives' time, waiting and
-- transferring; the waiting the step's straggler caused), tokens and bytes per step, A next
-- to B with the change and its share of A.
CREATE VIEW diff_steps AS
WITH a AS (
    SELECT metric, timeline, value FROM a_step_time
    UNION ALL SELECT 'tokens', 'step', tokens_per_step FROM a_facts
    UNION ALL SELECT 'bytes', 'step', sum(bytes) FROM a_layers
),
b AS (
    SELECT metric, timeline, value FROM b_step_time
    UNION ALL SELECT 'tokens', 'step', tokens_per_step FROM b_facts
    UNION ALL SELECT 'bytes', 'step', sum(bytes) FROM b_layers
)
SELECT coalesce(a.metric, b.metric) AS metric, coalesce(a.timeline, b.timeline) AS timeline,
       a.value AS a, b.value AS b, b.value - a.value AS change,
       (b.value - a.value) / nullif(a.value, 0) AS change_share
FROM a FULL JOIN b ON a.metric = b.metric AND a.timeline = b.timeline;

-- diff_ops: per GPU kernel and host op name, calls and time per step and rank, A next to B:
-- the 15 largest time changes of each kind (names of one job only included), largest
-- first, as Holistic Trace Analysis' and TraceLens' trace diffs list them.
CREATE VIEW diff_ops AS
SELECT coalesce(a.kind, b.kind) AS kind, coalesce(a.name, b.name) AS name,
       CASE WHEN a.name IS NULL THEN 'b' WHEN b.name IS NULL THEN 'a' ELSE 'both' END AS found,
       coalesce(a.calls, 0) AS calls_a, coalesce(b.calls, 0) AS calls_b,
       coalesce(a.time_ns, 0) AS time_ns_a, coalesce(b.time_ns, 0) AS time_ns_b,
       coalesce(b.time_ns, 0) - coalesce(a.time_ns, 0) AS time_change_ns
FROM a_op_time a FULL JOIN b_op_time b ON a.kind = b.kind AND a.name = b.name
QUALIFY row_number() OVER (PARTITION BY coalesce(a.kind, b.kind)
                           ORDER BY abs(coalesce(b.time_ns, 0) - coalesce(a.time_ns, 0)) DESC,
                                    coalesce(a.name, b.name)) <= 15
ORDER BY kind, abs(time_change_ns) DESC, name;
