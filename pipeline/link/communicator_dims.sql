-- communicator_dims: the parallel dimension each communicator serves, one row per job and
-- comm. From job.yaml's layout when given (_job_layout, made by the runner; a communicator of
-- another source through the process group collective_matches maps it to); else from the
-- process group's name (a DeviceMesh dimension, torchtitan's or Megatron-LM's group names);
-- otherwise from what runs on it (the most common evidence of its collectives, collective_links.sql), and for a
-- communicator with no collectives from its rank set (a contiguous block is tp, a strided
-- set dp). A communicator that spans every rank and carries several kinds of traffic is
-- 'world': its collectives then keep their own evidence.
--
-- reads: _comm_map, _comm_sets, _job_facts, _job_layout, _links_attributed, collectives,
--        communicators, ranks
-- creates: communicator_dims, _links_dimmed
-- takes: _links_attributed

-- Members: the rank sets of every source (_comm_sets, collective_matches.sql) and the ranks
-- that ran a collective on the communicator.
CREATE VIEW _comm_members AS
SELECT job, comm, max(nranks) AS nranks,
       nullif(list_sort(list_distinct(flatten(list(ranks)))), []) AS ranks
FROM (SELECT job, comm, nranks, ranks FROM _comm_sets
      UNION ALL
      SELECT job, comm, group_size, [rank] FROM collectives
      WHERE comm IS NOT NULL)
GROUP BY ALL;

CREATE VIEW _comm_evidence AS
SELECT job, comm,
       arg_max(evidence, n) FILTER (evidence <> 'unknown') AS top_evidence,
       count(*) FILTER (evidence <> 'unknown') AS kinds,
       bool_and(evidence IN ('pp', 'unknown')) AS only_pp,
       bool_and(evidence IN ('ep', 'unknown')) AS only_ep,
       bool_and(evidence IN ('a2a', 'unknown')) AS only_a2a,
       bool_or(evidence = 'tp') AS any_tp
FROM (SELECT job, comm, evidence, count(*) AS n
      FROM _links_attributed WHERE comm IS NOT NULL GROUP BY ALL)
GROUP BY ALL;

-- The dimension a process group's name says. DeviceMesh names the group of each mesh
-- dimension mesh_<dim name> (torch/distributed/device_mesh.py, v2.13.0); torchtitan's mesh
-- dimensions are dp_replicate, dp_shard, cp, tp, pp, ep (and flattened ones: dp, dp_cp,
-- dp_shard_cp); Megatron-LM's group_desc TENSOR_MODEL_PARALLEL_GROUP, DATA_PARALLEL_GROUP
-- (_WITH_CP), CONTEXT_PARALLEL_GROUP, PIPELINE_MODEL_PARALLEL_GROUP,
-- EXPERT_MODEL_PARALLEL_GROUP, EXPERT_DATA_PARALLEL_GROUP (megatron/core/parallel_state.py);
-- a numbered copy (tp_0, dp_1) says the same. NULL for any other name.
CREATE MACRO _name_dim(name) AS (
    WITH n AS (SELECT regexp_replace(regexp_replace(lower(name), '^mesh_', ''),
                                     '_\d+$', '') AS n)
    SELECT CASE
        WHEN n IN ('dp', 'dp_replicate', 'dp_shard', 'replicate', 'shard', 'dp_cp',
                   'dp_shard_cp', 'fsdp', 'hsdp', 'ddp', 'data_parallel_group',
                   'data_parallel_group_with_cp', 'expert_data_parallel_group') THEN 'dp'
        WHEN n IN ('tp', 'tensor_model_parallel_group') THEN 'tp'
        WHEN n IN ('cp', 'context_parallel_group') THEN 'cp'
        WHEN n IN ('pp', 'pipeline_model_parallel_group') THEN 'pp'
        WHEN n IN ('ep', 'expert_model_parallel_group') THEN 'ep'
    END FROM n);

-- The name of each communicator's process group (any source that has one), as a dimension.
CREATE VIEW _comm_names AS
SELECT job, comm, any_value(_name_dim(pg_desc)) AS name_dim
FROM communicators WHERE _name_dim(pg_desc) IS NOT NULL
GROUP BY ALL;

CREATE VIEW _world AS
SELECT job, greatest(max(world_size), count(DISTINCT rank)) AS world_size
FROM ranks GROUP BY ALL;

-- The shape of a rank set: contiguous (a block of consecutive ranks), strided (an
-- arithmetic progression with a step above 1) or other.
CREATE VIEW _comm_shape AS
SELECT job, comm, nranks, ranks,
       CASE WHEN len(ranks) <> nranks OR nranks < 2 THEN 'other'
            WHEN list_max(ranks) - list_min(ranks) + 1 = nranks THEN 'contiguous'
            WHEN (list_max(ranks) - list_min(ranks)) % (nranks - 1) = 0
                 AND list_sort(ranks) = generate_series(list_min(ranks), list_max(ranks),
                     (list_max(ranks) - list_min(ranks)) // (nranks - 1))
                THEN 'strided'
            ELSE 'other' END AS shape
FROM _comm_members;

-- In order: job.yaml, where its layout has the group; the group's name; a group of every rank is 'world' when it carries several kinds of
-- traffic; a group carrying only send/recv is pp, only MoE all-to-all ep, only other
-- all-to-all a2a; then the rank set
-- (Megatron's and DeviceMesh's default orders put tp on consecutive ranks, dp and pp on
-- strides): contiguous -> tp (dp when it carries no tensor-parallel-like traffic), strided ->
-- dp; then the most common evidence.
CREATE TEMP TABLE communicator_dims AS
SELECT m.job, m.comm, m.nranks, m.ranks,
       -- dp, tp, pp, cp, ep, world or unknown
       CASE WHEN y.parallel_dim IS NOT NULL AND y.parallel_dim <> 'unknown' THEN y.parallel_dim
            WHEN n.name_dim IS NOT NULL THEN n.name_dim
            WHEN y.parallel_dim IS NOT NULL THEN y.parallel_dim
            WHEN m.nranks = w.world_size AND (e.kinds IS NULL OR e.kinds <> 1) THEN 'world'
            WHEN m.nranks = w.world_size THEN e.top_evidence
            WHEN e.only_pp AND e.kinds > 0 THEN 'pp'
            WHEN e.only_ep AND e.kinds > 0 THEN 'ep'
            WHEN e.only_a2a AND e.kinds > 0 THEN 'a2a'
            WHEN m.shape = 'contiguous' AND (e.any_tp OR e.kinds IS NULL) THEN 'tp'
            WHEN m.shape IN ('contiguous', 'strided') THEN 'dp'
            ELSE coalesce(e.top_evidence, 'unknown') END AS parallel_dim,
       CASE WHEN y.parallel_dim IS NOT NULL AND y.parallel_dim <> 'unknown' THEN 'job.yaml'
            WHEN n.name_dim IS NOT NULL THEN 'name'
            WHEN y.parallel_dim IS NOT NULL THEN 'job.yaml'
            WHEN m.nranks = w.world_size AND (e.kinds IS NULL OR e.kinds <> 1) THEN 'rank_sets'
            WHEN m.nranks = w.world_size THEN 'ops'
            WHEN (e.only_pp OR e.only_ep OR e.only_a2a) AND e.kinds > 0 THEN 'ops'
            WHEN m.shape IN ('contiguous', 'strided') THEN 'rank_sets'
            WHEN e.top_evidence IS NOT NULL THEN 'ops'
            ELSE 'unknown' END AS dim_source,
       -- what in the traces contradicts job.yaml's layout here (layout_check.py)
       nullif(y.conflicts, []) AS layout_conflicts
FROM _comm_shape m
-- another source's communicator that maps to a process group (NCCL commId, Nsight comm hash)
-- takes that group's place in job.yaml's layout
LEFT JOIN (SELECT job, comm, any_value(primary_comm) AS primary_comm
           FROM _comm_map GROUP BY ALL) p USING (job, comm)
LEFT JOIN _job_layout y ON y.job = m.job AND y.comm = coalesce(p.primary_comm, m.comm)
LEFT JOIN _comm_evidence e USING (job, comm)
LEFT JOIN _comm_names n USING (job, comm)
LEFT JOIN _world w USING (job);

-- A collective takes its communicator's dimension; on a 'world' or 'unknown' communicator
-- it keeps its own evidence (collective_links.sql), and on one that job.yaml makes the group
-- of several dimensions ('dp|ep': with dp = ep one group serves both) it keeps its evidence
-- when that is one of them, else takes the first.
ALTER TABLE _links_attributed RENAME TO _links_dimmed;
UPDATE _links_dimmed l
SET parallel_dim = CASE WHEN list_contains(string_split(d.parallel_dim, '|'), l.evidence)
                        THEN l.evidence ELSE string_split(d.parallel_dim, '|')[1] END
FROM communicator_dims d
WHERE d.job = l.job AND d.comm = l.comm AND d.parallel_dim NOT IN ('world', 'unknown');

-- A job.yaml whose layout has no such model-parallel dimension (degree 1) has no group of
-- it: a collective left with its own evidence for one (a backward all-reduce reads as tp)
-- is 'unknown' there. (dp stays: gradient and loss all-reduces are dp's whatever its degree.)
UPDATE _links_dimmed l
SET parallel_dim = 'unknown'
FROM _job_facts f
WHERE f.job = l.job AND l.parallel_dim IN ('tp', 'cp', 'pp', 'ep')
  AND NOT list_contains(f.dims, l.parallel_dim);
