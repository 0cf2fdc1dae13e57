-- ledger: every observed collective of a traced step set against the analytic model's items
-- (job.yaml's predictions), per step, parallel dimension, op, phase and message size, summed
-- over the ranks traced in the step. Each row is one of
--   matched       an item seen with its size and number of calls
--   calls differ  an item seen with its size, more or fewer times than predicted
--   size differs  an item and observed calls of the same dimension, op and phase whose
--                 sizes differ (paired largest with largest)
--   missing       predicted, never seen
--   unpredicted   seen, no item: named by what the trace says (its layer)
-- with a reason where one is known: the bytes the model gives with another value of a key
-- (model.linear_bias: the linear layers' biases; conventions.framework), the same bytes in other calls
-- (gradient buckets cut elsewhere, naming the key that sets them; for activations, another
-- micro-batch size), or a message twice or half the predicted size (a dtype).
-- size_source is 'estimated' where the observed sizes are the
-- model's own (size_estimates.sql: kernels that record no size), so a match there says the
-- calls were seen, not their bytes.
-- Where job.yaml's layout contradicts the traces
-- (communicator_dims.layout_conflicts), every row that differs says so, unless another
-- value of a layout key (parallel.*) explains its bytes: the items were predicted for a
-- layout the run did not have. The statement is that of the
-- communicator its calls ran on, else of its dimension, else the job's first.
-- Jobs linked without a job.yaml have no predictions and no ledger.
--
-- reads: _alternative_bytes, _job_facts, collective_links, communicator_dims, predictions,
--        primary_sources
-- creates: ledger

-- Observed calls of traced steps, one source per rank (primary_sources: a rank's profiler
-- trace and NCCL log hold the same calls), per rank so that predictions of the same ranks
-- can be summed.
-- A call on a communicator where job.yaml's layout contradicts the traces carries the
-- first statement on it (the communicator is its instance key's: '<comm> p2p <src>-><dst>'
-- for a send/recv).
CREATE TEMP TABLE _ledger_calls AS
SELECT l.job, l.step, l.rank, coalesce(l.parallel_dim, 'unknown') AS parallel_dim, l.op,
       coalesce(l.phase, 'other') AS phase, l.bytes AS message_bytes, l.layer, l.layer_label,
       l.size_source, d.layout_conflicts[1] AS conflict
FROM collective_links l
JOIN primary_sources p USING (job, rank, source)
SEMI JOIN (SELECT DISTINCT job FROM predictions) j USING (job)
LEFT JOIN communicator_dims d
  ON d.job = l.job AND d.comm = split_part(l.instance_comm, ' p2p ', 1)
 AND d.layout_conflicts IS NOT NULL
WHERE l.step IS NOT NULL AND l.bytes IS NOT NULL;

-- The layer of a row is its calls' most common one; a tie goes to the first name, so every
-- link of the same dataset gives the same row (FSDP units of equal size tie). Its label is
-- collective_links' (the shortest tail of the path that tells it apart).
CREATE TEMP TABLE _ledger_observed AS
WITH layer_calls AS (
    SELECT job, step, parallel_dim, op, phase, message_bytes, layer,
           min(layer_label) AS layer_label, count(*) AS n
    FROM _ledger_calls WHERE layer IS NOT NULL GROUP BY job, step, parallel_dim, op, phase,
                                                        message_bytes, layer
), layers AS (
    SELECT job, step, parallel_dim, op, phase, message_bytes,
           first(layer ORDER BY n DESC, layer) AS layer,
           first(layer_label ORDER BY n DESC, layer) AS layer_label
    FROM layer_calls GROUP BY ALL
)
SELECT job, step, parallel_dim, op, phase, message_bytes, count(*) AS calls,
       count(DISTINCT c.rank) AS ranks, any_value(y.layer) AS layer,
       any_value(y.layer_label) AS layer_label,
       CASE WHEN bool_or(c.size_source = 'estimated') THEN 'estimated'
            ELSE min(c.size_source) END AS size_source,
       min(c.conflict) AS conflict
FROM _ledger_calls c
LEFT JOIN layers y USING (job, step, parallel_dim, op, phase, message_bytes)
GROUP BY job, step, parallel_dim, op, phase, message_bytes;

-- Items of the ranks traced in each step, summed over those ranks.
CREATE TEMP TABLE _ledger_predicted AS
SELECT r.job, r.step, p.parallel_dim, p.op, p.phase, p.bytes // p.calls AS message_bytes,
       sum(p.calls) AS calls, count(DISTINCT p.rank) AS ranks,
       string_agg(DISTINCT p.purpose, '; ' ORDER BY p.purpose) AS purpose
FROM predictions p
JOIN (SELECT DISTINCT job, step, rank FROM _ledger_calls) r USING (job, rank)
GROUP BY ALL;

-- The same size on both sides: matched, or seen a different number of times.
CREATE TEMP TABLE _ledger_same_size AS
SELECT job, step, parallel_dim, op, phase, message_bytes,
       p.calls AS predicted_calls, p.purpose, o.calls, o.ranks, o.layer, o.layer_label,
       o.size_source, o.conflict
FROM _ledger_predicted p
FULL JOIN _ledger_observed o USING (job, step, parallel_dim, op, phase, message_bytes);

-- What is left on each side, paired within its dimension, op and phase by size order.
CREATE TEMP TABLE _ledger_pairs AS
WITH left_over AS (
    SELECT *, row_number() OVER (PARTITION BY job, step, parallel_dim, op, phase,
                                              predicted_calls IS NULL
                                 ORDER BY message_bytes DESC) AS size_order
    FROM _ledger_same_size
    WHERE predicted_calls IS NULL OR calls IS NULL
)
SELECT job, step, parallel_dim, op, phase, p.message_bytes AS predicted_message_bytes,
       p.predicted_calls, p.purpose, o.message_bytes, o.calls, o.ranks, o.layer,
       o.layer_label, o.size_source, o.conflict
FROM (SELECT * FROM left_over WHERE calls IS NULL) p
FULL JOIN (SELECT * FROM left_over WHERE predicted_calls IS NULL) o
  USING (job, step, parallel_dim, op, phase, size_order);

CREATE TEMP TABLE _ledger_rows AS
SELECT job, step, parallel_dim, op, phase,
       CASE WHEN predicted_calls = calls THEN 'matched' ELSE 'calls differ' END AS status,
       purpose, predicted_calls, message_bytes AS predicted_message_bytes, calls,
       message_bytes, ranks, layer, layer_label, size_source, conflict
FROM _ledger_same_size WHERE predicted_calls IS NOT NULL AND calls IS NOT NULL
UNION ALL
SELECT job, step, parallel_dim, op, phase,
       CASE WHEN calls IS NULL THEN 'missing' WHEN predicted_calls IS NULL THEN 'unpredicted'
            ELSE 'size differs' END,
       purpose, predicted_calls, predicted_message_bytes, calls, message_bytes, ranks, layer,
       layer_label, size_source, conflict
FROM _ledger_pairs;

-- The bytes of each dimension, op and phase were a model key given another value, summed
-- over the ranks traced in each step (_alternative_bytes, made by the runner).
CREATE TEMP TABLE _ledger_alternatives AS
SELECT r.job, r.step, a.parallel_dim, a.op, a.phase, a.key, a.value, a.what,
       sum(a.bytes) AS alternative_total
FROM (SELECT * EXCLUDE (ranks), unnest(ranks) AS rank FROM _alternative_bytes) a
JOIN (SELECT DISTINCT job, step, rank FROM _ledger_calls) r USING (job, rank)
GROUP BY ALL;

-- Bytes of each dimension, op and phase on both sides: equal totals in other calls are
-- gradient buckets cut elsewhere (PyTorch DDP's 1 MiB first bucket, whole tensors per
-- bucket), FSDP units wrapped otherwise (FSDP1's root unit) or activations of another
-- micro-batch size.
CREATE TEMP TABLE ledger AS
WITH contradicted AS (
    -- per job and dimension, the first statement on it (a row of another dimension, or
    -- of none, takes the job's first)
    SELECT job, parallel_dim, min(statement) AS statement
    FROM (SELECT job, parallel_dim, unnest(layout_conflicts) AS statement
          FROM communicator_dims WHERE layout_conflicts IS NOT NULL)
    GROUP BY GROUPING SETS ((job, parallel_dim), (job))
),
totals AS (
    SELECT job, step, parallel_dim, op, phase,
           sum(coalesce(predicted_calls, 0) * coalesce(predicted_message_bytes, 0))
               AS predicted_total,
           sum(coalesce(calls, 0) * coalesce(message_bytes, 0)) AS observed_total,
           -- (items of ZeRO-3/FSDP units: the same bytes elsewhere are units wrapped otherwise)
           bool_or(purpose IN ('parameter gather', 'parameter re-gather',
                               'gradient reduce-scatter')) AS units
    FROM _ledger_rows GROUP BY ALL
), alternatives AS (
    -- observed totals that another value of a key gives (within 0.1%: FSDP pads a shard to
    -- a multiple of its group; none where that value predicts nothing) and the prediction
    -- does not; the closest first
    SELECT t.job, t.step, t.parallel_dim, t.op, t.phase,
           first(k.what || ': the bytes match ' || k.key || ': ' || k.value
                 ORDER BY abs(t.observed_total - coalesce(a.alternative_total, 0)), k.key)
               AS reason,
           first(k.key ORDER BY abs(t.observed_total - coalesce(a.alternative_total, 0)), k.key)
               AS key
    FROM totals t
    JOIN (SELECT DISTINCT job, step, key, value, what FROM _ledger_alternatives) k
      USING (job, step)
    LEFT JOIN _ledger_alternatives a USING (job, step, parallel_dim, op, phase, key, value)
    WHERE abs(t.observed_total - coalesce(a.alternative_total, 0))
              <= 0.001 * coalesce(a.alternative_total, 0)
      AND abs(t.observed_total - t.predicted_total)
              > 0.001 * greatest(coalesce(a.alternative_total, 0), t.predicted_total)
    GROUP BY ALL
)
SELECT r.job, r.step, r.parallel_dim, r.op, r.phase, r.status, r.purpose, r.layer,
       r.layer_label,
       CAST(coalesce(r.predicted_calls, 0) AS BIGINT) AS predicted_calls,
       r.predicted_message_bytes,
       CAST(coalesce(r.predicted_calls * r.predicted_message_bytes, 0) AS BIGINT)
           AS predicted_bytes,
       CAST(coalesce(r.calls, 0) AS BIGINT) AS calls, r.message_bytes,
       CAST(coalesce(r.calls * r.message_bytes, 0) AS BIGINT) AS bytes, r.ranks,
       CASE
           WHEN r.status = 'matched' THEN NULL
           -- (a layout key whose other value gives the observed bytes is the fix itself: it
           -- comes before the contradiction it explains, e.g. HSDP linked as FSDP over all of
           -- dp; another key's match beside a contradiction of the layout is a coincidence)
           WHEN a.reason IS NOT NULL AND (j.statement IS NULL OR a.key LIKE 'parallel.%')
               THEN a.reason
           WHEN j.statement IS NOT NULL
               THEN 'job.yaml contradicts the traces: '
                    || coalesce(r.conflict, d.statement, j.statement)
           WHEN t.predicted_total > 0
                AND abs(t.observed_total - t.predicted_total) <= 0.01 * t.predicted_total
               THEN CASE WHEN r.parallel_dim = 'dp' AND t.units
                         THEN 'the same bytes in other calls: parameters wrapped in other '
                              || 'units (conventions.fsdp_root_unit)'
                         WHEN r.parallel_dim = 'dp'
                         THEN 'the same bytes in other calls: gradient buckets cut elsewhere ('
                              || f.bucket_key || ')'
                         ELSE 'the same bytes in calls of another size: check micro_batch'
                    END
           WHEN r.status = 'size differs' AND r.message_bytes = 2 * r.predicted_message_bytes
               THEN 'twice the predicted size: check the dtypes'
           WHEN r.status = 'size differs' AND 2 * r.message_bytes = r.predicted_message_bytes
               THEN 'half the predicted size: check the dtypes'
       END AS reason,
       r.size_source
FROM _ledger_rows r
JOIN totals t USING (job, step, parallel_dim, op, phase)
LEFT JOIN contradicted j ON j.job = r.job AND j.parallel_dim IS NULL
LEFT JOIN contradicted d ON d.job = r.job AND d.parallel_dim = r.parallel_dim
LEFT JOIN alternatives a USING (job, step, parallel_dim, op, phase)
LEFT JOIN _job_facts f USING (job);
