-- The report's data: every query aggregates in DuckDB so that what reaches a chart is small
-- whatever the number of ranks. Each query starts with `-- name: <name>` and a comment saying
-- what it answers; `$job` is the job the report is about.

-- name: jobs
-- Which jobs the dataset holds (files of every source, so a job with no rows still counts).
SELECT job, count(*) AS files FROM files GROUP BY job ORDER BY job;

-- name: link_state
-- What of tokenwire link's the dataset stores for the job: its links to steps and layers, its
-- predictions (a link with a job.yaml); and whether the job has ranks to link at all.
SELECT EXISTS (SELECT 1 FROM collective_links WHERE job = $job) AS linked,
       EXISTS (SELECT 1 FROM predictions WHERE job = $job) AS predicted,
       EXISTS (SELECT 1 FROM ranks WHERE job = $job) AS ranks;

-- name: read_once
-- What several queries below read, read once per report: each becomes a temporary table of
-- the same name, which they then read in place of the view. primary_sources (sources.sql),
-- of which six count one source per rank: each use of the view is a pass over every
-- collective of the dataset. And files, which seven read: one part per file where a job's
-- small parts are not merged, each opened again by every query.
CREATE TEMP TABLE primary_sources AS SELECT * FROM primary_sources;
CREATE TEMP TABLE files AS SELECT * FROM files;

-- name: glance_ranks
-- How many ranks and hosts, and what hardware and library they ran on. Ranks come from the
-- files table (one small part per job), not from scanning every rank's rows.
SELECT
    (SELECT count(DISTINCT r) FROM (SELECT unnest(ranks) AS r FROM files WHERE job = $job)
        WHERE r >= 0) AS ranks_seen,
    max(world_size) AS world_size,
    (SELECT count(DISTINCT host) FROM rank_hosts WHERE job = $job) AS hosts,
    array_to_string(list_sort(list(DISTINCT gpu_name)), ', ') AS gpus,
    array_to_string(list_sort(list(DISTINCT backend)), ', ') AS backends,
    array_to_string(list_sort(list(DISTINCT comm_lib_version)), ', ') AS comm_lib_versions
FROM ranks WHERE job = $job;

-- name: glance_steps
-- Steps traced, their typical duration and the tokens one rank processed in one.
SELECT
    count(DISTINCT step) AS steps,
    min(step) AS first_step,
    max(step) AS last_step,
    median(dur_ns) AS median_step_ns,
    median(tokens) AS median_rank_tokens
FROM steps WHERE job = $job;

-- name: glance_tables
-- Rows of the tables tokenwire link derives (one part per job each: cheap to count).
SELECT 'collective_links' AS "table", count(*) AS rows FROM collective_links WHERE job = $job
UNION ALL SELECT 'collective_instances', count(*) FROM collective_instances WHERE job = $job
UNION ALL SELECT 'communicator_dims', count(*) FROM communicator_dims WHERE job = $job
UNION ALL SELECT 'time_breakdown', count(*) FROM time_breakdown WHERE job = $job
UNION ALL SELECT 'token_wire', count(*) FROM token_wire WHERE job = $job
UNION ALL SELECT 'predictions', count(*) FROM predictions WHERE job = $job;

-- name: sources
-- Files per source format, with their rows and warnings.
SELECT format, count(*) AS files, sum(size_bytes) AS size_bytes, sum(rows) AS rows,
       sum(warnings) AS warnings
FROM files WHERE job = $job GROUP BY format ORDER BY format;

-- name: timed_rows
-- Whether any source of the job carries timings (NCCL logs, nccl-tests and flight recorder
-- dumps alone do not).
SELECT count(*) FILTER (WHERE format IN ('kineto', 'nsys')) AS timed_files
FROM files WHERE job = $job;

-- name: observed_token_wire
-- Observed bytes and calls per step, dimension, op and phase, as tokenwire link derived them.
SELECT step, parallel_dim, op, phase, sum(calls) AS calls, sum(bytes) AS bytes,
       max(tokens) AS tokens, sum(predicted_calls) AS predicted_calls,
       sum(predicted_bytes) AS predicted_bytes
FROM token_wire WHERE job = $job GROUP BY ALL;

-- name: observed_ranks
-- Ranks whose collectives were traced: predictions are summed over these only.
SELECT DISTINCT rank FROM collectives WHERE job = $job AND rank >= 0
    AND source <> 'flight_recorder' ORDER BY rank;

-- name: predictions_stored
-- Predicted calls and bytes per step of the traced ranks, from the predictions table.
SELECT parallel_dim, op, phase, sum(calls) AS predicted_calls, sum(bytes) AS predicted_bytes
FROM predictions
WHERE job = $job AND rank IN (SELECT DISTINCT rank FROM collectives WHERE job = $job)
GROUP BY ALL;

-- name: layer_traffic
-- Bytes per step by layer and phase, from the links of every collective to its layer (one
-- source per rank: primary_sources); a gradient bucket counts under the layers whose
-- gradients it carries (gradient_bucket_layers), each a share of its call.
-- (summed per step first: the steps are counted from those sums, not from a second pass
-- over every link. A collective is one link, so its share of a call is one over its
-- bucket's layers, counted over the buckets alone: a window over every link took most
-- of the query's time.)
WITH buckets AS (
    SELECT *, count(*) OVER (PARTITION BY rank, source, file_id, collective_id) AS layers
    FROM gradient_bucket_layers WHERE job = $job
),
links AS (
    SELECT l.step, l.phase, coalesce(g.layer, l.layer) AS layer,
           coalesce(g.layer_index, l.layer_index) AS layer_index,
           coalesce(g.layer_kind, l.layer_kind) AS layer_kind,
           coalesce(g.layer_label, l.layer_label, g.layer, l.layer) AS layer_label,
           coalesce(g.bytes, l.bytes) AS bytes,
           1.0 / coalesce(g.layers, 1) AS calls
    FROM collective_links l
    JOIN primary_sources p USING (job, rank, source)
    LEFT JOIN buckets g
        ON g.rank = l.rank AND g.source = l.source
       AND g.file_id = l.file_id AND g.collective_id = l.collective_id
    WHERE l.job = $job
),
per_step AS (
    SELECT layer, layer_index, phase, step, any_value(layer_kind) AS layer_kind,
           any_value(layer_label) AS layer_label, sum(calls) AS calls, sum(bytes) AS bytes
    FROM links GROUP BY ALL
),
steps AS (SELECT greatest(count(DISTINCT step), 1) AS n FROM per_step)
SELECT coalesce(layer, '(unattributed)') AS layer, layer_index,
       coalesce(any_value(layer_label), '(unattributed)') AS layer_label,
       coalesce(any_value(layer_kind), 'unknown') AS layer_kind, phase,
       -- (shares of a call summed in thread order differ in their last bits: rounded, so
       -- that the same data gives the same page)
       round(sum(calls) / any_value(steps.n), 9) AS calls_per_step,
       coalesce(sum(bytes), 0) / any_value(steps.n) AS bytes_per_step
FROM per_step, steps GROUP BY ALL ORDER BY ALL;

-- name: time_per_rank
-- Time of each rank split into compute, overlapped and exposed communication and idle,
-- averaged over its steps.
SELECT rank, any_value(timeline) AS timeline, count(*) AS steps,
       avg(compute_ns) AS compute_ns, avg(overlapped_comm_ns) AS overlapped_comm_ns,
       avg(exposed_comm_ns) AS exposed_comm_ns, avg(idle_ns) AS idle_ns,
       avg(window_ns) AS window_ns
FROM time_breakdown WHERE job = $job GROUP BY rank ORDER BY rank;

-- name: time_per_rank_step
-- The same per step (drawn for the rank picked in the report).
SELECT rank, step, compute_ns, overlapped_comm_ns, exposed_comm_ns, idle_ns
FROM time_breakdown WHERE job = $job ORDER BY rank, step;

-- name: top_kernels
-- The kernels that took the most GPU time over all ranks (names are data from the trace).
-- (summed per rank first: a row per rank and kernel counts the ranks without a DISTINCT,
-- which DuckDB works out as a join of its own over every kernel)
WITH per_rank AS (
    SELECT name, kind, rank, count(*) AS calls, sum(dur_ns) AS total_ns
    FROM kernels JOIN primary_kernel_sources USING (job, rank, source) WHERE job = $job
    GROUP BY name, kind, rank
)
SELECT name, kind, CAST(sum(calls) AS BIGINT) AS calls, sum(total_ns) AS total_ns,
       count(rank) AS ranks
FROM per_rank
GROUP BY name, kind ORDER BY total_ns DESC, name, kind LIMIT $limit;

-- name: busbw_instances
-- Achieved bus bandwidth of matched collective instances, binned by message size (powers
-- of two) and op: the bins' bus bytes over their transfer time (achieved_busbw,
-- dataset/measures.sql) and the spread of the instances, so a million instances are a few
-- dozen points.
SELECT op, coalesce(parallel_dim, 'unknown') AS parallel_dim,
       CAST(pow(2, floor(log2(bytes))) AS BIGINT) AS size_bytes,
       count(*) AS instances,
       achieved_busbw(busbw_gbps, min_dur_ns) AS busbw_gbps,
       quantile_cont(busbw_gbps, 0.1) AS busbw_p10,
       quantile_cont(busbw_gbps, 0.9) AS busbw_p90,
       max(busbw_gbps) AS busbw_max
FROM collective_instances
WHERE job = $job
  -- one source per rank (primary_sources)
  AND source IN (SELECT source FROM primary_sources WHERE job = $job)
  AND bytes > 0 AND busbw_gbps IS NOT NULL AND busbw_gbps > 0 AND min_dur_ns > 0
GROUP BY ALL ORDER BY op, size_bytes;

-- name: bandwidth_tests
-- nccl-tests runs of the whole dataset (the network, whichever job measured it).
SELECT job, op, size_bytes, max(busbw_gbps) AS busbw_gbps, max(nranks) AS nranks
FROM bandwidth_tests
WHERE placement = 'out_of_place' AND busbw_gbps IS NOT NULL AND size_bytes > 0
GROUP BY ALL ORDER BY job, op, size_bytes;

-- name: skew_by_rank
-- Who arrives last: per rank, how often it was the last to start a collective and the
-- arrival skew those collectives waited for it.
SELECT late_rank AS rank, count(*) AS late_count, sum(skew_ns) AS late_skew_ns,
       max(skew_ns) AS max_skew_ns
FROM collective_instances
WHERE job = $job
  -- one source per rank (primary_sources)
  AND source IN (SELECT source FROM primary_sources WHERE job = $job)
  AND late_rank IS NOT NULL AND skew_ns IS NOT NULL AND ranks_seen > 1
GROUP BY late_rank ORDER BY late_rank;

-- name: skew_by_where
-- Where the skew is: per parallel dimension, op and phase, the spread of arrival skew and
-- the rank that was last most often (the lowest of equals, so that reports repeat).
WITH inst AS (
    SELECT coalesce(parallel_dim, 'unknown') AS parallel_dim, op,
           coalesce(phase, 'unattributed') AS phase, skew_ns, late_rank
    FROM collective_instances
    WHERE job = $job
      -- one source per rank (primary_sources)
      AND source IN (SELECT source FROM primary_sources WHERE job = $job)
      AND skew_ns IS NOT NULL AND ranks_seen > 1
),
usual AS (
    SELECT parallel_dim, op, phase,
           first(late_rank ORDER BY n DESC, late_rank) AS usual_late_rank
    FROM (SELECT parallel_dim, op, phase, late_rank, count(*) AS n FROM inst GROUP BY ALL)
    GROUP BY ALL
)
SELECT parallel_dim, op, phase, count(*) AS instances,
       median(skew_ns) AS median_skew_ns, quantile_cont(skew_ns, 0.9) AS p90_skew_ns,
       max(skew_ns) AS max_skew_ns, any_value(usual_late_rank) AS usual_late_rank
FROM inst JOIN usual USING (parallel_dim, op, phase)
GROUP BY parallel_dim, op, phase
ORDER BY median_skew_ns DESC, parallel_dim, op, phase;

-- name: skew_top
-- The collectives with the largest arrival skew.
SELECT comm, seq, op, step, phase, layer, parallel_dim, ranks_seen, skew_ns, late_rank
FROM collective_instances
WHERE job = $job
  -- one source per rank (primary_sources)
  AND source IN (SELECT source FROM primary_sources WHERE job = $job)
  AND skew_ns IS NOT NULL AND ranks_seen > 1
ORDER BY skew_ns DESC, comm, seq LIMIT $limit;

-- name: topo_kinds
-- What the NCCL logs say about the topology: rows per kind.
SELECT kind, count(*) AS rows, count(DISTINCT rank) AS ranks,
       count(DISTINCT channel) AS channels
FROM topology WHERE job = $job GROUP BY kind ORDER BY kind;

-- name: topo_transport_channel
-- Connections per channel and transport over all ranks.
SELECT channel, coalesce(transport, 'unknown') AS transport, count(*) AS connections,
       count(DISTINCT rank) AS ranks
FROM topology WHERE job = $job AND kind = 'connection' AND channel IS NOT NULL
GROUP BY ALL ORDER BY channel, transport;

-- name: topo_grid_ranks
-- How many ranks the rank x channel grid (topo_rank_channel) would have: above a limit it
-- is left out, and the grid is not read at all.
SELECT count(*) AS ranks FROM (
    SELECT DISTINCT rank FROM topology
    WHERE job = $job AND kind = 'connection' AND channel IS NOT NULL);

-- name: topo_rank_channel
-- Per rank and channel, the transport of its connections (drawn for small jobs only).
SELECT rank, channel,
       array_to_string(list_sort(list(DISTINCT coalesce(transport, 'unknown'))), ' + ')
           AS transport,
       count(*) AS connections, array_to_string(list_sort(list(DISTINCT peer)), ', ') AS peers
FROM topology WHERE job = $job AND kind = 'connection' AND channel IS NOT NULL
GROUP BY rank, channel ORDER BY rank, channel;

-- name: topo_rings
-- Ring and tree orders, one row per distinct order, those printed by the most ranks first
-- (orders of the same count in numeric order); `orders` counts every distinct order.
SELECT kind, array_to_string(list_sort(list(DISTINCT channel)), ', ') AS channels,
       array_to_string(peers, ' ') AS order_text, count(DISTINCT rank) AS ranks,
       count(*) OVER () AS orders
FROM topology WHERE job = $job AND kind IN ('ring', 'tree') AND peers IS NOT NULL
GROUP BY kind, peers ORDER BY kind, ranks DESC, peers, channels LIMIT $limit;

-- name: quality_files
-- The files of the job, largest first.
SELECT path, format, format_version, size_bytes, len(ranks) AS ranks, rank_source, rows,
       warnings
FROM files WHERE job = $job ORDER BY size_bytes DESC, path LIMIT $limit;

-- name: quality_file_count
-- How many files the job has in all.
SELECT count(*) AS files FROM files WHERE job = $job;

-- name: quality_warnings
-- Distinct warning texts over the job's files, with the number of files that raised them.
SELECT w AS warning, count(*) AS files
FROM (SELECT unnest(warning_messages) AS w FROM files WHERE job = $job)
GROUP BY w ORDER BY files DESC, w LIMIT $limit;

-- name: quality_collectives
-- Collectives the report cannot fully use: no size, no step, and (after link) no layer or
-- no parallel dimension. Counted, never dropped.
-- (after link, a step is the one link found: a logged call matched to a profiled one, or
-- placed through another rank or its log order, is not outside every step)
-- (link writes one row per collective: only the collectives that lack a size or a step
-- of their own are looked up in collective_links, not every one; and the collectives are
-- read twice rather than kept whole as a common table between the two reads)
WITH gaps AS (
    SELECT count(*) FILTER (WHERE coalesce(l.bytes, c.bytes) IS NULL) AS without_bytes,
           count(*) FILTER (WHERE coalesce(l.step, c.step) IS NULL) AS without_step
    FROM collectives c
    LEFT JOIN collective_links l USING (job, rank, source, file_id, collective_id)
    WHERE c.job = $job AND c.source <> 'flight_recorder'
      AND (c.bytes IS NULL OR c.step IS NULL)
)
SELECT count(*) AS collectives, (SELECT without_bytes FROM gaps) AS without_bytes,
       (SELECT without_step FROM gaps) AS without_step,
       count(*) FILTER (WHERE dur_ns IS NULL) AS without_timing
FROM collectives WHERE job = $job AND source <> 'flight_recorder';

-- name: quality_links
-- After tokenwire link: collectives without a layer or a parallel dimension, by evidence.
SELECT attributed_by, parallel_dim = 'unknown' AS dim_unknown, count(*) AS collectives
FROM collective_links WHERE job = $job GROUP BY ALL ORDER BY collectives DESC, attributed_by, dim_unknown;

-- name: quality_steps
-- After tokenwire link: how each source's collectives got their step (their own trace, a
-- matched profiler call, the same collective on a profiled rank, their order in their log).
SELECT source, coalesce(step_from, 'none') AS step_from, count(*) AS collectives
FROM collective_links WHERE job = $job
GROUP BY ALL ORDER BY source, collectives DESC, step_from;

-- name: quality_whole_trace_steps
-- Ranks whose trace has no ProfilerStep ranges: each is one step spanning the trace.
SELECT count(DISTINCT rank) AS ranks FROM steps
WHERE job = $job AND marker = 'whole_trace';

-- name: quality_marked_steps
-- Ranks whose steps are the ranges of a marker the user named (ingest --step-marker), and
-- the markers.
SELECT count(DISTINCT rank) AS ranks, string_agg(DISTINCT marker, ', ' ORDER BY marker) AS markers
FROM steps
WHERE job = $job AND marker NOT IN ('ProfilerStep', 'whole_trace');

-- name: quality_matches
-- After tokenwire link: how many calls of each other source (NCCL logs, Nsight, flight
-- recorder) were paired with the profiler's, by which method, and whether sizes agreed.
SELECT c.source, count(*) AS calls, count(m.collective_id) AS matched,
       count(*) FILTER (WHERE m.method = 'time') AS by_time,
       count(*) FILTER (WHERE m.method = 'order') AS by_order,
       count(*) FILTER (WHERE NOT m.sizes_agree) AS sizes_differ
FROM collectives c
LEFT JOIN collective_matches m USING (job, rank, source, file_id, collective_id)
WHERE c.job = $job AND c.source <> 'kineto'
  AND EXISTS (SELECT 1 FROM collectives k WHERE k.job = $job AND k.source = 'kineto')
  AND EXISTS (SELECT 1 FROM collective_links l WHERE l.job = $job)
GROUP BY ALL ORDER BY c.source;

-- name: quality_instances
-- After tokenwire link: collective instances seen by fewer ranks than their group, or
-- where the ranks disagree on op or size.
SELECT
    count(*) AS instances,
    count(*) FILTER (WHERE NOT consistent) AS inconsistent,
    count(*) FILTER (WHERE group_size IS NOT NULL AND ranks_seen < group_size) AS partial
FROM collective_instances WHERE job = $job
  AND source IN (SELECT source FROM primary_sources WHERE job = $job);

-- name: flight_recorder_rows
-- Whether the job has flight recorder dumps.
SELECT count(*) AS files FROM files WHERE job = $job AND format = 'flight_recorder';

-- name: wait_by_dim
-- Waiting or transferring: per parallel dimension and op, the time ranks spent in
-- collectives split at the last rank's arrival (collective_waits), per traced step.
SELECT coalesce(parallel_dim, 'unknown') AS parallel_dim, op, count(*) AS calls,
       sum(wait_ns) AS wait_ns, sum(transfer_ns) AS transfer_ns,
       sum(wait_ns) / greatest(count(DISTINCT step), 1) AS wait_per_step_ns,
       sum(transfer_ns) / greatest(count(DISTINCT step), 1) AS transfer_per_step_ns,
       sum(wait_ns) / nullif(sum(wait_ns) + sum(transfer_ns), 0) AS wait_share
FROM collective_waits
WHERE job = $job
GROUP BY ALL
ORDER BY sum(wait_ns) + sum(transfer_ns) DESC, parallel_dim, op;

-- name: wait_by_rank
-- Per rank, the time its collectives waited for the last rank and transferred, per traced
-- step, the rank it waited for most (the first by number of equals) and how long.
WITH per_late AS (
    SELECT rank, late_rank, sum(wait_ns) AS ns
    FROM collective_waits
    WHERE job = $job AND late_rank <> rank AND wait_ns > 0
    GROUP BY ALL
)
SELECT w.rank, count(*) AS calls, sum(w.wait_ns) AS wait_ns, sum(w.transfer_ns) AS transfer_ns,
       sum(w.wait_ns) / nullif(sum(w.wait_ns) + sum(w.transfer_ns), 0) AS wait_share,
       any_value(m.late_rank) AS waited_most_for, any_value(m.ns) AS waited_most_ns
FROM collective_waits w
LEFT JOIN (SELECT * FROM per_late
           QUALIFY row_number() OVER (PARTITION BY rank ORDER BY ns DESC, late_rank) = 1) m
    USING (rank)
WHERE w.job = $job
GROUP BY w.rank
ORDER BY w.rank;

-- name: wait_for_rank
-- Per rank that arrived last, the time the other ranks waited for it, over every step.
SELECT late_rank, count(*) AS calls, sum(wait_ns) AS wait_ns
FROM collective_waits
WHERE job = $job AND late_rank <> rank AND wait_ns > 0
GROUP BY late_rank
ORDER BY wait_ns DESC, late_rank;

-- name: straggler_ranks
-- Per rank, the steps it was the straggler of (how many, and which), the wait it caused
-- there and its share of all the waiting in the traced steps (send/recv included: most of
-- it, in a pipeline, is receives waiting for their sends), and the layer it was most often
-- busy in and the dimension it most often delayed meanwhile (equally often: the first by
-- name, so that every report of the same data is the same; mode() leaves ties to thread
-- timing). A layer is shown by its label where link gave it one. The largest share first.
WITH s AS (SELECT * EXCLUDE (busy_layer), coalesce(busy_layer_label, busy_layer) AS busy_layer
           FROM step_stragglers WHERE job = $job),
total AS (SELECT sum(step_wait_ns) AS wait_ns FROM s),
usual_layer AS (
    SELECT rank, first(busy_layer ORDER BY n DESC, busy_layer) AS busy_layer
    FROM (SELECT rank, busy_layer, count(*) AS n FROM s WHERE busy_layer IS NOT NULL
          GROUP BY ALL)
    GROUP BY rank
),
usual_dim AS (
    SELECT rank, first(parallel_dim ORDER BY n DESC, parallel_dim) AS parallel_dim
    FROM (SELECT rank, parallel_dim, count(*) AS n FROM s WHERE parallel_dim IS NOT NULL
          GROUP BY ALL)
    GROUP BY rank
)
SELECT rank, count(*) AS steps, list(step ORDER BY step) AS step_list,
       sum(caused_wait_ns) AS caused_wait_ns,
       sum(caused_wait_ns) / nullif(any_value(total.wait_ns), 0) AS wait_share,
       any_value(l.busy_layer) AS busy_layer, any_value(d.parallel_dim) AS parallel_dim
FROM s LEFT JOIN usual_layer l USING (rank) LEFT JOIN usual_dim d USING (rank), total
GROUP BY rank
ORDER BY wait_share DESC NULLS LAST, caused_wait_ns DESC, rank
LIMIT $limit;

-- name: straggler_ops_top
-- What the stragglers ran while the others waited, over every step: the ops (by own time)
-- and kernels that filled most of those windows, with the layer they most often ran in
-- (equally often: the first by name), by its label where link gave it one.
WITH usual_layer AS (
    SELECT what, name, first(layer ORDER BY n DESC, layer) AS layer
    FROM (SELECT what, name, coalesce(layer_label, layer) AS layer, count(*) AS n
          FROM straggler_ops WHERE job = $job AND layer IS NOT NULL GROUP BY ALL)
    GROUP BY what, name
)
SELECT what, name, any_value(u.layer) AS layer, count(DISTINCT step) AS steps,
       sum(overlap_ns) AS overlap_ns
FROM straggler_ops LEFT JOIN usual_layer u USING (what, name)
WHERE job = $job
GROUP BY what, name
ORDER BY overlap_ns DESC, what, name
LIMIT $limit;

-- name: critical_path_split
-- What the critical paths are made of: compute, and transfers per dimension, summed over
-- the steps and as a share of the steps' length; the bound on what faster transfers of a
-- dimension could save.
WITH parts AS (
    SELECT CASE WHEN segment = 'compute' THEN 'compute'
                ELSE 'transfer ' || coalesce(parallel_dim, 'unknown') END AS part,
           step, dur_ns
    FROM critical_path WHERE job = $job
)
SELECT part, count(DISTINCT step) AS steps, count(*) AS segments, sum(dur_ns) AS dur_ns,
       sum(dur_ns) / (SELECT sum(dur_ns) FROM parts) AS share
FROM parts
GROUP BY part
ORDER BY dur_ns DESC, part;

-- name: critical_path_steps
-- Per step, its critical path's length and how much of it is transfer.
SELECT step, sum(dur_ns) AS dur_ns,
       sum(dur_ns) FILTER (WHERE segment = 'transfer') AS transfer_ns,
       count(DISTINCT rank) AS ranks
FROM critical_path WHERE job = $job
GROUP BY step
ORDER BY step;

-- name: ledger_dims
-- Observed against the model per parallel dimension, per traced step: predicted bytes,
-- observed bytes, the bytes of items seen as predicted (matched), and of the observed bytes
-- those the model estimated (calls whose source records no size).
SELECT parallel_dim,
       sum(predicted_bytes) / count(DISTINCT step) AS predicted_bytes,
       sum(bytes) / count(DISTINCT step) AS bytes,
       coalesce(sum(bytes) FILTER (WHERE size_source = 'estimated'), 0)
           / count(DISTINCT step) AS estimated_bytes,
       sum(bytes) FILTER (WHERE status = 'matched') / count(DISTINCT step) AS matched_bytes,
       count(*) FILTER (WHERE status <> 'matched') AS differing_rows
FROM ledger
WHERE job = $job
GROUP BY parallel_dim
ORDER BY sum(predicted_bytes) + sum(bytes) DESC, parallel_dim;

-- name: ledger_reasons
-- Why the bytes of a parallel dimension and op differ from the model's, the report's one
-- rule for it: the status and reason of each distinct item of the ledger (tokenwire link
-- --config), matched ones included.
SELECT DISTINCT parallel_dim, op, status, reason FROM ledger WHERE job = $job ORDER BY ALL;

-- name: estimated_sizes
-- Observed bytes per step whose size is the model's (size_estimates.sql: calls the trace
-- records without one), per parallel dimension (one source per rank, as token_wire counts).
SELECT l.parallel_dim, count(*) AS calls,
       sum(l.bytes) / count(DISTINCT l.step) AS bytes_per_step
FROM collective_links l JOIN primary_sources p USING (job, rank, source)
WHERE l.job = $job AND l.size_source = 'estimated' AND l.step IS NOT NULL
GROUP BY ALL ORDER BY ALL;

-- name: ledger_items
-- Every item that is not seen as predicted (missing, unpredicted, resized, other counts),
-- per traced step (the mean over the steps where it appears), its layer by its label.
SELECT status, parallel_dim, op, phase, purpose, layer,
       coalesce(any_value(layer_label), layer) AS layer_label,
       avg(predicted_calls) AS predicted_calls, any_value(predicted_message_bytes)
           AS predicted_message_bytes,
       avg(calls) AS calls, any_value(message_bytes) AS message_bytes,
       avg(bytes) - avg(predicted_bytes) AS bytes_difference, any_value(reason) AS reason,
       bool_or(size_source = 'estimated') AS estimated
FROM ledger
WHERE job = $job AND status <> 'matched'
GROUP BY status, parallel_dim, op, phase, purpose, layer, predicted_message_bytes,
         message_bytes
ORDER BY abs(avg(bytes) - avg(predicted_bytes)) DESC, parallel_dim, op, phase, status, purpose,
         layer, predicted_message_bytes, message_bytes
LIMIT $limit;

-- name: wire_summary
-- The wire table of the job (tokenwire link): rows, estimated rows, steps, bytes in and
-- across hosts, and the algorithms as logged or assumed.
SELECT count(*) AS flows, count(*) FILTER (estimated) AS estimated_flows,
       count(DISTINCT step) AS steps, count(DISTINCT src_host) AS hosts,
       sum(bytes) AS bytes, coalesce(sum(bytes) FILTER (inter_host), 0) AS inter_host_bytes,
       array_to_string(list_sort(list(DISTINCT algorithm)), ', ') AS algorithms
FROM wire WHERE job = $job;

-- name: wire_host_matrix
-- Bytes per step each host sends each host (rows in a step; all rows when none has one).
-- (wire read twice: a common table of it read twice is kept whole, every column)
WITH s AS (SELECT count(DISTINCT step) AS steps FROM wire WHERE job = $job)
SELECT coalesce(w.src_host, '(unknown)') AS src_host,
       coalesce(w.dst_host, '(unknown)') AS dst_host,
       sum(w.bytes) / greatest(any_value(s.steps), 1) AS bytes_per_step
FROM wire w, s WHERE w.job = $job AND (w.step IS NOT NULL OR s.steps = 0)
GROUP BY ALL ORDER BY ALL;

-- name: wire_split_dims
-- Intra- and inter-host bytes per step of each parallel dimension (mean over steps).
SELECT coalesce(parallel_dim, 'unknown') AS parallel_dim,
       avg(intra_host_bytes) AS intra_host_bytes, avg(inter_host_bytes) AS inter_host_bytes,
       avg(inter_host_bytes_per_token) AS inter_host_bytes_per_token
FROM wire_split WHERE job = $job AND step IS NOT NULL
GROUP BY ALL ORDER BY parallel_dim;

-- name: wire_demand_pick
-- The step and scope wire_demand_step draws: the first step with timed rows, across hosts
-- where anything crosses them in any step, else inside them (wire_demand's rows of the job
-- going out; a timed row of wire is a row of them in one bucket or more).
SELECT min(step) AS step,
       CASE WHEN bool_or(inter_host) THEN 'inter_host' ELSE 'intra_host' END AS scope
FROM wire WHERE job = $job AND step IS NOT NULL AND start_ns IS NOT NULL;

-- name: wire_demand_step
-- What each host sends per 1 ms bucket over step $step, in Gbit/s (0 in the buckets it sends
-- nothing), in $scope (wire_demand_pick). (Given as values, the step and scope reach the
-- scan of wire: only that step's transfers are cut into buckets.)
WITH sent AS (SELECT coalesce(host, '(unknown)') AS host, scope, bucket_start_ns,
                     sum(gbps) AS gbps
              FROM wire_demand
              WHERE job = $job AND direction = 'out' AND step = $step AND scope = $scope
              GROUP BY ALL),
     grid AS (SELECT h.host, h.scope, unnest(range(b.first, b.last + 1, 1000000)) AS bucket_start_ns,
                     b.first
              FROM (SELECT DISTINCT host, scope FROM sent) h,
                   (SELECT min(bucket_start_ns) AS first, max(bucket_start_ns) AS last
                    FROM sent) b)
SELECT g.host, g.scope, (g.bucket_start_ns - g.first) / 1e6 AS ms,
       coalesce(s.gbps, 0) AS gbps
FROM grid g LEFT JOIN sent s USING (host, scope, bucket_start_ns)
ORDER BY g.host, ms;

-- name: wire_busiest
-- The links that carry the most bytes per step (counted as wire_host_matrix).
WITH w AS (SELECT * FROM wire WHERE job = $job),
     s AS (SELECT count(DISTINCT step) AS steps FROM w)
SELECT w.src_rank, w.dst_rank, any_value(w.src_host) AS src_host,
       any_value(w.dst_host) AS dst_host, any_value(w.transport) AS transport,
       sum(w.bytes) / greatest(any_value(s.steps), 1) AS bytes_per_step, count(*) AS flows
FROM w, s WHERE w.step IS NOT NULL OR s.steps = 0
GROUP BY w.src_rank, w.dst_rank ORDER BY bytes_per_step DESC, w.src_rank, w.dst_rank
LIMIT 10;

-- name: verdict_conflicts
-- Where job.yaml's layout contradicts the traces (tokenwire link's layout_check): each
-- statement, the groups it holds for and the ranks of the first.
SELECT statement, count(DISTINCT ranks) AS groups, min(ranks) AS first_ranks
FROM (SELECT unnest(layout_conflicts) AS statement, ranks FROM communicator_dims
      WHERE job = $job AND layout_conflicts IS NOT NULL)
GROUP BY statement ORDER BY statement;

-- name: verdict_ledger
-- Observed against the model over the ledger, per traced step: both totals, and the item
-- that differs by the most bytes (as ledger_items orders them) with its reason.
WITH per_step AS (
    SELECT sum(bytes) / count(DISTINCT step) AS bytes,
           sum(predicted_bytes) / count(DISTINCT step) AS predicted_bytes,
           -- (items as ledger_items lists them: one over the steps)
           count(DISTINCT (status, parallel_dim, op, phase, purpose, layer,
                           predicted_message_bytes, message_bytes))
               FILTER (WHERE status <> 'matched') AS differing_items
    FROM ledger WHERE job = $job
),
top AS (
    SELECT status, parallel_dim, op, phase, purpose, layer,
           avg(predicted_calls) AS predicted_calls,
           any_value(predicted_message_bytes) AS predicted_message_bytes,
           avg(calls) AS calls, any_value(message_bytes) AS message_bytes,
           avg(bytes) - avg(predicted_bytes) AS bytes_difference, any_value(reason) AS reason
    FROM ledger
    WHERE job = $job AND status <> 'matched'
    GROUP BY status, parallel_dim, op, phase, purpose, layer, predicted_message_bytes,
             message_bytes
    ORDER BY abs(avg(bytes) - avg(predicted_bytes)) DESC, parallel_dim, op, phase, status
    LIMIT 1
)
SELECT * FROM per_step LEFT JOIN top ON true WHERE per_step.bytes IS NOT NULL;

-- name: verdict_time
-- How much of the step is exposed communication (time_breakdown, over every rank and step),
-- and what the ranks wait for (collective_waits): the dimension, op and phase, and whom (the
-- pipeline stage of the last ranks to arrive, from the pp communicators, and those ranks),
-- whose waits add up to the most; the ranks that wait in it at least half as long, per step,
-- as the rank that waits longest there, with the mean share of their step; and the share of
-- all time in collectives that is waiting.
WITH windows AS (
    SELECT rank, count(*) AS steps, avg(window_ns) AS window_ns FROM time_breakdown
    WHERE job = $job GROUP BY rank
),
stages AS (
    SELECT DISTINCT unnest(ranks) AS rank, unnest(generate_series(0, len(ranks) - 1)) AS stage
    FROM communicator_dims WHERE job = $job AND parallel_dim = 'pp' AND ranks IS NOT NULL
),
waits AS (
    SELECT w.rank, coalesce(w.parallel_dim, 'unknown') AS parallel_dim, w.op,
           coalesce(w.phase, 'unattributed') AS phase,
           -- ('' where the last rank is in no pipeline: the ranks are listed instead)
           coalesce('stage ' || s.stage, '') AS waited_for, w.late_rank, w.wait_ns
    FROM collective_waits w LEFT JOIN stages s ON s.rank = w.late_rank
    WHERE w.job = $job AND w.late_rank <> w.rank AND w.wait_ns > 0
),
top AS (
    SELECT parallel_dim, op, phase, waited_for
    FROM waits GROUP BY ALL
    ORDER BY sum(wait_ns) DESC, parallel_dim, op, phase, waited_for LIMIT 1
),
per_rank AS (
    SELECT w.rank, sum(w.wait_ns) / any_value(n.steps) AS wait_per_step_ns,
           sum(w.wait_ns) / any_value(n.steps) / any_value(n.window_ns) AS step_share,
           list(DISTINCT w.late_rank) AS late_ranks
    FROM waits w JOIN top USING (parallel_dim, op, phase, waited_for) JOIN windows n USING (rank)
    GROUP BY w.rank
),
waiting AS (
    SELECT * FROM per_rank
    WHERE wait_per_step_ns >= 0.5 * (SELECT max(wait_per_step_ns) FROM per_rank)
)
SELECT (SELECT sum(exposed_comm_ns) / nullif(sum(window_ns), 0) FROM time_breakdown
        WHERE job = $job) AS exposed_share,
       (SELECT count(DISTINCT rank) FROM time_breakdown WHERE job = $job) AS ranks,
       (SELECT sum(wait_ns) / nullif(sum(wait_ns) + sum(transfer_ns), 0) FROM collective_waits
        WHERE job = $job) AS wait_share,
       top.parallel_dim, top.op, top.phase, top.waited_for,
       (SELECT list(rank ORDER BY rank) FROM waiting) AS waiting_ranks,
       (SELECT avg(step_share) FROM waiting) AS waiting_step_share,
       (SELECT list_sort(list_distinct(flatten(list(late_ranks)))) FROM waiting) AS late_ranks
FROM (SELECT 1) LEFT JOIN top ON true;

-- name: verdict_rank_waits
-- Per rank, ms per step of its step: waiting in each of the three (dimension, op, phase)
-- the ranks wait in longest, waiting in the others, moving data in collectives, and the
-- rest of the step (its time_breakdown window less its collectives' time, at least 0).
WITH windows AS (
    SELECT rank, count(*) AS steps, avg(window_ns) AS window_ns FROM time_breakdown
    WHERE job = $job GROUP BY rank
),
-- (each rank's waits summed per dimension, op and phase first: the rest reads those sums,
-- not every wait again, and names them once each)
w AS (
    SELECT rank, coalesce(parallel_dim, 'unknown') || ' ' || op || ' '
               || coalesce(phase, 'unattributed') AS what, wait_ns, transfer_ns, busy_ns
    FROM (SELECT rank, parallel_dim, op, phase, sum(wait_ns) AS wait_ns,
                 sum(transfer_ns) AS transfer_ns, sum(wait_ns + transfer_ns) AS busy_ns
          FROM collective_waits WHERE job = $job GROUP BY ALL)
),
top AS (
    SELECT what FROM w GROUP BY what HAVING sum(wait_ns) > 0
    ORDER BY sum(wait_ns) DESC, what LIMIT 3
),
parts AS (
    SELECT w.rank, CASE WHEN t.what IS NOT NULL THEN 'waiting: ' || w.what
                        ELSE 'waiting: other' END AS part, w.wait_ns AS ns
    FROM w LEFT JOIN top t USING (what)
    UNION ALL
    SELECT rank, 'moving data', transfer_ns FROM w
)
SELECT p.rank, p.part, sum(p.ns) / any_value(n.steps) / 1e6 AS ms
FROM parts p JOIN windows n USING (rank) GROUP BY ALL
UNION ALL
SELECT n.rank, 'rest of the step',
       greatest(any_value(n.window_ns) - coalesce(sum(w.busy_ns), 0)
                / any_value(n.steps), 0) / 1e6
FROM windows n LEFT JOIN w USING (rank) GROUP BY n.rank
ORDER BY 1, 2;
