-- wire: the bytes each collective instance puts on each directed connection between two
-- ranks. One row per job, instance (comm and seq of collective_instances) and directed
-- pair src_rank -> dst_rank, summed over the channels that carry the pair. The model of
-- each algorithm, with the NCCL source it follows, is docs/wire.md; per instance of message
-- size M (collectives.bytes) on n ranks:
--   ring all_reduce          every rank sends 2(n-1)/n x M to its ring successor
--   ring all_gather,
--        reduce_scatter      every rank sends (n-1)/n x M to its ring successor
--   broadcast / reduce       M along the ring as a chain from the root / to the root
--   tree all_reduce          M up every tree edge (child -> parent), M down (parent -> child)
--   all_to_all               M/n from every rank to every other
--   gather / scatter         M/n from every other rank to the root / from the root
--   send/recv                M from the sender to the receiver
-- Rings and trees are the NCCL log's (topology), split over its channels; without them,
-- rank order (a ring; a binary tree in heap order), and the row is `estimated`. So is a
-- row whose algorithm no log named (a ring is assumed) or one the table models as a ring
-- (NVLS, CollNet, PAT), and one whose size is the model's (size_source 'estimated': an MoE
-- library's kernel that records none). Each instance comes from one source per job, so a
-- call held in a profiler trace, an NCCL log and an Nsight export moves its bytes once.
--
-- reads: _comm_sets, _instance_rows, _layout_comm_sets, _rank_hosts, _source_instances,
--        bus_factor,
--        collective_links, collective_matches, collectives, communicators,
--        source_preference, topology
-- creates: wire

-- The source of each job's instances: the one that saw the most ranks (a rank only an NCCL
-- log recorded still moves bytes), then a timed one, then the most trusted
-- (source_preference, dataset/sources.sql): collective_waits' source on a job every source
-- covers.
CREATE TEMP TABLE _wire_source AS
SELECT job, arg_min(source, (-ranks, untimed, source_preference(source))) AS source
FROM (SELECT job, source, count(DISTINCT rank) AS ranks,
             bool_and(start_ns IS NULL) AS untimed
      FROM _instance_rows GROUP BY ALL)
GROUP BY job;

-- Every call of those instances, and the calls of other sources matched to it (or it to
-- them): the NCCL log says the algorithm (TUNING), the comm whose rings to use and the root.
CREATE TEMP TABLE _wire_calls AS
WITH own AS (
    SELECT r.job, r.source AS i_source, r.instance_comm AS i_comm, r.instance_seq AS i_seq,
           r.rank, r.source, r.file_id, r.collective_id
    FROM _instance_rows r JOIN _wire_source USING (job, source)
),
linked AS (
    SELECT * FROM own
    UNION ALL
    SELECT o.job, o.i_source, o.i_comm, o.i_seq, m.rank, m.source, m.file_id, m.collective_id
    FROM own o
    JOIN collective_matches m
      ON m.job = o.job AND m.rank = o.rank AND m.primary_source = o.source
     AND m.primary_file_id = o.file_id AND m.primary_collective_id = o.collective_id
    UNION ALL
    SELECT o.job, o.i_source, o.i_comm, o.i_seq, m.rank, m.primary_source, m.primary_file_id,
           m.primary_collective_id
    FROM own o
    JOIN collective_matches m
      ON m.job = o.job AND m.rank = o.rank AND m.source = o.source
     AND m.file_id = o.file_id AND m.collective_id = o.collective_id
)
SELECT l.job, l.i_source, l.i_comm, l.i_seq, l.source, c.comm, c.algorithm, c.protocol,
       -- NCCL's records give the root as a rank in the communicator
       CASE WHEN l.source IN ('nccl_log', 'nsys') THEN g.rank ELSE c.root END AS root_rank
FROM linked l
JOIN collectives c
  ON c.job = l.job AND c.rank = l.rank AND c.source = l.source AND c.file_id = l.file_id
 AND c.collective_id = l.collective_id
LEFT JOIN (SELECT job, source, comm, rank_in_comm, min(rank) AS rank FROM communicators
           WHERE rank_in_comm IS NOT NULL GROUP BY ALL HAVING count(DISTINCT rank) = 1) g
  ON g.job = c.job AND g.source = c.source AND g.comm = c.comm AND g.rank_in_comm = c.root
-- (only the calls that say something: an instance none of whose calls does gets no
-- evidence row, which reads as one of NULLs)
WHERE c.algorithm IS NOT NULL OR c.protocol IS NOT NULL OR c.root IS NOT NULL
   OR c.source = 'nccl_log';

-- What the calls say of each instance (the NCCL log's word first, then Nsight's kernel name).
CREATE MACRO _wire_trust(source) AS CASE source WHEN 'nccl_log' THEN 0 WHEN 'nsys' THEN 1
                                               ELSE 2 END;
CREATE TEMP TABLE _wire_evidence AS
SELECT job, i_source AS source, i_comm AS comm, i_seq AS seq,
       arg_min(algorithm, (_wire_trust(source), algorithm))
           FILTER (algorithm IS NOT NULL) AS algorithm,
       arg_min(protocol, (_wire_trust(source), protocol))
           FILTER (protocol IS NOT NULL) AS protocol,
       min(comm) FILTER (source = 'nccl_log') AS log_comm,
       arg_min(root_rank, (_wire_trust(source), root_rank))
           FILTER (root_rank IS NOT NULL) AS root_rank
FROM _wire_calls GROUP BY ALL;

-- Global rank of each place in an NCCL log's communicator (a place two ranks claim: none).
CREATE TEMP TABLE _log_places AS
SELECT job, comm, rank_in_comm, min(rank) AS rank FROM communicators
WHERE source = 'nccl_log' AND rank_in_comm IS NOT NULL
GROUP BY ALL HAVING count(DISTINCT rank) = 1;

-- NCCL communicators whose members are all known.
CREATE TEMP TABLE _log_members AS
SELECT job, comm, nranks AS n, ranks FROM _comm_sets
WHERE source = 'nccl_log' AND len(ranks) = nranks;

-- Each rank's ring successor per channel: from its own `Ring c : prev -> me -> next` line,
-- or from rank 0's `Channel c/N : r0 r1 ...` order (kept only when it lists every rank: the
-- line is cut after 20 ranks, or at 127 characters, in some versions).
CREATE TEMP TABLE _log_rings AS
WITH succ AS (
    SELECT t.job, t.comm, t.channel, t.rank AS src, g.rank AS dst
    FROM topology t
    JOIN _log_places g ON g.job = t.job AND g.comm = t.comm AND g.rank_in_comm = t.peers[2]
    WHERE t.kind = 'ring' AND t.detail = 'prev/next'
    UNION
    SELECT o.job, o.comm, o.channel, a.rank, b.rank
    FROM (SELECT job, comm, channel, peers, unnest(range(1, len(peers) + 1)) AS k
          FROM topology WHERE kind = 'ring' AND detail LIKE 'order of %') o
    JOIN _log_members m ON m.job = o.job AND m.comm = o.comm AND m.n = len(o.peers)
    JOIN _log_places a ON a.job = o.job AND a.comm = o.comm AND a.rank_in_comm = o.peers[o.k]
    JOIN _log_places b
      ON b.job = o.job AND b.comm = o.comm AND b.rank_in_comm = o.peers[o.k % len(o.peers) + 1]
),
one AS (  -- (a rank whose lines disagree has none)
    SELECT job, comm, channel, src, min(dst) AS dst FROM succ
    GROUP BY ALL HAVING count(DISTINCT dst) = 1
)
-- channels whose ring passes through every member once
SELECT o.* FROM one o
SEMI JOIN (SELECT o.job, o.comm, o.channel FROM one o JOIN _log_members m USING (job, comm)
           GROUP BY o.job, o.comm, o.channel, m.n
           HAVING count(DISTINCT o.src) = m.n AND count(DISTINCT o.dst) = m.n) c
    USING (job, comm, channel);

-- Each rank's tree parent per channel (`Trees [c] d0/d1/d2->me->up`, `Tree c : up -> me ->
-- ...`), for channels whose tree holds every member with n-1 edges.
CREATE TEMP TABLE _log_trees AS
WITH nodes AS (
    SELECT DISTINCT t.job, t.comm, t.channel, t.rank AS child, g.rank AS parent
    FROM topology t
    LEFT JOIN _log_places g
      ON g.job = t.job AND g.comm = t.comm AND g.rank_in_comm = t.peers[1]
    WHERE t.kind = 'tree' AND t.comm IS NOT NULL
)
SELECT n.job, n.comm, n.channel, n.child, n.parent FROM nodes n
SEMI JOIN (SELECT n.job, n.comm, n.channel FROM nodes n JOIN _log_members m USING (job, comm)
           GROUP BY n.job, n.comm, n.channel, m.n
           HAVING count(DISTINCT n.child) = m.n AND count(n.parent) = m.n - 1
              AND count(*) = m.n) c
    USING (job, comm, channel)
WHERE n.parent IS NOT NULL;

-- The same, summed over channels: the share of a message each pair carries.
CREATE TEMP TABLE _log_ring_edges AS
SELECT r.job, r.comm, r.src, r.dst, count(*) AS channels, min(r.channel) AS channel,
       count(*) / any_value(c.nch) AS share
FROM _log_rings r
JOIN (SELECT job, comm, count(DISTINCT channel) AS nch FROM _log_rings GROUP BY ALL) c
    USING (job, comm)
GROUP BY r.job, r.comm, r.src, r.dst;

CREATE TEMP TABLE _log_tree_edges AS
SELECT t.job, t.comm, t.child, t.parent, count(*) AS channels, min(t.channel) AS channel,
       count(*) / any_value(c.nch) AS share
FROM _log_trees t
JOIN (SELECT job, comm, count(DISTINCT channel) AS nch FROM _log_trees GROUP BY ALL) c
    USING (job, comm)
GROUP BY t.job, t.comm, t.child, t.parent;

-- An NCCL communicator of the same members, for an instance no log call was matched to
-- (only where one fits: two would be two process groups of the same ranks).
CREATE TEMP TABLE _wire_log_comm_by_set AS
SELECT o.job, o.source, o.comm, min(k.comm) AS log_comm
FROM _comm_sets o
JOIN _log_members k ON k.job = o.job AND k.ranks = o.ranks
WHERE o.source <> 'nccl_log' AND len(o.ranks) = o.nranks
GROUP BY ALL HAVING count(DISTINCT k.comm) = 1;

-- The instances, each with its members (sorted global ranks), model and evidence. A
-- send/recv instance's comm is `<comm> p2p <src>-><dst>`, or `p2p <src>-><dst>` where the
-- source names no communicator (clock_offsets.sql); a collective's comm may be NULL.
CREATE TEMP TABLE _wire_inst AS
WITH base AS (
    SELECT i.*, regexp_extract(coalesce(i.comm, ''), '^(?:.* )?p2p (-?\d+)->(-?\d+)$',
                               ['src', 'dst']) AS p2p,
           e.algorithm AS logged, e.protocol, e.log_comm, e.root_rank
    FROM _source_instances i
    JOIN _wire_source USING (job, source)
    LEFT JOIN _wire_evidence e
      ON e.job = i.job AND e.source = i.source AND e.comm IS NOT DISTINCT FROM i.comm
     AND e.seq = i.seq
    WHERE i.bytes > 0 AND i.op NOT IN ('barrier', 'unknown')
),
-- a call nothing placed in a step when its instance was made may have one since
-- (instance_context.sql); only the calls of instances without a step are looked up (in a
-- profiled job, few or none)
late_steps AS (
    SELECT r.job, r.source, r.instance_comm AS comm, r.instance_seq AS seq,
           arg_min(l.step, l.rank) AS step
    FROM (SELECT DISTINCT job, source, comm, seq FROM base WHERE step IS NULL) u
    JOIN _instance_rows r
      ON r.job = u.job AND r.source = u.source AND r.instance_comm IS NOT DISTINCT FROM u.comm
     AND r.instance_seq = u.seq
    JOIN collective_links l
      ON l.job = r.job AND l.rank = r.rank AND l.source = r.source AND l.file_id = r.file_id
     AND l.collective_id = r.collective_id
    WHERE l.step IS NOT NULL
    GROUP BY ALL
),
shaped AS (
    SELECT b.*, coalesce(b.step, ls.step) AS step_any,
           CASE WHEN b.p2p.src = '' THEN s.ranks END AS members,
           coalesce(b.log_comm, c.log_comm) AS topo_comm,
           CASE WHEN b.p2p.src <> '' THEN 'p2p'
                WHEN b.op = 'all_reduce' AND b.logged = 'tree' THEN 'tree'
                WHEN b.op IN ('all_reduce', 'all_gather', 'reduce_scatter') THEN 'ring'
                WHEN b.op IN ('broadcast', 'reduce') THEN 'chain'
                WHEN b.op IN ('all_to_all', 'gather', 'scatter') THEN b.op
           END AS model
    FROM base b
    LEFT JOIN late_steps ls
      ON ls.job = b.job AND ls.source = b.source AND ls.comm IS NOT DISTINCT FROM b.comm
     AND ls.seq = b.seq
    LEFT JOIN (SELECT job, source, comm, ranks FROM _comm_sets
               UNION ALL
               SELECT job, source, comm, ranks FROM _layout_comm_sets) s
      ON s.job = b.job AND s.source = b.source AND s.comm = b.comm
    LEFT JOIN _wire_log_comm_by_set c
      ON c.job = b.job AND c.source = b.source AND c.comm = b.comm
)
SELECT s.job, s.source, s.comm, s.seq, s.op, s.model, CAST(s.bytes AS DOUBLE) AS m,
       CASE WHEN s.model = 'p2p' THEN 2 ELSE len(s.members) END AS n, s.members,
       TRY_CAST(s.p2p.src AS BIGINT) AS p2p_src, TRY_CAST(s.p2p.dst AS BIGINT) AS p2p_dst,
       -- the root as a global rank: NCCL's place in the comm, else the lowest member
       coalesce(list_filter(s.members, lambda r: r = s.root_rank)[1], s.members[1]) AS root,
       s.model IN ('chain', 'gather', 'scatter')
           AND coalesce(NOT list_contains(s.members, s.root_rank), true) AS root_guessed,
       CASE WHEN s.model IN ('p2p', 'all_to_all', 'gather', 'scatter') THEN 'p2p'
            ELSE coalesce(s.logged, 'ring') END AS algorithm,
       s.protocol,
       -- a ring or tree no log named, or an algorithm whose traffic is modelled as a ring
       s.model IN ('ring', 'tree', 'chain')
           AND (s.logged IS NULL OR s.logged NOT IN ('ring', 'tree')) AS algorithm_guessed,
       -- the log's rings and trees, where they pass through the same members
       CASE WHEN s.model IN ('ring', 'chain') THEN r.comm END AS ring_comm,
       CASE WHEN s.model = 'tree' THEN t.comm END AS tree_comm,
       s.last_start_ns AS start_ns, s.min_dur_ns AS dur_ns, s.step_any AS step, s.phase,
       s.layer, s.parallel_dim, coalesce(s.size_source = 'estimated', false) AS size_estimated
FROM shaped s
LEFT JOIN _log_members k ON k.job = s.job AND k.comm = s.topo_comm AND k.ranks = s.members
LEFT JOIN (SELECT DISTINCT job, comm FROM _log_rings) r ON r.job = k.job AND r.comm = k.comm
LEFT JOIN (SELECT DISTINCT job, comm FROM _log_trees) t ON t.job = k.job AND t.comm = k.comm
WHERE s.model IS NOT NULL
  AND (s.model = 'p2p'
       OR len(s.members) = coalesce(s.group_size, len(s.members)) AND len(s.members) > 1);

-- Directed pairs and the bytes each instance puts on them. What a ring sends from each rank
-- per byte of message is the bus-bandwidth factor (bus_factor, dataset/sources.sql).
CREATE TEMP TABLE _wire_edges AS
WITH ring_topo AS (
    SELECT i.job, i.comm, i.seq, e.src, e.dst,
           i.m * bus_factor(i.op, i.n) * e.share AS bytes,
           e.channel, e.channels, 'topology' AS path
    FROM _wire_inst i JOIN _log_ring_edges e ON e.job = i.job AND e.comm = i.ring_comm
    WHERE i.model = 'ring'
),
ordered AS (  -- instances without the log's rings or trees: positions in rank order
    SELECT *, unnest(range(1, n + 1)) AS k FROM _wire_inst
    WHERE model IN ('ring', 'chain') AND ring_comm IS NULL
       OR model = 'tree' AND tree_comm IS NULL
),
ring_order AS (
    SELECT job, comm, seq, members[k] AS src, members[k % n + 1] AS dst,
           m * bus_factor(op, n) AS bytes,
           NULL::BIGINT AS channel, NULL::BIGINT AS channels, 'rank_order' AS path
    FROM ordered WHERE model = 'ring'
),
tree_topo AS (
    SELECT i.job, i.comm, i.seq, e.child AS src, e.parent AS dst, i.m * e.share AS bytes,
           e.channel, e.channels, 'topology' AS path
    FROM _wire_inst i JOIN _log_tree_edges e ON e.job = i.job AND e.comm = i.tree_comm
    WHERE i.model = 'tree'
),
tree_order AS (  -- a binary tree in heap order: the parent of position k is k // 2
    SELECT job, comm, seq, members[k] AS src, members[k // 2] AS dst, m AS bytes,
           NULL::BIGINT AS channel, NULL::BIGINT AS channels, 'rank_order' AS path
    FROM ordered WHERE model = 'tree' AND k > 1
),
-- broadcast and reduce: the ring as a chain, per channel, starting (ending) at the root
chain_links AS (
    SELECT i.job, i.comm, i.seq, i.op, i.root, i.m, r.src, r.dst, r.channel,
           count(*) OVER (PARTITION BY i.job, i.comm, i.seq, r.src) AS nch, 'topology' AS path
    FROM _wire_inst i JOIN _log_rings r ON r.job = i.job AND r.comm = i.ring_comm
    WHERE i.model = 'chain'
    UNION ALL
    SELECT job, comm, seq, op, root, m, members[k], members[k % n + 1], NULL, 1, 'rank_order'
    FROM ordered WHERE model = 'chain'
),
chain AS (
    SELECT job, comm, seq, src, dst, sum(m / nch) AS bytes,
           CASE WHEN count(channel) = 1 THEN min(channel) END AS channel,
           count(channel) AS channels, any_value(path) AS path
    FROM chain_links
    WHERE NOT (op = 'broadcast' AND dst = root) AND NOT (op = 'reduce' AND src = root)
    GROUP BY job, comm, seq, src, dst
),
spread AS (  -- all_to_all, gather, scatter: point-to-point, M/n per pair
    SELECT job, comm, seq, op, root, m, n, unnest(members) AS src, members FROM _wire_inst
    WHERE model IN ('all_to_all', 'gather', 'scatter')
),
pairs AS (
    SELECT job, comm, seq, src, unnest(members) AS dst, m / n AS bytes, op, root FROM spread
)
SELECT * FROM ring_topo
UNION ALL SELECT * FROM ring_order
UNION ALL SELECT * FROM tree_topo
UNION ALL SELECT job, comm, seq, dst, src, bytes, channel, channels, path FROM tree_topo
UNION ALL SELECT * FROM tree_order
UNION ALL SELECT job, comm, seq, dst, src, bytes, channel, channels, path FROM tree_order
UNION ALL SELECT job, comm, seq, src, dst, bytes, channel,
                 CASE WHEN channels > 0 THEN channels END, path FROM chain
UNION ALL
SELECT job, comm, seq, src, dst, bytes, NULL, NULL, 'peers' FROM pairs
WHERE src <> dst AND (op = 'all_to_all' OR op = 'gather' AND dst = root
                      OR op = 'scatter' AND src = root)
UNION ALL
SELECT job, comm, seq, p2p_src, p2p_dst, m, NULL, NULL, 'peers' FROM _wire_inst
WHERE model = 'p2p';

-- The transport between two ranks: what the NCCL log's connection lines of any of its
-- communicators name most often (`[receive]` lines are the receiver's: their peer is the
-- sender); the network device on each side where the line names one (NET/<net>/<dev>).
CREATE TEMP TABLE _wire_transport AS
WITH lines AS (
    SELECT t.job,
           CASE WHEN t.detail LIKE '%[receive]' THEN g.rank ELSE t.rank END AS src,
           CASE WHEN t.detail LIKE '%[receive]' THEN t.rank ELSE g.rank END AS dst,
           t.transport,
           nullif(regexp_extract(t.detail, '^NET/[^/]+/(\d+)', 1), '') AS dev,
           t.detail LIKE '%[receive]' AS receive
    FROM topology t
    JOIN _log_places g ON g.job = t.job AND g.comm = t.comm AND g.rank_in_comm = t.peer
    WHERE t.kind = 'connection' AND t.transport IS NOT NULL
)
SELECT job, src, dst,
       first(transport ORDER BY n DESC, transport) AS transport,
       first(dev ORDER BY n DESC, dev) FILTER (NOT receive AND dev IS NOT NULL) AS src_nic,
       first(dev ORDER BY n DESC, dev) FILTER (receive AND dev IS NOT NULL) AS dst_nic
FROM (SELECT *, count(*) OVER (PARTITION BY job, src, dst, transport) AS n FROM lines)
GROUP BY ALL;

-- (a view: link writes its rows straight from the query, and no other file reads them)
CREATE VIEW wire AS
SELECT i.job, i.source, i.comm, i.seq, i.op, i.algorithm, i.protocol, e.path,
       i.algorithm_guessed OR i.root_guessed OR e.path = 'rank_order' OR i.size_estimated
           AS estimated,
       e.src AS src_rank, e.dst AS dst_rank, hs.host AS src_host, hd.host AS dst_host,
       CASE WHEN hs.host IS NOT NULL AND hd.host IS NOT NULL
            THEN hs.host <> hd.host END AS inter_host,
       t.transport, t.src_nic, t.dst_nic, e.channel, e.channels, e.bytes,
       i.start_ns, i.dur_ns, i.step, i.phase, i.layer, i.parallel_dim
FROM _wire_edges e
JOIN _wire_inst i
  ON i.job = e.job AND i.comm IS NOT DISTINCT FROM e.comm AND i.seq = e.seq
LEFT JOIN _rank_hosts hs ON hs.job = e.job AND hs.rank = e.src
LEFT JOIN _rank_hosts hd ON hd.job = e.job AND hd.rank = e.dst
LEFT JOIN _wire_transport t ON t.job = e.job AND t.src = e.src AND t.dst = e.dst
WHERE e.src IS NOT NULL AND e.dst IS NOT NULL AND e.src <> e.dst;
