-- token_wire: the bytes each parallel dimension put on the wire per training step, by op and
-- phase, summed over all ranks, per token, and beside the analytic model's prediction when the
-- job has a job.yaml. One row per job, step, parallel_dim, op and phase (predicted rows
-- that were never observed appear with calls 0). estimated_bytes is the part of bytes whose
-- size is the model's (size_estimates.sql: calls the trace records without one).
-- Tokens per step: job.yaml's global_batch x seq_len; else the tokens the ranks' token
-- embeddings saw (steps.tokens), counted once per tensor-parallel group.
--
-- reads: _job_facts, collective_links, communicator_dims, communicators, predictions,
--        primary_sources, source_preference, steps
-- creates: token_wire

CREATE VIEW _tp_followers AS
SELECT DISTINCT c.job, c.rank
FROM communicators c
JOIN communicator_dims d USING (job, comm)
-- (a group of several dimensions is listed as 'tp|dp')
WHERE list_has_any(string_split(d.parallel_dim, '|'), ['tp', 'cp']) AND c.rank_in_comm > 0;

CREATE VIEW _step_tokens AS
SELECT s.job, s.step,
       CAST(coalesce(any_value(f.tokens_per_step),
                     sum(s.tokens) FILTER (t.rank IS NULL)) AS BIGINT) AS tokens
FROM steps s
LEFT JOIN _tp_followers t USING (job, rank)
LEFT JOIN _job_facts f USING (job)
GROUP BY ALL;

-- One source per rank (a log and a trace of the same rank would count each call twice):
-- primary_sources (dataset/sources.sql). (A table: _observed reads it twice, a view would
-- read the collectives' parts each time.)
CREATE TEMP TABLE _rank_sources AS
SELECT job, rank, source, source_preference(source) AS source_order FROM primary_sources;

-- A rank counted from a lesser source than the job's best (a rank that was not profiled)
-- adds only the calls placed in a step: the rest of its log lies outside the profiled
-- window, where the profiled ranks count nothing either.
CREATE TEMP TABLE _observed AS
SELECT l.job, l.step, l.parallel_dim, l.op, l.phase,
       count(*) AS calls, sum(l.bytes) AS bytes,
       coalesce(sum(l.bytes) FILTER (l.size_source = 'estimated'), 0) AS estimated_bytes
FROM collective_links l
JOIN _rank_sources r USING (job, rank, source)
JOIN (SELECT job, min(source_order) AS best FROM _rank_sources GROUP BY ALL) j USING (job)
WHERE r.source_order = j.best OR l.step IS NOT NULL
GROUP BY ALL;

CREATE VIEW _predicted AS
SELECT job, parallel_dim, op, phase, sum(calls) AS calls, sum(bytes) AS bytes
FROM predictions GROUP BY ALL;

CREATE VIEW _steps_of_job AS
SELECT DISTINCT job, step FROM _observed;

CREATE TEMP TABLE token_wire AS
WITH keyed AS (
    SELECT o.job, o.step, o.parallel_dim, o.op, o.phase, o.calls, o.bytes, o.estimated_bytes,
           p.calls AS predicted_calls, p.bytes AS predicted_bytes
    FROM _observed o
    LEFT JOIN _predicted p USING (job, parallel_dim, op, phase)
    UNION ALL
    SELECT s.job, s.step, p.parallel_dim, p.op, p.phase, 0, 0, 0, p.calls, p.bytes
    FROM _predicted p
    JOIN _steps_of_job s USING (job)
    ANTI JOIN _observed o ON o.job = p.job AND o.step IS NOT DISTINCT FROM s.step
        AND o.parallel_dim = p.parallel_dim AND o.op = p.op AND o.phase = p.phase
)
SELECT k.job, k.step, k.parallel_dim, k.op, k.phase, k.calls, CAST(k.bytes AS BIGINT) AS bytes,
       t.tokens,
       k.bytes / nullif(t.tokens, 0) AS bytes_per_token,
       CAST(k.predicted_calls AS BIGINT) AS predicted_calls,
       CAST(k.predicted_bytes AS BIGINT) AS predicted_bytes,
       k.bytes / nullif(k.predicted_bytes, 0) AS ratio,
       CAST(k.estimated_bytes AS BIGINT) AS estimated_bytes
FROM keyed k
LEFT JOIN _step_tokens t ON t.job = k.job AND t.step IS NOT DISTINCT FROM k.step;
