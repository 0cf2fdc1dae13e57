-- Which source counts for a rank, made by every connection (tokenwire link's too, before
-- any derived table exists).

-- source_preference: the order in which one rank's records of the same calls are trusted:
-- the profiler's (kineto), else Nsight's, else the NCCL log's, else the flight recorder's.
CREATE MACRO source_preference(source) AS CASE source WHEN 'kineto' THEN 0 WHEN 'nsys' THEN 1
                                                      WHEN 'nccl_log' THEN 2 ELSE 3 END;

-- primary_sources: per job and rank, the one source whose records traffic totals count. A
-- rank traced by the profiler and also logged by NCCL or exported by Nsight holds each call
-- two or three times; totals take the most preferred source the rank has.
CREATE VIEW primary_sources AS
SELECT job, rank, arg_min(source, source_preference(source)) AS source
FROM (SELECT DISTINCT job, rank, source FROM collectives)
GROUP BY ALL;
