-- collective_links, completed across ranks: a call that nothing of its own rank places in a
-- step (a rank that was not profiled, seen only in its NCCL log or flight recorder dump)
-- takes the step, phase and layer of the same collective on the ranks that were
-- (_source_instances), and says so (attributed_by 'instance'). Jobs where only some
-- ranks ran the profiler then count every rank's calls in the right step.
-- (The table built since collective_links.sql, taken under its final name.)
--
-- reads: _instance_rows, _layer_index, _layer_names, _links_keyed, _source_instances
-- creates: collective_links
-- takes: _links_keyed

-- The calls nothing placed yet (in a fully profiled job, few or none: every statement
-- below then has next to nothing to do).
ALTER TABLE _links_keyed RENAME TO collective_links;

CREATE TEMP TABLE _unplaced AS
SELECT job, rank, source, file_id, collective_id FROM collective_links WHERE step IS NULL;

CREATE TEMP TABLE _instance_fill AS
SELECT u.job, u.rank, u.source, u.file_id, u.collective_id, i.step, i.phase, i.layer,
       i.layer_kind, n.layer_label
FROM _unplaced u
JOIN _instance_rows r USING (job, rank, source, file_id, collective_id)
JOIN _source_instances i
  ON i.job = r.job AND i.source = r.source AND i.comm IS NOT DISTINCT FROM r.instance_comm
 AND i.seq = r.instance_seq
LEFT JOIN _layer_names n ON n.job = i.job AND n.layer = i.layer
WHERE i.step IS NOT NULL;

UPDATE collective_links l
SET step = f.step, step_from = 'instance', phase = f.phase,
    layer = coalesce(l.layer, f.layer),
    layer_index = coalesce(l.layer_index, _layer_index(f.layer)),
    layer_kind = coalesce(l.layer_kind, f.layer_kind),
    layer_label = coalesce(l.layer_label, f.layer_label), attributed_by = 'instance'
FROM _instance_fill f
WHERE l.job = f.job AND l.rank = f.rank AND l.source = f.source AND l.file_id = f.file_id
  AND l.collective_id = f.collective_id;

-- Calls still without a step whose communicator had no profiled rank at all (a pipeline
-- stage or a node left out of profiling) are placed by their order in their own rank's
-- record: an NCCL log or a flight recorder dump lists the calls in the order the rank issued
-- them (collective_id), so a call between two calls of step s and step s' (s <= s') belongs
-- to step s. Before the first and after the last placed call, a record may reach into steps
-- the profiler did not see: there the first and last step take only as many calls as the
-- rank's fullest step had (training steps repeat the same calls), the closest ones first.
CREATE TEMP TABLE _order_steps AS
WITH ordered AS (
    SELECT job, rank, source, file_id, collective_id, step,
           last_value(step IGNORE NULLS) OVER (
               PARTITION BY job, rank, source, file_id ORDER BY collective_id
               ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS step_before,
           first_value(step IGNORE NULLS) OVER (
               PARTITION BY job, rank, source, file_id ORDER BY collective_id
               ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS step_after
    FROM collective_links
    SEMI JOIN (SELECT DISTINCT job, rank, source, file_id FROM collective_links
               WHERE step IS NULL AND source IN ('nccl_log', 'flight_recorder')) r
         USING (job, rank, source, file_id)
),
placed AS (
    SELECT *, CASE WHEN step IS NULL AND step_before IS NOT NULL AND step_after IS NOT NULL
                   THEN step_before END AS between_step
    FROM ordered
),
steps_of_record AS (
    SELECT job, rank, source, file_id, coalesce(step, between_step) AS step, count(*) AS calls
    FROM placed WHERE coalesce(step, between_step) IS NOT NULL
    GROUP BY ALL
),
record AS (
    SELECT job, rank, source, file_id, max(calls) AS fullest,
           min(step) AS first_step, arg_min(calls, step) AS first_calls,
           max(step) AS last_step, arg_max(calls, step) AS last_calls
    FROM steps_of_record GROUP BY ALL
),
edges AS (
    SELECT p.job, p.rank, p.source, p.file_id, p.collective_id, p.step_before, p.step_after,
           row_number() OVER (PARTITION BY p.job, p.rank, p.source, p.file_id,
                                           p.step_before IS NULL
                              ORDER BY CASE WHEN p.step_before IS NULL THEN -p.collective_id
                                            ELSE p.collective_id END) AS k
    FROM placed p
    WHERE p.step IS NULL AND (p.step_before IS NULL OR p.step_after IS NULL)
)
SELECT job, rank, source, file_id, collective_id, between_step AS step
FROM placed WHERE between_step IS NOT NULL
UNION ALL
SELECT e.job, e.rank, e.source, e.file_id, e.collective_id,
       CASE WHEN e.step_before IS NULL THEN r.first_step ELSE r.last_step END
FROM edges e
JOIN record r USING (job, rank, source, file_id)
WHERE e.step_before IS NULL AND e.step_after IS NOT NULL AND e.k <= r.fullest - r.first_calls
   OR e.step_after IS NULL AND e.step_before IS NOT NULL AND e.k <= r.fullest - r.last_calls;

UPDATE collective_links l
SET step = o.step, step_from = 'log_order'
FROM _order_steps o
WHERE l.job = o.job AND l.rank = o.rank AND l.source = o.source AND l.file_id = o.file_id
  AND l.collective_id = o.collective_id;
