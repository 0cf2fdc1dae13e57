-- gradient_bucket_layers: the layers whose data each gradient bucket (and each parameter
-- gather that no layer placed) carries. One row per collective of collective_links whose
-- owner is 'gradient_bucket' or 'parameter_gather' and per layer in it; its rows add up to
-- the collective's bytes exactly.
--
-- A bucket holds consecutive gradients of the order in which the data-parallel reduction
-- carries them (_gradient_plan, from the model and job.yaml's conventions: the stage's
-- units in reverse registration order, as DDP's and Megatron's buffers and FSDP's
-- post-backward hooks take them). The buckets of one rank and step, in issue order, lie
-- end to end on that sequence: a bucket of bytes [lo, hi) takes the bytes of each unit's
-- range [lo_bytes, hi_bytes) that it covers. Bytes past the plan's end (a plan that
-- undercounts) go to its last unit, so that nothing is dropped. Parameter gathers lie on
-- the same sequence (in gradient bytes: where parameters and gradients differ in width,
-- a gather is split in the units' proportions, not at their parameter bytes). A unit is named by the module path of
-- the same layer on that rank (its layer number there, per stage or global, whichever the
-- rank's own paths use; the embedding and LM head by their kind), else by the model's name
-- (layers.<i>, embedding, lm_head, root). Without a job.yaml, or beyond the plan, the bucket
-- is one row under its owner's own name (attributed_by 'gradient_bucket').
--
-- reads: _gradient_plan, _layer_index, _layer_kind, _layer_names, _layer_path,
--        collective_links, collectives
-- creates: gradient_bucket_layers

-- The buckets and gathers, each a byte range of its rank's sequence in the step.
CREATE TEMP TABLE _bucket_ranges AS
SELECT *, sum(bytes) OVER w - bytes AS lo, sum(bytes) OVER w AS hi
FROM (SELECT l.job, l.rank, l.source, l.file_id, l.collective_id, l.step, l.layer AS owner,
             coalesce(l.bytes, 0) AS bytes, c.start_ns
      FROM collective_links l
      JOIN collectives c USING (job, rank, source, file_id, collective_id)
      WHERE l.layer IN ('gradient_bucket', 'parameter_gather'))
-- (in issue order: a file's collective ids need not follow time)
WINDOW w AS (PARTITION BY job, rank, source, file_id, step, owner
             ORDER BY start_ns, collective_id ROWS UNBOUNDED PRECEDING);

-- Each rank's layer paths by number and kind, from its own collectives.
CREATE TEMP TABLE _rank_layers AS
SELECT job, rank, _layer_index(layer) AS layer_index, min(_layer_path(layer)) AS path
FROM collective_links
WHERE _layer_index(layer) IS NOT NULL AND rank IN (SELECT DISTINCT rank FROM _bucket_ranges)
GROUP BY ALL;

-- Whether a rank's layer numbers are the stage's own (PyTorch's module instance names
-- count per process) or the model's (Hugging Face and torchtitan attribute names).
CREATE TEMP TABLE _rank_numbering AS
SELECT p.job, p.rank,
       list_sort(list(DISTINCT p.local_index) FILTER (WHERE p.local_index IS NOT NULL))
           = any_value(o.seen) AS local,
       list_sort(list(DISTINCT p.layer_index) FILTER (WHERE p.layer_index IS NOT NULL))
           = any_value(o.seen) AS global
FROM _gradient_plan p
JOIN (SELECT job, rank, list_sort(list(DISTINCT layer_index)) AS seen FROM _rank_layers
      GROUP BY ALL) o USING (job, rank)
GROUP BY ALL;

-- Each plan unit's name on its rank.
CREATE TEMP TABLE _plan_units AS
SELECT p.*, max(p.hi_bytes) OVER (PARTITION BY p.job, p.rank) = p.hi_bytes AS last_unit,
       coalesce(
           CASE p.unit_kind
               WHEN 'transformer' THEN (
                   SELECT l.path FROM _rank_layers l
                   WHERE l.job = p.job AND l.rank = p.rank
                     AND (n.local AND l.layer_index = p.local_index
                          OR NOT n.local AND n.global AND l.layer_index = p.layer_index))
               WHEN 'embedding' THEN (
                   SELECT min_by(layer, length(layer)) FROM _layer_names k
                   WHERE k.job = p.job AND k.layer_kind = 'embedding' AND k.layer IN (
                       SELECT layer FROM collective_links c
                       WHERE c.job = p.job AND c.rank = p.rank))
               WHEN 'lm_head' THEN (
                   SELECT min_by(layer, length(layer)) FROM _layer_names k
                   WHERE k.job = p.job AND k.layer_kind = 'lm_head' AND k.layer IN (
                       SELECT layer FROM collective_links c
                       WHERE c.job = p.job AND c.rank = p.rank)) END,
           CASE WHEN p.unit_kind = 'transformer' THEN 'layers.' || p.layer_index
                ELSE p.unit_kind END) AS layer
FROM _gradient_plan p
LEFT JOIN _rank_numbering n USING (job, rank);

-- The kind and label of a layer path cut after its layer (the name _rank_layers gives a
-- unit), where no collective names that path itself: its kind as collective_links.sql gives
-- a path's, its label that of the job's paths under it, cut after the same layer
-- (layers.1/attn -> layers.1).
CREATE TEMP TABLE _cut_layer_names AS
SELECT job, _layer_path(layer) AS layer, _layer_kind(_layer_path(layer)) AS layer_kind,
       min(_layer_path(layer_label)) AS layer_label
FROM _layer_names
WHERE layer_index IS NOT NULL
GROUP BY ALL;

CREATE TEMP TABLE gradient_bucket_layers AS
WITH split AS (
    SELECT b.job, b.rank, b.source, b.file_id, b.collective_id, b.step, b.owner, u.layer,
           u.layer_index,
           least(b.hi, CASE WHEN u.last_unit THEN b.hi ELSE u.hi_bytes END)
           - greatest(b.lo, u.lo_bytes) AS bytes
    FROM _bucket_ranges b
    JOIN _plan_units u
      ON u.job = b.job AND u.rank = b.rank AND u.lo_bytes < b.hi
     AND (u.last_unit OR b.lo < u.hi_bytes)
),
whole AS (  -- (no plan for the rank: the bucket is its own one row)
    SELECT job, rank, source, file_id, collective_id, step, owner, owner AS layer,
           NULL::BIGINT AS layer_index, bytes
    FROM _bucket_ranges b
    WHERE NOT EXISTS (SELECT 1 FROM _gradient_plan p WHERE p.job = b.job AND p.rank = b.rank)
)
SELECT s.job, s.rank, s.source, s.file_id, s.collective_id, s.step, s.owner, s.layer,
       s.layer_index, coalesce(n.layer_kind, cut.layer_kind, CASE
           WHEN s.layer LIKE 'layers.%' THEN 'transformer'
           WHEN s.layer IN ('embedding', 'lm_head') THEN s.layer END) AS layer_kind,
       coalesce(n.layer_label, cut.layer_label, s.layer) AS layer_label, s.bytes,
       CASE WHEN s.owner = s.layer THEN s.owner ELSE 'bucket_plan' END AS attributed_by
FROM (SELECT * FROM split UNION ALL SELECT * FROM whole) s
LEFT JOIN _layer_names n ON n.job = s.job AND n.layer = s.layer
LEFT JOIN _cut_layer_names cut ON cut.job = s.job AND cut.layer = s.layer
WHERE s.bytes > 0;
