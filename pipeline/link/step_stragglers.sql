-- step_stragglers: who held each step back, and doing what. Per step, the rank whose late
-- arrival made the other ranks wait longest (the sum of their collective_waits.wait_ns in
-- the collectives it arrived at last), the layer and dimension of those collectives, and
-- in straggler_ops what that rank ran while the others waited: its ops and kernels in the
-- windows from the first rank's arrival to its own, on its own clock, and the layer it was
-- busy in. Each layer also by its label, collective_links' (none for a module path no
-- collective of the job was attributed to).
--
-- reads: _is_named_owner, _source_instances, clock_offsets, collective_links,
--        collective_waits, kernels, ops
-- creates: step_stragglers, straggler_ops

-- The label of each layer path of the job's collectives (collective_links.layer_label).
CREATE TEMP TABLE _straggler_labels AS
SELECT job, layer, min(layer_label) AS layer_label FROM collective_links
WHERE layer IS NOT NULL AND layer_label IS NOT NULL GROUP BY ALL;

-- The wait each late rank caused in each collective (not send/recv) it arrived at last.
CREATE TEMP TABLE _caused AS
SELECT job, step, late_rank AS rank, source, comm, seq,
       any_value(layer) AS layer, any_value(parallel_dim) AS parallel_dim,
       sum(wait_ns) AS caused_ns
FROM collective_waits
-- (a recv waiting for its send is the pipeline's schedule, not a late rank)
WHERE step IS NOT NULL AND rank <> late_rank AND op NOT IN ('send', 'recv')
GROUP BY ALL;

-- Per step and late rank: the wait it caused, and where: the layer and the dimension whose
-- collectives it delayed most, summed over them (equal sums: the first by name). The layer
-- is one of the model's: a named owner (a gradient bucket of several layers, the loss
-- report) says no place in the model.
CREATE TEMP TABLE _step_blame AS
WITH by_layer AS (
    SELECT job, step, rank, layer, sum(caused_ns) AS ns FROM _caused
    WHERE NOT _is_named_owner(layer) GROUP BY ALL
),
by_dim AS (
    SELECT job, step, rank, parallel_dim, sum(caused_ns) AS ns FROM _caused GROUP BY ALL
)
SELECT c.job, c.step, c.rank, count(*) AS delayed_collectives,
       sum(caused_ns) AS caused_wait_ns,
       (SELECT arg_max(layer, (ns, layer)) FROM by_layer l
        WHERE l.job = c.job AND l.step = c.step AND l.rank = c.rank) AS layer,
       (SELECT arg_max(parallel_dim, (ns, parallel_dim)) FROM by_dim d
        WHERE d.job = c.job AND d.step = c.step AND d.rank = c.rank) AS parallel_dim
FROM _caused c GROUP BY c.job, c.step, c.rank;

CREATE TEMP TABLE _step_straggler AS
SELECT b.job, b.step, b.rank, b.delayed_collectives, b.caused_wait_ns,
       w.wait_ns AS step_wait_ns,
       b.caused_wait_ns / nullif(w.wait_ns, 0) AS wait_share,
       b.layer, b.parallel_dim
FROM _step_blame b
JOIN (SELECT job, step, sum(wait_ns) AS wait_ns FROM collective_waits GROUP BY ALL) w
  USING (job, step)
QUALIFY row_number() OVER (PARTITION BY b.job, b.step ORDER BY b.caused_wait_ns DESC,
                           b.rank) = 1;

-- The straggler's windows on its own clock (from the first arrival to its own), merged where
-- they overlap (collectives of several communicators at once) so no moment counts twice.
CREATE TEMP TABLE _straggler_windows AS
WITH w AS (
    SELECT s.job, s.step, s.rank, c.source,
           i.first_start_ns + o.offset_ns AS start_ns,
           i.last_start_ns + o.offset_ns AS end_ns
    FROM _step_straggler s
    JOIN _caused c USING (job, step, rank)
    JOIN _source_instances i
      ON i.job = c.job AND i.source = c.source AND i.comm IS NOT DISTINCT FROM c.comm
     AND i.seq = c.seq
    JOIN clock_offsets o USING (job, rank)
    WHERE i.last_start_ns > i.first_start_ns
),
starts AS (
    SELECT *, CASE WHEN start_ns <= max(end_ns) OVER (
                  PARTITION BY job, step, rank ORDER BY start_ns, end_ns
                  ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) THEN 0 ELSE 1 END AS new
    FROM w
),
islands AS (
    SELECT *, sum(new) OVER (PARTITION BY job, step, rank ORDER BY start_ns, end_ns) AS island
    FROM starts
)
SELECT job, step, rank, any_value(source) AS source, min(start_ns) AS start_ns,
       max(end_ns) AS end_ns
FROM islands GROUP BY job, step, rank, island;

-- What the straggler ran in its windows: ops (CPU) by their own time there, the time no
-- child op covers (a module whose Python code sleeps or spins holds that time itself;
-- counting every op whole would name ProfilerStep#N), and kernels (GPU) by their time there;
-- summed by name, the five that took most per step.
CREATE TEMP TABLE straggler_ops AS
WITH rank_ops AS (
    SELECT o.* FROM ops o SEMI JOIN _straggler_windows w USING (job, rank, source)
),
op_overlap AS (
    -- (a window is one row of _straggler_windows: its rowid, one key where four would do)
    SELECT w.job, w.step, w.rank, w.rowid AS window_row, o.file_id, o.op_id, o.parent_id,
           o.name, o.module_path,
           least(o.end_ns, w.end_ns) - greatest(o.start_ns, w.start_ns) AS overlap_ns
    FROM _straggler_windows w
    JOIN rank_ops o
      ON o.job = w.job AND o.rank = w.rank AND o.source = w.source
     AND o.start_ns < w.end_ns AND o.end_ns > w.start_ns
),
children AS (
    SELECT window_row, file_id, parent_id AS op_id, sum(overlap_ns) AS child_ns
    FROM op_overlap WHERE parent_id IS NOT NULL GROUP BY ALL
),
activity AS (
    SELECT o.job, o.step, o.rank, 'op' AS what, o.name, o.module_path AS layer,
           o.overlap_ns - coalesce(c.child_ns, 0) AS overlap_ns
    FROM op_overlap o
    LEFT JOIN children c USING (window_row, file_id, op_id)
    UNION ALL
    SELECT w.job, w.step, w.rank, 'kernel', k.name, k.nvtx_range,
           least(k.end_ns, w.end_ns) - greatest(k.start_ns, w.start_ns)
    FROM _straggler_windows w
    JOIN kernels k
      ON k.job = w.job AND k.rank = w.rank AND k.source = w.source
     AND k.start_ns < w.end_ns AND k.end_ns > w.start_ns
),
totals AS (
    SELECT job, step, rank, what, name, arg_max(layer, overlap_ns) AS layer,
           sum(overlap_ns) AS overlap_ns
    FROM activity GROUP BY job, step, rank, what, name
)
SELECT t.job, t.step, t.rank, t.what, t.name, t.layer, n.layer_label, t.overlap_ns,
       t.overlap_ns / nullif(g.window_ns, 0) AS window_share
FROM totals t
JOIN (SELECT job, step, rank, sum(end_ns - start_ns) AS window_ns
      FROM _straggler_windows GROUP BY ALL) g USING (job, step, rank)
LEFT JOIN _straggler_labels n ON n.job = t.job AND n.layer = t.layer
WHERE t.overlap_ns > 0
QUALIFY row_number() OVER (PARTITION BY t.job, t.step ORDER BY t.overlap_ns DESC, t.what,
                           t.name) <= 5;

-- The straggler of each step, with the layer it was busy in while the others waited: the
-- module path of its op that held most of the windows.
CREATE TEMP TABLE step_stragglers AS
SELECT s.*, n.layer_label, o.busy_layer, b.layer_label AS busy_layer_label
FROM _step_straggler s
LEFT JOIN (SELECT job, step, arg_max(layer, overlap_ns) AS busy_layer FROM straggler_ops
           WHERE what = 'op' AND layer IS NOT NULL GROUP BY ALL) o USING (job, step)
LEFT JOIN _straggler_labels n ON n.job = s.job AND n.layer = s.layer
LEFT JOIN _straggler_labels b ON b.job = s.job AND b.layer = o.busy_layer;
