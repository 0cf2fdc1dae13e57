-- size_estimates: a size for the collectives whose source records none, where the model
-- has the item: the token exchanges of an MoE communication library (DeepEP's dispatch and
-- combine kernels carry no arguments, and no host op records their buffers). Such a call
-- takes the message size of its rank's predicted item (job.yaml) of the same dimension, op,
-- phase and direction (towards the experts: the kernel named dispatch, forward dispatch and
-- the backward of combine; back: combine), and size_source 'estimated', which the ledger and
-- the wire carry on. Without a job.yaml, or where the model has no such item, the size stays
-- unknown. The same calls, and the library's metadata exchanges, take the layout's
-- expert-parallel group as their communicator where the trace names none (_layout_ep_groups,
-- from job.yaml: DeepEP's buffer is made over that process group), so that the wire can
-- spread their bytes over its members.
--
-- An MoE library's all-to-alls and metadata exchanges are the expert-parallel dimension
-- where nothing placed them in an MoE layer (a trace without chunk annotations or module
-- scopes, whose evidence said a2a or unknown): DeepEP serves expert parallelism alone.
--
-- reads: _ep_directions, _layout_ep_groups, _layout_ep_members, _links_dimmed,
--        _moe_exchange_kernels, _moe_library, collectives, predictions
-- creates: _layout_comm_sets, _links_sized
-- takes: _links_dimmed

-- The predicted message of each rank's expert-parallel item, by phase and direction.
CREATE TEMP TABLE _predicted_exchanges AS
SELECT p.job, p.rank, p.parallel_dim, p.op, p.phase, d.direction,
       max(p.bytes // p.calls) AS message_bytes
FROM predictions p
JOIN _ep_directions d USING (purpose)
WHERE p.calls > 0
GROUP BY ALL;

ALTER TABLE _links_dimmed RENAME TO _links_sized;

UPDATE _links_sized l
SET parallel_dim = 'ep'
FROM (SELECT c.job, c.rank, c.source, c.file_id, c.collective_id
      FROM collectives c
      JOIN _moe_library m ON regexp_matches(lower(c.op_name), m.pattern)
      WHERE c.op IN ('all_to_all', 'notify')) c
WHERE c.job = l.job AND c.rank = l.rank AND c.source = l.source AND c.file_id = l.file_id
  AND c.collective_id = l.collective_id AND l.parallel_dim IN ('a2a', 'unknown');

-- The sizeless calls of an exchange kernel, with the direction its name says.
CREATE TEMP TABLE _sizeless_exchanges AS
SELECT l.job, l.rank, l.source, l.file_id, l.collective_id, l.parallel_dim, l.op, l.phase,
       k.direction
FROM _links_sized l
JOIN collectives c USING (job, rank, source, file_id, collective_id)
JOIN _moe_exchange_kernels k
  ON regexp_matches(lower(c.op_name), '::' || k.pattern || '\b')
WHERE l.bytes IS NULL AND l.op = 'all_to_all';

UPDATE _links_sized l
SET bytes = e.message_bytes, size_source = 'estimated'
FROM (SELECT s.job, s.rank, s.source, s.file_id, s.collective_id,
             max(p.message_bytes) AS message_bytes
      FROM _sizeless_exchanges s
      JOIN _predicted_exchanges p
        ON p.job = s.job AND p.rank = s.rank AND p.parallel_dim = s.parallel_dim
       AND p.op = s.op AND p.phase = s.phase AND p.direction IN (s.direction, 'both')
      GROUP BY ALL) e
WHERE e.job = l.job AND e.rank = l.rank AND e.source = l.source AND e.file_id = l.file_id
  AND e.collective_id = l.collective_id;

-- The communicator of the expert-parallel calls no source placed in one: the layout's group,
-- whose members the wire reads beside the communicators' (_comm_sets).
UPDATE _links_sized l
SET comm = g.comm
FROM _layout_ep_groups g
WHERE g.job = l.job AND g.rank = l.rank AND l.comm IS NULL AND l.parallel_dim = 'ep'
  AND l.op IN ('all_to_all', 'notify');

CREATE TEMP TABLE _layout_comm_sets AS
SELECT s.job, s.source, s.comm, len(m.ranks) AS nranks, m.ranks
FROM (SELECT DISTINCT job, source, comm FROM _links_sized WHERE comm LIKE 'job.yaml:ep:%') s
JOIN _layout_ep_members m USING (job, comm);
