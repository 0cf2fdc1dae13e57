-- What did one training step of each job take, and how much of it was compute? Medians over
-- ranks and profiled steps of time_breakdown's window and compute time, the observation a
-- what-if projection (pipeline/model/whatif.py) starts from. One timeline per rank and step:
-- the device's where there is one, else the host's.
WITH ranked AS (
    SELECT job, rank, step, window_ns, compute_ns,
           row_number() OVER (PARTITION BY job, rank, step
                              ORDER BY CASE WHEN timeline = 'gpu' THEN 0 ELSE 1 END) AS pick
    FROM time_breakdown
    WHERE window_ns > 0
)
SELECT job, median(window_ns) AS step_ns, median(compute_ns) AS compute_ns, count(*) AS samples
FROM ranked
WHERE pick = 1
GROUP BY job
ORDER BY job;
