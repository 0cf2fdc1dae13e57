-- _own_links / _collective_links: for every collective of every source, the step, phase, layer and the
-- evidence behind them (communicator_dims.sql adds the parallel dimension and makes the
-- public collective_links). One row per collectives row; unattributed rows stay (phase 'other',
-- layer NULL, attributed_by 'none'), so they can be counted and shown.
--
-- What a collective's own file says (the launch op, and the phase and layer from the ops
-- enclosing it) was worked out at ingest (pipeline/ingest/attribution.py) and sits on the
-- collectives row, so linking never reads the ops. Here: the peers' global ranks, the
-- phase of send/recv outside any range (by direction), the layer kind and index, and the
-- profiler's context for calls another source matched to it.

-- The global rank of each send/recv peer. NCCL's own records (the log's COLL line, the
-- NVTX payload in Nsight) give the peer's rank in the communicator; the job's communicator
-- rows of that source say which global rank holds that place.
CREATE TEMP TABLE _collective_peers AS
SELECT c.job, c.rank, c.source, c.file_id, c.collective_id,
       CASE WHEN c.source IN ('nccl_log', 'nsys') THEN m.rank ELSE c.peer END AS peer
FROM collectives c
-- (a place two ranks claim is left unknown: one row per collective, whatever the input)
LEFT JOIN (SELECT job, source, comm, rank_in_comm, min(rank) AS rank FROM communicators
           WHERE source IN ('nccl_log', 'nsys') AND rank_in_comm IS NOT NULL
           GROUP BY ALL HAVING count(DISTINCT rank) = 1) m
    ON m.job = c.job AND m.source = c.source AND m.comm = c.comm AND m.rank_in_comm = c.peer
WHERE c.peer IS NOT NULL;

-- Each collective with the sizes another source filled and its peer's global rank.
CREATE TEMP TABLE _collective_calls AS
SELECT c.job, c.rank, c.source, c.file_id, c.collective_id, c.step, c.op, c.comm, p.peer,
       coalesce(c.bytes, f.bytes) AS bytes, coalesce(c.dtype, f.dtype) AS dtype,
       CASE WHEN c.bytes IS NULL AND f.bytes IS NOT NULL THEN f.filled_from
            ELSE c.size_source END AS size_source,
       c.phase AS given_phase, c.layer, c.attributed_by, c.backward_op
FROM collectives c
LEFT JOIN _filled_sizes f ON f.job = c.job AND f.rank = c.rank AND f.source = c.source
   AND f.file_id = c.file_id AND f.collective_id = c.collective_id
LEFT JOIN _collective_peers p ON p.job = c.job AND p.rank = c.rank AND p.source = c.source
   AND p.file_id = c.file_id AND p.collective_id = c.collective_id;

-- A layer kind from one module path component (class name or NVTX text), NULL if none.
CREATE MACRO _component_kind(c) AS CASE
    WHEN regexp_matches(lower(c), 'moe|expert|router') THEN 'moe'
    WHEN regexp_matches(lower(c), 'attn|attention') THEN 'attention'
    WHEN regexp_matches(lower(c), 'mlp|feedforward|feed_forward|ffn') THEN 'mlp'
    WHEN regexp_matches(lower(c), 'embed') THEN 'embedding'
    WHEN regexp_matches(lower(c), 'lm_?head|output_?layer') THEN 'lm_head'
    WHEN regexp_matches(lower(c), 'loss|cross_?entropy') THEN 'loss'
    WHEN regexp_matches(lower(c), 'norm') THEN 'norm'
    WHEN regexp_matches(lower(c), 'block|layer|^h\.?\d') THEN 'transformer'
END;

-- The kind of a layer path: that of its innermost component that has one.
CREATE MACRO _layer_kind(path) AS list_filter(
    list_transform(list_reverse(string_split(path, '/')), lambda c: _component_kind(c)),
    lambda k: k IS NOT NULL)[1];

-- The number of the innermost numbered layer component (Block_3, TransformerLayer_3,
-- layers.3, h.3), NULL if none.
CREATE MACRO _layer_index(path) AS TRY_CAST(list_last(list_filter(
    regexp_extract_all(path, '(?:^|/)(?:\w*(?:[Bb]locks?|[Ll]ayers?)|h)[._]?(\d+)(?:/|$)', 1),
    lambda x: x <> '')) AS BIGINT);

-- The kind and number of each distinct layer path (a job has few; its collectives many).
CREATE TEMP TABLE _layer_names AS
SELECT layer, _layer_index(layer) AS layer_index, _layer_kind(layer) AS layer_kind
FROM (SELECT DISTINCT layer FROM _collective_calls WHERE layer IS NOT NULL);

CREATE TEMP TABLE _own_links AS
SELECT l.job, l.rank, l.source, l.file_id, l.collective_id, l.step,
       CASE WHEN l.step IS NOT NULL THEN 'trace' END AS step_from,
       -- forward, backward, optimizer or other
       coalesce(l.given_phase, CASE
           -- Pipeline schedules issue send/recv between the forward and backward ranges.
           -- Stages follow rank order (Megatron puts pp outermost), so activations flow to
           -- higher ranks (forward) and gradients to lower ones (backward).
           WHEN l.op = 'send' AND l.peer > l.rank OR l.op = 'recv' AND l.peer < l.rank
               THEN 'forward'
           WHEN l.op = 'send' AND l.peer < l.rank OR l.op = 'recv' AND l.peer > l.rank
               THEN 'backward'
           ELSE 'other' END) AS phase,
       -- module path or NVTX range of the layer
       l.layer,
       -- the number in the path's last numbered layer component (per process: a pipeline
       -- stage's layers count from 0 in PyTorch's module instance names)
       n.layer_index,
       n.layer_kind,
       coalesce(l.attributed_by, 'none') AS attributed_by,
       l.op, l.comm, l.backward_op, l.bytes, l.dtype, l.size_source
FROM _collective_calls l
LEFT JOIN _layer_names n USING (layer);

-- A call another source matched to a profiler collective takes the profiler's context.
CREATE TEMP TABLE _collective_links AS
SELECT o.* REPLACE (
           coalesce(o.step, p.step) AS step,
           CASE WHEN o.step IS NULL AND p.step IS NOT NULL THEN 'matched'
                ELSE o.step_from END AS step_from,
           CASE WHEN p.collective_id IS NOT NULL THEN p.phase ELSE o.phase END AS phase,
           coalesce(p.layer, o.layer) AS layer,
           coalesce(p.layer_index, o.layer_index) AS layer_index,
           coalesce(p.layer_kind, o.layer_kind) AS layer_kind,
           CASE WHEN p.collective_id IS NOT NULL AND p.attributed_by <> 'none'
                THEN 'matched:' || p.attributed_by ELSE o.attributed_by END AS attributed_by,
           coalesce(p.backward_op, o.backward_op) AS backward_op)
FROM _own_links o
LEFT JOIN collective_matches m USING (job, rank, source, file_id, collective_id)
LEFT JOIN _own_links p ON p.job = m.job AND p.rank = m.rank AND p.source = m.primary_source
    AND p.file_id = m.primary_file_id AND p.collective_id = m.primary_collective_id;
