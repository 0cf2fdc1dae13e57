-- clock_offsets: how far each rank's clock is off the job's, estimated from collective
-- completion times. One row per job and rank. A collective ends at nearly the same instant
-- on every rank of its communicator, and ranks of one host share a clock, so a host's
-- offset is the median gap between its end times and the reference host's (that of the
-- lowest rank) over the collectives they share. A job on one host (or with no hosts
-- recorded) has every offset 0; the residual is reported either way.
--
-- reads: _links_sized, rank_hosts
-- creates: _instance_rows, _links_keyed, _rank_hosts, clock_offsets
-- takes: _links_sized

-- One collective across the ranks of its communicator: collectives match by communicator
-- and sequence number; send and recv match as the k-th transfer from one rank to another.
-- The key (instance_comm, instance_seq) is the communicator itself for a collective, NULL
-- where the source names none (NULL-safe: every join on it uses IS NOT DISTINCT FROM), and
-- `<comm> p2p <src>-><dst>` for a send/recv (`p2p <src>-><dst>` without a communicator).
-- Every per-rank row carries its instance key, so a call joins to its collective_instances
-- row directly (job, source, instance_comm, instance_seq); instance_seq is NULL where it is
-- in no instance (no sequence number, or a send/recv whose peer is unknown). A collective's
-- key is its own columns, set without a join; only the send/recv rows, numbered apart (a
-- window over every call would sort them all), are joined back to their calls by row
-- (rowid: the table's rows stay where they are until the update).
ALTER TABLE _links_sized RENAME TO _links_keyed;
ALTER TABLE _links_keyed ADD COLUMN instance_comm VARCHAR;
ALTER TABLE _links_keyed ADD COLUMN instance_seq BIGINT;
UPDATE _links_keyed SET instance_comm = comm, instance_seq = seq
WHERE op NOT IN ('send', 'recv') AND seq IS NOT NULL;
CREATE TEMP TABLE _p2p_keys AS
SELECT rowid AS links_row,
       concat_ws(' ', comm, 'p2p')
           || ' ' || CAST(CASE WHEN op = 'send' THEN rank ELSE peer END AS VARCHAR) || '->'
           || CAST(CASE WHEN op = 'send' THEN peer ELSE rank END AS VARCHAR) AS instance_comm,
       row_number() OVER (PARTITION BY job, source, rank, comm, op, peer
                          ORDER BY enqueue_ns, start_ns, seq, collective_id) - 1 AS instance_seq
FROM _links_keyed WHERE op IN ('send', 'recv') AND peer IS NOT NULL;
UPDATE _links_keyed l
SET instance_comm = r.instance_comm, instance_seq = r.instance_seq
FROM _p2p_keys r
WHERE l.rowid = r.links_row;

-- The calls that are in an instance, with what the files after this one match them by.
CREATE TEMP TABLE _instance_rows AS
SELECT job, rank, source, file_id, collective_id, instance_comm, instance_seq, op, bytes,
       group_size, start_ns, end_ns, dur_ns, step, phase, layer, layer_kind, parallel_dim,
       size_source
FROM _links_keyed WHERE instance_seq IS NOT NULL;

-- (sources may spell a host differently: rank_hosts, sources.sql, gives each host one name;
-- a table: the statements below and wire.sql read it eight times, a view would read every
-- part of the ranks each time)
CREATE TEMP TABLE _rank_hosts AS
SELECT job, rank, host FROM rank_hosts;

-- The reference clock of a job: the host of its lowest rank.
CREATE VIEW _reference_host AS
SELECT job, arg_min(coalesce(host, ''), rank) AS host FROM _rank_hosts GROUP BY ALL;

-- Median end time of each instance on each host (of jobs on several hosts: on one host
-- there is no offset to find), for the instances the reference host saw: no other is
-- compared. (On 16,384 ranks, 8 to a host, the tensor-parallel instances of every other
-- host are four fifths of the calls: their medians were a third of link's clock offsets.)
CREATE TEMP TABLE _host_ends AS
SELECT r.job, coalesce(h.host, '') AS host, r.source, r.instance_comm, r.instance_seq,
       median(r.end_ns) AS end_ns
FROM _instance_rows r
JOIN _rank_hosts h USING (job, rank)
SEMI JOIN (SELECT job FROM _rank_hosts GROUP BY ALL
           HAVING count(DISTINCT coalesce(host, '')) > 1) USING (job)
SEMI JOIN (SELECT DISTINCT r.job, r.source, r.instance_comm, r.instance_seq
           FROM _instance_rows r
           JOIN _rank_hosts h USING (job, rank)
           JOIN _reference_host rh ON rh.job = h.job AND rh.host = coalesce(h.host, '')
           WHERE r.end_ns IS NOT NULL) seen
    ON seen.job = r.job AND seen.source = r.source
   AND seen.instance_comm IS NOT DISTINCT FROM r.instance_comm
   AND seen.instance_seq = r.instance_seq
WHERE r.end_ns IS NOT NULL
GROUP BY ALL;

-- A host's offset: the median of its end times minus the reference host's, over the
-- instances the two share. Hosts that share none with the reference keep offset 0.
-- (the reference host's end times first: DuckDB otherwise paired the hosts sharing each
-- instance, every one with every other, and kept those of the reference host after, 10.7
-- million pairs and 0.4 s for the 2,048 hosts of 16,384 ranks)
CREATE TEMP TABLE _host_offsets AS
WITH ref AS MATERIALIZED (
    SELECT e.* FROM _host_ends e JOIN _reference_host rh ON rh.job = e.job AND rh.host = e.host
)
SELECT e.job, e.host, CAST(round(median(e.end_ns - ref.end_ns)) AS BIGINT) AS offset_ns,
       count(*) AS instances
FROM _host_ends e
JOIN ref ON ref.job = e.job AND ref.source = e.source
    AND ref.instance_comm IS NOT DISTINCT FROM e.instance_comm
    AND ref.instance_seq = e.instance_seq
WHERE e.host <> ref.host
GROUP BY ALL;

-- Each rank's offset: its host's. (A table: the residuals below read it for every call,
-- twice; a rank's offset once is one join per call instead of two.)
CREATE TEMP TABLE _rank_offsets AS
SELECT h.job, h.rank, coalesce(o.offset_ns, 0) AS offset_ns
FROM _rank_hosts h
LEFT JOIN _host_offsets o ON o.job = h.job AND o.host = coalesce(h.host, '');

-- Each rank's end times against its instances' median end, on the aligned clock.
CREATE VIEW _aligned_ends AS
SELECT r.job, r.rank, r.source, r.instance_comm, r.instance_seq, r.end_ns - o.offset_ns AS end_ns
FROM _instance_rows r
JOIN _rank_offsets o USING (job, rank)
WHERE r.end_ns IS NOT NULL;

CREATE VIEW _rank_residuals AS
SELECT a.job, a.rank, CAST(round(median(abs(a.end_ns - c.end_ns))) AS BIGINT) AS residual_ns,
       count(*) AS instances
FROM _aligned_ends a
-- (an instance seen on one rank says nothing of the clocks)
JOIN (SELECT job, source, instance_comm, instance_seq, median(end_ns) AS end_ns
      FROM _aligned_ends GROUP BY ALL HAVING count(*) > 1) c
    ON c.job = a.job AND c.source = a.source AND c.instance_comm IS NOT DISTINCT FROM
       a.instance_comm AND c.instance_seq = a.instance_seq
GROUP BY ALL;

CREATE TEMP TABLE clock_offsets AS
SELECT h.job, h.rank, h.host,
       -- subtract from the rank's times to put them on the reference host's clock
       coalesce(o.offset_ns, 0) AS offset_ns,
       -- median |end gap| left after the correction
       g.residual_ns,
       coalesce(g.instances, 0) AS instances
FROM _rank_hosts h
LEFT JOIN _host_offsets o ON o.job = h.job AND o.host = coalesce(h.host, '')
LEFT JOIN _rank_residuals g ON g.job = h.job AND g.rank = h.rank;
