-- What do a job's own collectives say about the network's latency and bandwidth? One point
-- per (op, ranks, message size) for pipeline/model/timing.py's alpha-beta fit: the median
-- over the job's collective instances that every rank of the group traced with one op and
-- size, of the shortest duration across the ranks (the rank that arrived last waited least:
-- closest to the transfer itself). Shaped as bandwidth_tests' rows (out of place, in us).
SELECT op,
       coalesce(group_size, ranks_seen) AS nranks,
       bytes AS size_bytes,
       'out_of_place' AS placement,
       median(min_dur_ns) / 1e3 AS time_us,
       count(*) AS calls
FROM collective_instances
WHERE job = $job AND consistent AND min_dur_ns > 0 AND bytes > 0
  AND op IN ('all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all')
  AND ranks_seen = coalesce(group_size, ranks_seen) AND ranks_seen > 1
GROUP BY ALL
ORDER BY op, nranks, size_bytes;
