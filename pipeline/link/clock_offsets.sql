-- clock_offsets: how far each rank's clock is off the job's, estimated from collective
-- completion times. One row per job and rank. A collective ends at nearly the same instant
-- on every rank of its communicator, so a rank's median gap between its end times and the
-- median end of the same instances is its offset. Ranks on one host share a clock: when a
-- job has a single host (or none recorded), every offset is 0 and only the residual is
-- reported.

-- One collective across the ranks of its communicator: collectives match by communicator
-- and sequence number; send and recv match as the k-th transfer from one rank to another.
CREATE TEMP TABLE _instance_rows AS
SELECT c.job, c.rank, c.source, c.collective_id,
       CASE WHEN c.op IN ('send', 'recv') AND c.peer IS NOT NULL
            THEN coalesce(c.comm, '(none)') || ' p2p '
                 || CAST(CASE WHEN c.op = 'send' THEN c.rank ELSE c.peer END AS VARCHAR) || '->'
                 || CAST(CASE WHEN c.op = 'send' THEN c.peer ELSE c.rank END AS VARCHAR)
            ELSE coalesce(c.comm, '(none)') END AS instance_comm,
       CASE WHEN c.op IN ('send', 'recv') AND c.peer IS NOT NULL
            THEN row_number() OVER (
                PARTITION BY c.job, c.source, c.rank, c.comm, c.op, c.peer
                ORDER BY c.enqueue_ns, c.start_ns, c.collective_id) - 1
            ELSE c.seq END AS instance_seq,
       c.op, l.bytes, c.group_size, c.start_ns, c.end_ns, c.dur_ns
FROM collectives c
JOIN collective_links l USING (job, rank, source, file_id, collective_id)
WHERE c.op NOT IN ('send', 'recv') AND c.seq IS NOT NULL
   OR c.op IN ('send', 'recv') AND c.peer IS NOT NULL;

CREATE VIEW _instance_ends AS
SELECT job, source, instance_comm, instance_seq, median(end_ns) AS median_end_ns
FROM _instance_rows
WHERE end_ns IS NOT NULL
GROUP BY ALL
HAVING count(DISTINCT rank) > 1;

CREATE VIEW _rank_hosts AS
SELECT job, rank, arg_max(host, host IS NOT NULL) AS host
FROM ranks GROUP BY ALL;

CREATE VIEW _multi_host AS
SELECT job, count(DISTINCT host) > 1 AS multi_host FROM _rank_hosts GROUP BY ALL;

CREATE TEMP TABLE _rank_gaps AS
SELECT r.job, r.rank, r.end_ns - e.median_end_ns AS gap_ns
FROM _instance_rows r
JOIN _instance_ends e USING (job, source, instance_comm, instance_seq);

CREATE TEMP TABLE clock_offsets AS
WITH est AS (
    SELECT g.job, g.rank, count(*) AS instances,
           CASE WHEN coalesce(m.multi_host, false)
                THEN CAST(round(median(g.gap_ns)) AS BIGINT) ELSE 0 END AS offset_ns
    FROM _rank_gaps g
    LEFT JOIN _multi_host m USING (job)
    GROUP BY g.job, g.rank, m.multi_host
)
SELECT h.job, h.rank, h.host,
       -- subtract from the rank's times
       coalesce(est.offset_ns, 0) AS offset_ns,
       -- median |end gap| left after the correction
       CAST(round((SELECT median(abs(g.gap_ns - coalesce(est.offset_ns, 0)))
                   FROM _rank_gaps g WHERE g.job = h.job AND g.rank = h.rank)) AS BIGINT)
           AS residual_ns,
       coalesce(est.instances, 0) AS instances
FROM _rank_hosts h
LEFT JOIN est USING (job, rank);
