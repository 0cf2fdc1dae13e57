-- Which nccl-tests rows did the job's traces bring? bandwidth_tests' rows of the job, for
-- pipeline/model/timing.py's alpha-beta fit.
SELECT op, nranks, size_bytes, placement, time_us, file_id
FROM bandwidth_tests
WHERE job = $job
ORDER BY file_id, op, nranks, size_bytes;
