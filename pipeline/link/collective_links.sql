-- _own_links / _collective_links: for every collective of every source, the step, phase, layer and the
-- evidence behind them (communicator_dims.sql adds the parallel dimension and makes the
-- public collective_links). One row per collectives row; unattributed rows stay (phase 'other',
-- layer NULL, attributed_by 'none'), so they can be counted and shown.
--
-- Evidence, from the host op that issued the collective (collectives.launch_op_id, else the
-- runtime call with the kernel's correlation) and the ops enclosing it (ops.parent_id):
--   phase: an enclosing autograd evaluate_function -> backward; Optimizer.step / an
--          'optimizer' range -> optimizer; a 'backward' range -> backward; a 'forward'
--          range or a module scope -> forward; a send/recv outside those: by direction
--          (see below); else other.
--   layer: the issuing op's module_path (module_scope); for backward work the module path of
--          the forward op with the same autograd sequence number (backward_of_forward_op);
--          else the innermost NVTX range (nvtx).

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

-- The host op that issued each collective.
CREATE TEMP TABLE _collective_launch AS
SELECT c.job, c.rank, c.source, c.file_id, c.collective_id, c.step, c.op, c.comm, p.peer,
       coalesce(c.bytes, f.bytes) AS bytes, coalesce(c.dtype, f.dtype) AS dtype,
       CASE WHEN c.bytes IS NULL AND f.bytes IS NOT NULL THEN f.filled_from
            ELSE c.size_source END AS size_source,
       c.phase AS given_phase, c.layer AS given_layer,
       coalesce(c.launch_op_id, l.op_id) AS launch_op_id
FROM collectives c
LEFT JOIN (
    SELECT job, rank, file_id, correlation, min(op_id) AS op_id
    FROM ops
    WHERE kind IN ('cuda_runtime', 'cuda_driver') AND correlation IS NOT NULL
    GROUP BY ALL
) l ON c.launch_op_id IS NULL AND l.job = c.job AND l.rank = c.rank
   AND l.file_id = c.file_id AND l.correlation = c.correlation
LEFT JOIN _filled_sizes f ON f.job = c.job AND f.rank = c.rank AND f.source = c.source
   AND f.file_id = c.file_id AND f.collective_id = c.collective_id
LEFT JOIN _collective_peers p ON p.job = c.job AND p.rank = c.rank AND p.source = c.source
   AND p.file_id = c.file_id AND p.collective_id = c.collective_id;

-- The files whose ops the walk reads.
CREATE TEMP TABLE _link_files AS
SELECT DISTINCT job, rank, file_id FROM _collective_launch WHERE launch_op_id IS NOT NULL;

-- The nesting alone (integers): each level of the walk probes this table, so it is kept
-- narrow; names and paths are joined once, after the walk (3x faster than walking the ops).
CREATE TEMP TABLE _walk_edges AS
SELECT o.job, o.rank, o.file_id, o.op_id, o.parent_id
FROM ops o SEMI JOIN _link_files USING (job, rank, file_id)
WHERE o.parent_id IS NOT NULL;

-- Every enclosing op of each issuing op; hops = 0 is the issuing op itself.
CREATE TEMP TABLE _collective_walk AS
WITH RECURSIVE walk(job, rank, file_id, collective_id, op_id, hops) AS (
    SELECT job, rank, file_id, collective_id, launch_op_id, 0
    FROM _collective_launch WHERE launch_op_id IS NOT NULL
    UNION ALL
    SELECT w.job, w.rank, w.file_id, w.collective_id, e.parent_id, w.hops + 1
    FROM walk w
    JOIN _walk_edges e ON e.job = w.job AND e.rank = w.rank AND e.file_id = w.file_id
                      AND e.op_id = w.op_id
    WHERE w.hops < 512
)
SELECT * FROM walk;

-- The same with what each enclosing op says (its name, kind, module path).
CREATE TEMP TABLE _collective_ancestors AS
SELECT w.job, w.rank, w.file_id, w.collective_id, w.hops, o.name, o.kind, o.module_path,
       o.seq_nr, lower(o.name) AS lname
FROM _collective_walk w
JOIN ops o USING (job, rank, file_id, op_id);

-- Per collective: phase evidence and the candidates for its layer.
CREATE TEMP TABLE _collective_evidence AS
SELECT job, rank, file_id, collective_id,
       bool_or(name LIKE 'autograd::engine::evaluate_function:%') AS in_autograd,
       bool_or(lname LIKE 'optimizer.step%' OR lname LIKE 'optimizer.zero_grad%'
               OR lname = 'optimizer' OR (kind = 'nvtx' AND lname LIKE '%optimizer%'))
           AS in_optimizer,
       bool_or(lname = 'backward' OR (kind = 'nvtx' AND lname LIKE '%backward%')) AS in_backward,
       bool_or(lname = 'forward' OR kind = 'module' OR (kind = 'nvtx' AND lname LIKE '%forward%'))
           AS in_forward,
       arg_min(module_path, hops) FILTER (module_path IS NOT NULL) AS module_path,
       arg_min(seq_nr, hops) FILTER (seq_nr IS NOT NULL AND (
           name LIKE 'autograd::engine::evaluate_function:%' OR name LIKE '%Backward%'))
           AS backward_seq_nr,
       arg_min(name, hops) FILTER (kind = 'nvtx') AS nvtx_range,
       arg_min(name, hops) FILTER (name LIKE 'autograd::engine::evaluate_function:%')
           AS backward_op
FROM _collective_ancestors
GROUP BY ALL;

-- Forward ops by autograd sequence number: where a backward op's work came from.
CREATE VIEW _forward_ops AS
SELECT job, rank, file_id, seq_nr, arg_min(module_path, op_id) AS module_path
FROM ops SEMI JOIN _link_files USING (job, rank, file_id)
WHERE seq_nr IS NOT NULL AND seq_nr >= 0 AND module_path IS NOT NULL
  AND name NOT LIKE '%Backward%' AND name NOT LIKE 'autograd::%'
GROUP BY ALL;

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

CREATE TEMP TABLE _own_links AS
SELECT l.job, l.rank, l.source, l.file_id, l.collective_id, l.step,
       -- forward, backward, optimizer or other
       coalesce(l.given_phase, CASE
           WHEN e.in_autograd THEN 'backward'
           WHEN e.in_optimizer THEN 'optimizer'
           WHEN e.in_backward THEN 'backward'
           WHEN e.in_forward THEN 'forward'
           -- Pipeline schedules issue send/recv between the forward and backward ranges.
           -- Stages follow rank order (Megatron puts pp outermost), so activations flow to
           -- higher ranks (forward) and gradients to lower ones (backward).
           WHEN l.op = 'send' AND l.peer > l.rank OR l.op = 'recv' AND l.peer < l.rank
               THEN 'forward'
           WHEN l.op = 'send' AND l.peer < l.rank OR l.op = 'recv' AND l.peer > l.rank
               THEN 'backward'
           ELSE 'other' END) AS phase,
       -- module path or NVTX range of the layer
       coalesce(l.given_layer, e.module_path, f.module_path, e.nvtx_range) AS layer,
       -- the number in the path's last numbered layer component (per process: a pipeline
       -- stage's layers count from 0 in PyTorch's module instance names)
       _layer_index(coalesce(l.given_layer, e.module_path, f.module_path, e.nvtx_range))
           AS layer_index,
       _layer_kind(coalesce(l.given_layer, e.module_path, f.module_path, e.nvtx_range))
           AS layer_kind,
       CASE WHEN l.given_layer IS NOT NULL THEN 'source'
            WHEN e.module_path IS NOT NULL THEN 'module_scope'
            WHEN f.module_path IS NOT NULL THEN 'backward_of_forward_op'
            WHEN e.nvtx_range IS NOT NULL THEN 'nvtx'
            ELSE 'none' END AS attributed_by,
       l.op, l.comm, e.backward_op, l.bytes, l.dtype, l.size_source
FROM _collective_launch l
LEFT JOIN _collective_evidence e USING (job, rank, file_id, collective_id)
LEFT JOIN _forward_ops f ON f.job = l.job AND f.rank = l.rank AND f.file_id = l.file_id
                        AND f.seq_nr = e.backward_seq_nr;

-- A call another source matched to a profiler collective takes the profiler's context.
CREATE TEMP TABLE _collective_links AS
SELECT o.* REPLACE (
           coalesce(o.step, p.step) AS step,
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
