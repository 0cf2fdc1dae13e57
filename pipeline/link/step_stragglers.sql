-- step_stragglers: who held each step back, and doing what. Per step, the rank whose late
-- arrival made the other ranks wait longest (the sum of their collective_waits.wait_ns in
-- the collectives it arrived at last), the layer and dimension of those collectives, and
-- in straggler_ops what that rank ran while the others waited: its ops and kernels in the
-- windows from the first rank's arrival to its own, on its own clock.
--
-- reads: collective_waits, collective_instances, clock_offsets, ops, kernels
-- creates: step_stragglers, straggler_ops

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
-- collectives it delayed most, summed over them (equal sums: the first by name).
CREATE TEMP TABLE _step_blame AS
WITH by_layer AS (
    SELECT job, step, rank, layer, sum(caused_ns) AS ns FROM _caused GROUP BY ALL
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

CREATE TEMP TABLE step_stragglers AS
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
    FROM step_stragglers s
    JOIN _caused c USING (job, step, rank)
    JOIN collective_instances i USING (job, source, comm, seq)
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

-- Leaf ops (CPU) and kernels (GPU) of the straggler that overlap its windows, summed by name:
-- the five that took most of the windows per step.
CREATE TEMP TABLE straggler_ops AS
WITH rank_ops AS (
    SELECT o.* FROM ops o SEMI JOIN _straggler_windows w USING (job, rank, source)
),
activity AS (
    -- (leaf ops only: their parents, up to ProfilerStep#N, would cover every window)
    SELECT job, rank, source, 'op' AS what, name, module_path AS layer, start_ns, end_ns
    FROM rank_ops o
    WHERE NOT EXISTS (SELECT 1 FROM rank_ops c WHERE c.job = o.job AND c.rank = o.rank
                      AND c.source = o.source AND c.file_id = o.file_id
                      AND c.parent_id = o.op_id)
    UNION ALL
    SELECT job, rank, source, 'kernel', name, nvtx_range, start_ns, end_ns
    FROM kernels SEMI JOIN _straggler_windows USING (job, rank, source)
),
overlap AS (
    SELECT w.job, w.step, w.rank, a.what, a.name, a.layer,
           least(a.end_ns, w.end_ns) - greatest(a.start_ns, w.start_ns) AS overlap_ns
    FROM _straggler_windows w
    JOIN activity a
      ON a.job = w.job AND a.rank = w.rank AND a.source = w.source
     AND a.start_ns < w.end_ns AND a.end_ns > w.start_ns
),
totals AS (
    SELECT job, step, rank, what, name, arg_max(layer, overlap_ns) AS layer,
           sum(overlap_ns) AS overlap_ns
    FROM overlap GROUP BY job, step, rank, what, name
)
SELECT t.job, t.step, t.rank, t.what, t.name, t.layer, t.overlap_ns,
       t.overlap_ns / nullif(g.window_ns, 0) AS window_share
FROM totals t
JOIN (SELECT job, step, rank, sum(end_ns - start_ns) AS window_ns
      FROM _straggler_windows GROUP BY ALL) g USING (job, step, rank)
QUALIFY row_number() OVER (PARTITION BY t.job, t.step ORDER BY t.overlap_ns DESC, t.what,
                           t.name) <= 5;
