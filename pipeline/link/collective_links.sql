-- collective_links: for every collective of every source, the step, phase, layer and the
-- evidence behind them, and (communicator_dims.sql sets it) the parallel dimension. One row
-- per collectives row; unattributed rows stay (phase 'other', layer NULL, attributed_by
-- 'none'), so they can be counted and shown. The table is materialized once: each copy of
-- every collective costs more than the joins that make it.
--
-- What a collective's own file says (the launch op, and the phase and layer from the ops
-- enclosing it) was worked out at ingest (pipeline/ingest/derive/attribution.py) and sits on the
-- collectives row, so linking never reads the ops. Here: the peers' global ranks, the
-- phase of send/recv outside any range (by direction), the layer kind and index, and the
-- profiler's context for calls another source matched to it.
--
-- Built here as _links_attributed and completed in place by the files that take it in
-- turn: communicator_dims.sql sets parallel_dim (_links_dimmed), size_estimates.sql the
-- model's size of sizeless MoE exchanges (_links_sized), clock_offsets.sql adds
-- the instance key (_links_keyed), instance_context.sql fills calls across ranks and
-- names the result collective_links.
--
-- reads: _adopted_groups, _filled_sizes, _gradient_plan, collective_matches, collectives,
--        communicators
-- creates: _layer_index, _layer_kind, _layer_names, _layer_path, _links_attributed,
--          _model_layer_numbers, _is_named_owner, _module_layer, _named_owner

-- A layer kind from one module path component (class name or NVTX text), NULL if none.
CREATE MACRO _component_kind(c) AS CASE
    -- (a chunk's dispatch and combine parts: DualPipe's annotations, attribution.py)
    WHEN regexp_matches(lower(c), 'moe|expert|router|^dispatch$|^combine$') THEN 'moe'
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

-- The name and number tokens of a layer path: its components split at '/' and '.'.
CREATE MACRO _layer_tokens(path) AS string_split_regex(path, '[/.]');

-- Per token of a path, the layer number it ends (NULL where none): a numbered layer
-- component (Block_3, TransformerLayer_3, LlamaDecoderLayer_3, h_3), or the number after a
-- layer list (layers.3, blocks.3, h.3: Hugging Face, torchtitan, Megatron module names).
CREATE MACRO _token_layers(t) AS list_transform(range(1, len(t) + 1), lambda i: CASE
    WHEN regexp_full_match(t[i], '(?:\w*(?:[Bb]locks?|[Ll]ayers?)|h)_?\d+')
        THEN regexp_extract(t[i], '(\d+)$')
    WHEN regexp_full_match(t[i], '\w*(?:[Bb]locks?|[Ll]ayers?)|h') AND i < len(t)
         AND regexp_full_match(t[i + 1], '\d+')
        THEN t[i + 1] END);

-- The 1-based token that holds the innermost layer number, NULL if none.
CREATE MACRO _layer_token(path) AS list_last(list_filter(
    range(1, len(_layer_tokens(path)) + 1),
    lambda i: _token_layers(_layer_tokens(path))[i] IS NOT NULL));

-- The number of the innermost layer (TransformerBlock_0/TransformerLayer_1/... -> 1,
-- model.layers.12.self_attn -> 12), NULL if none.
CREATE MACRO _layer_index(path) AS
    TRY_CAST(_token_layers(_layer_tokens(path))[_layer_token(path)] AS BIGINT);

-- The token that ends the innermost layer: its own, or the number after layers/blocks/h.
CREATE MACRO _layer_end(path) AS _layer_token(path) + CASE
    WHEN regexp_matches(_layer_tokens(path)[_layer_token(path)], '\d$') THEN 0 ELSE 1 END;

-- The path cut after its innermost layer (.../TransformerLayer_1/ParallelMLP_1 ->
-- .../TransformerLayer_1, model.layers.3.mlp -> model.layers.3); the whole path if none.
CREATE MACRO _layer_path(path) AS CASE WHEN _layer_token(path) IS NULL THEN path ELSE left(path,
    CAST(list_sum(list_transform(_layer_tokens(path)[1:_layer_end(path)], lambda t: length(t)))
         + _layer_end(path) - 1 AS BIGINT)) END;

-- A layer path as a label shows it: without the wrappers FSDP, torch.compile and DDP put
-- into module names (_fsdp_wrapped_module., _orig_mod., module., _checkpoint_wrapped_module.).
CREATE MACRO _unwrapped(path) AS array_to_string(list_filter(list_transform(
    string_split(path, '/'),
    lambda c: array_to_string(list_filter(string_split(c, '.'), lambda t: t NOT IN (
        '_fsdp_wrapped_module', '_orig_mod', 'module', '_checkpoint_wrapped_module')), '.')),
    lambda c: c <> ''), '/');

-- The layer paths of each job with their kind, number and label: the shortest tail of
-- '/'-components that starts at or before the innermost layer and that no other path of
-- the job ends with (Layer_1/Attention_1 rather than the whole module path); the whole
-- path where none is unique. (A job has few paths; its collectives many.)
CREATE TEMP TABLE _layer_names AS
WITH paths AS (
    SELECT DISTINCT job, CASE WHEN attributed_by = 'pp_boundary' THEN _layer_path(layer)
                              ELSE layer END AS layer
    FROM collectives WHERE layer IS NOT NULL
),
parts AS (
    SELECT job, layer, string_split(bare, '/') AS cs,
           -- (tail length from the innermost layer's component)
           len(string_split(bare, '/'))
           - len(string_split(_layer_path(bare), '/')) + 1 AS from_layer
    -- (the unwrapped path a column of its own: a macro takes its argument as an expression,
    -- and _layer_path's nested macros copy it some hundred times, which DuckDB then binds,
    -- for each of the two reads of tails: 0.4 s of every link's CPU)
    FROM (SELECT job, layer, _unwrapped(layer) AS bare FROM paths)
),
tails AS (
    SELECT job, layer, k, from_layer,
           array_to_string(cs[len(cs) - k + 1:len(cs)], '/') AS tail
    FROM (SELECT *, unnest(range(1, len(cs) + 1)) AS k FROM parts)
),
unique_tails AS (
    SELECT t.job, t.layer, min_by(t.tail, t.k) AS label
    FROM tails t
    JOIN (SELECT job, tail FROM tails GROUP BY ALL HAVING count(DISTINCT layer) = 1) u
      USING (job, tail)
    WHERE t.k >= t.from_layer
    GROUP BY ALL
)
SELECT p.job, p.layer, _layer_index(p.layer) AS layer_index, _layer_kind(p.layer) AS layer_kind,
       coalesce(u.label, p.layer) AS layer_label
FROM paths p LEFT JOIN unique_tails u USING (job, layer);

-- With a job.yaml, the model's number of each layer a rank numbers per stage: PyTorch
-- numbers module instances per process, so a later pipeline stage's layers count from 0
-- again (TransformerLayer_0 on stage 1 of a 2 x 2-layer model is layer 2). A rank whose
-- layer numbers are exactly its stage's positions (and not the model's numbers already)
-- takes the model's (_gradient_plan: each stage's layers with both numbers).
CREATE TEMP TABLE _model_layer_numbers AS
WITH seen AS (
    SELECT c.job, c.rank, list_sort(list(DISTINCT n.layer_index)) AS seen
    FROM (SELECT DISTINCT job, rank, CASE WHEN attributed_by = 'pp_boundary'
                 THEN _layer_path(layer) ELSE layer END AS layer
          FROM collectives WHERE layer IS NOT NULL) c
    JOIN _layer_names n USING (job, layer)
    WHERE n.layer_index IS NOT NULL
    GROUP BY ALL
),
stage AS (
    SELECT job, rank,
           list_sort(list(local_index) FILTER (WHERE local_index IS NOT NULL)) AS local,
           list_sort(list(layer_index) FILTER (WHERE layer_index IS NOT NULL)) AS model
    FROM _gradient_plan GROUP BY ALL
)
SELECT p.job, p.rank, p.local_index, p.layer_index
FROM _gradient_plan p
JOIN seen USING (job, rank) JOIN stage USING (job, rank)
WHERE seen.seen = stage.local AND stage.local <> stage.model AND p.local_index IS NOT NULL;

-- The named owner of a collective that no layer evidence placed, from its own record's
-- structure (pipeline/ingest/derive/attribution.py gave 'loss' and 'optimizer'):
-- 'gradient_bucket', a data-parallel reduction in backward issued outside any autograd node
-- but gradient accumulation (DDP's AccumulateGrad hooks, FSDP's post-backward
-- reduce-scatter, Megatron's finalize_model_grads after the schedule): it carries the
-- gradients of several layers (gradient_bucket_layers.sql splits it); 'parameter_gather',
-- an all-gather in backward that no layer placed (FSDP1's pre-backward prefetch of a unit's
-- parameters); 'metrics', an all-reduce inside a step but outside forward, backward and the
-- optimizer (the loss and metrics a step reports).
CREATE MACRO _named_owner(layer, phase, op, backward_op, step, launch_op_id) AS CASE
    WHEN layer IS NOT NULL THEN NULL
    WHEN phase = 'backward' AND op IN ('all_reduce', 'reduce_scatter')
         AND (backward_op IS NULL OR backward_op LIKE '%AccumulateGrad%')
        THEN 'gradient_bucket'
    WHEN phase = 'backward' AND op = 'all_gather' THEN 'parameter_gather'
    WHEN phase IS NULL AND op = 'all_reduce' AND step IS NOT NULL
         AND launch_op_id IS NOT NULL
        THEN 'metrics' END;

-- What each collective's own record says, with the sizes another source filled.
CREATE VIEW _own_links AS
SELECT c.job, c.rank, c.source, c.file_id, c.collective_id, c.step,
       CASE WHEN c.step IS NOT NULL THEN 'trace' END AS step_from,
       -- forward, backward, optimizer or other
       coalesce(c.phase, CASE
           -- Pipeline schedules issue send/recv between the forward and backward ranges.
           -- Stages follow rank order (Megatron puts pp outermost), so activations flow to
           -- higher ranks (forward) and gradients to lower ones (backward).
           WHEN c.op = 'send' AND c.peer > c.rank OR c.op = 'recv' AND c.peer < c.rank
               THEN 'forward'
           WHEN c.op = 'send' AND c.peer < c.rank OR c.op = 'recv' AND c.peer > c.rank
               THEN 'backward'
           ELSE 'other' END) AS phase,
       -- module path or NVTX range of the layer (a send/recv's cut after its layer), else
       -- its named owner
       coalesce(n.layer, c.owner) AS layer,
       -- the number of the path's innermost layer (the model's, where the path counts per
       -- pipeline stage and a job.yaml says which stage's layers these are)
       coalesce(ml.layer_index, n.layer_index) AS layer_index,
       n.layer_kind,
       coalesce(n.layer_label, c.owner) AS layer_label,
       -- (a named owner is its own evidence)
       coalesce(c.owner, c.attributed_by, 'none') AS attributed_by,
       -- (a profiler call with no group takes its flight recorder call's, _adopted_groups)
       c.op, coalesce(c.comm, g.comm) AS comm, c.backward_op,
       coalesce(c.bytes, f.bytes) AS bytes, coalesce(c.dtype, f.dtype) AS dtype,
       CASE WHEN c.bytes IS NULL AND f.bytes IS NOT NULL THEN f.filled_from
            ELSE c.size_source END AS size_source,
       -- for matching one collective across ranks (clock_offsets.sql), not published
       c.peer, CASE WHEN g.comm IS NOT NULL THEN g.seq ELSE c.seq END AS seq, c.group_size,
       c.enqueue_ns, c.start_ns, c.end_ns, c.dur_ns
FROM (
    -- The global rank of each send/recv peer. NCCL's own records (the log's COLL line, the
    -- NVTX payload in Nsight) give the peer's rank in the communicator; the job's
    -- communicator rows of that source say which global rank holds that place. (Joined
    -- here, in the one read of the collectives' columns, not as a table of its own.)
    SELECT c.* REPLACE (
               CASE WHEN c.source IN ('nccl_log', 'nsys') THEN m.rank ELSE c.peer END AS peer),
           _named_owner(c.layer, c.phase, c.op, c.backward_op, c.step, c.launch_op_id) AS owner
    FROM collectives c
    -- (a place two ranks claim is left unknown: one row per collective, whatever the input)
    LEFT JOIN (SELECT job, source, comm, rank_in_comm, min(rank) AS rank FROM communicators
               WHERE source IN ('nccl_log', 'nsys') AND rank_in_comm IS NOT NULL
               GROUP BY ALL HAVING count(DISTINCT rank) = 1) m
        ON m.job = c.job AND m.source = c.source AND m.comm = c.comm
       AND m.rank_in_comm = c.peer) c
LEFT JOIN _filled_sizes f USING (job, rank, source, file_id, collective_id)
LEFT JOIN _adopted_groups g USING (job, rank, source, file_id, collective_id)
LEFT JOIN _layer_names n ON n.job = c.job AND n.layer = CASE
    WHEN c.attributed_by = 'pp_boundary' THEN _layer_path(c.layer) ELSE c.layer END
LEFT JOIN _model_layer_numbers ml
    ON ml.job = c.job AND ml.rank = c.rank AND ml.local_index = n.layer_index;

-- The profiler's context of each call another source matched to a profiler collective.
-- (rows only from secondary sources)
CREATE TEMP TABLE _matched_context AS
SELECT m.job, m.rank, m.source, m.file_id, m.collective_id, p.step, p.phase, p.layer,
       p.layer_index, p.layer_kind, p.layer_label, p.attributed_by, p.backward_op
FROM collective_matches m
JOIN _own_links p ON p.job = m.job AND p.rank = m.rank AND p.source = m.primary_source
    AND p.file_id = m.primary_file_id AND p.collective_id = m.primary_collective_id;

-- What one collective's traffic looks like (communicator_dims.sql weighs it per
-- communicator): send/recv -> pp; an all_to_all inside a mixture-of-experts layer -> ep, any
-- other all_to_all (a recommendation model's embedding exchange, TorchRec's input
-- distribution, Ulysses attention) -> a2a, its own dimension; an all-reduce issued from inside a
-- layer, or from the backward of a layer's op (not from a gradient-accumulation hook) -> tp;
-- all_gather / reduce_scatter and other all-reduces (gradient buckets, loss) -> dp; anything
-- else -> unknown.
CREATE MACRO _dim_evidence(op, layer, layer_kind, backward_op) AS CASE
    WHEN op IN ('send', 'recv', 'send_recv') THEN 'pp'
    WHEN op IN ('all_to_all', 'notify') AND layer_kind = 'moe' THEN 'ep'
    WHEN op = 'all_to_all' THEN 'a2a'
    WHEN op = 'all_reduce' AND coalesce(layer_kind, '') <> 'loss' AND (
         layer IS NOT NULL
         OR backward_op IS NOT NULL AND backward_op NOT LIKE '%AccumulateGrad%')
        THEN 'tp'
    WHEN op IN ('all_reduce', 'all_gather', 'reduce_scatter') THEN 'dp'
    ELSE 'unknown' END;

-- Whether a layer is a named owner of work outside the model's layers (attribution.py gives
-- loss and optimizer, _named_owner the others), not a module path or a range.
CREATE MACRO _is_named_owner(layer) AS
    layer IN ('loss', 'optimizer', 'gradient_bucket', 'parameter_gather', 'metrics');

-- The layer when it is a module's or a range's, NULL when it is a named owner.
CREATE MACRO _module_layer(layer) AS CASE WHEN NOT _is_named_owner(layer) THEN layer END;

-- A matched call takes the profiler's context. parallel_dim starts as the call's own
-- evidence; communicator_dims.sql puts the communicator's dimension in its place.
CREATE TEMP TABLE _links_attributed AS
WITH linked AS (
    SELECT o.* REPLACE (
               coalesce(o.step, p.step) AS step,
               CASE WHEN o.step IS NULL AND p.step IS NOT NULL THEN 'matched'
                    ELSE o.step_from END AS step_from,
               CASE WHEN p.collective_id IS NOT NULL THEN p.phase ELSE o.phase END AS phase,
               coalesce(p.layer, o.layer) AS layer,
               coalesce(p.layer_index, o.layer_index) AS layer_index,
               coalesce(p.layer_kind, o.layer_kind) AS layer_kind,
               coalesce(p.layer_label, o.layer_label) AS layer_label,
               CASE WHEN p.collective_id IS NOT NULL AND p.attributed_by <> 'none'
                    THEN 'matched:' || p.attributed_by ELSE o.attributed_by END AS attributed_by,
               coalesce(p.backward_op, o.backward_op) AS backward_op)
    FROM _own_links o
    LEFT JOIN _matched_context p USING (job, rank, source, file_id, collective_id)
)
SELECT *, _dim_evidence(op, _module_layer(layer), layer_kind, backward_op)
              AS evidence,
       _dim_evidence(op, _module_layer(layer), layer_kind, backward_op)
              AS parallel_dim
FROM linked;
