-- communicator_dims: the parallel dimension each communicator serves, one row per job and
-- comm. From job.yaml's layout when given (_job_layout, made by the runner; a communicator of
-- another source through the process group collective_matches maps it to); otherwise from
-- what runs on it (the most common evidence of its collectives, collective_links.sql), and for a
-- communicator with no collectives from its rank set (a contiguous block is tp, a strided
-- set dp). A communicator that spans every rank and carries several kinds of traffic is
-- 'world': its collectives then keep their own evidence.
--
-- reads: _comm_map, _comm_sets, _job_layout, _links_attributed, collectives, ranks
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

-- In order: job.yaml; a group of every rank is 'world' when it carries several kinds of
-- traffic; a group carrying only send/recv is pp, only MoE all-to-all ep, only other
-- all-to-all a2a; then the rank set
-- (Megatron's and DeviceMesh's default orders put tp on consecutive ranks, dp and pp on
-- strides): contiguous -> tp (dp when it carries no tensor-parallel-like traffic), strided ->
-- dp; then the most common evidence.
CREATE TEMP TABLE communicator_dims AS
SELECT m.job, m.comm, m.nranks, m.ranks,
       -- dp, tp, pp, cp, ep, world or unknown
       CASE WHEN y.parallel_dim IS NOT NULL THEN y.parallel_dim
            WHEN m.nranks = w.world_size AND (e.kinds IS NULL OR e.kinds <> 1) THEN 'world'
            WHEN m.nranks = w.world_size THEN e.top_evidence
            WHEN e.only_pp AND e.kinds > 0 THEN 'pp'
            WHEN e.only_ep AND e.kinds > 0 THEN 'ep'
            WHEN e.only_a2a AND e.kinds > 0 THEN 'a2a'
            WHEN m.shape = 'contiguous' AND (e.any_tp OR e.kinds IS NULL) THEN 'tp'
            WHEN m.shape IN ('contiguous', 'strided') THEN 'dp'
            ELSE coalesce(e.top_evidence, 'unknown') END AS parallel_dim,
       CASE WHEN y.parallel_dim IS NOT NULL THEN 'job.yaml'
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
