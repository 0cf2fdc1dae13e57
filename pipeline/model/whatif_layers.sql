-- How is each job's measured compute split among its layers? Host time of the outermost
-- compute ops of the profiled steps (aten ops, and the autograd engine's backward nodes with
-- the aten ops they run), per class: transformer layers, the embedding, the LM head, and
-- other (the optimizer, the loss, anything outside a module). A forward op names its module;
-- a backward node is the module of the forward op with its autograd sequence number
-- (_forward_modules, registered by pipeline/model/whatif.py from the one rule that places
-- backward collectives, attribution.forward_module_paths). The layer patterns are
-- those of collective_links.sql's _layer_kind and _layer_index.
WITH units AS (
    SELECT job, rank, file_id, tid, name, module_path, seq_nr, start_ns, end_ns, dur_ns
    FROM ops
    WHERE kind = 'cpu_op' AND step IS NOT NULL AND dur_ns > 0
      AND (name LIKE 'aten::%' OR name LIKE 'autograd::engine::evaluate_function:%')
),
-- (a unit inside an earlier one on its thread is part of that one's time)
outermost AS (
    SELECT * FROM (
        SELECT *, max(end_ns) OVER (PARTITION BY job, rank, file_id, tid
                                    ORDER BY start_ns, end_ns DESC
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
        FROM units)
    WHERE prev_end IS NULL OR prev_end < end_ns
),
placed AS (
    SELECT o.job, coalesce(o.module_path, f.module_path) AS path, o.dur_ns
    FROM outermost o
    LEFT JOIN _forward_modules f
        ON o.module_path IS NULL AND o.name LIKE 'autograd::engine::evaluate_function:%'
       AND f.job = o.job AND f.rank = o.rank AND f.file_id = o.file_id AND f.seq_nr = o.seq_nr
)
SELECT job,
       CASE
           WHEN regexp_matches(path, '(?:^|/)(?:\w*(?:[Bb]locks?|[Ll]ayers?)|h)[._]?\d+(?:/|$)')
               THEN 'transformer'
           WHEN regexp_matches(lower(path), 'embed') THEN 'embedding'
           WHEN regexp_matches(lower(path), 'lm_?head|output_?layer|(?:^|/)head') THEN 'lm_head'
           ELSE 'other'
       END AS class,
       sum(dur_ns) AS ns
FROM placed
GROUP BY ALL
ORDER BY job, class;
