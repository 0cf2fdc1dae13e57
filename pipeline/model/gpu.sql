-- Which accelerator did a job's ranks drive? The device names its ranks report (CUDA's or
-- ROCm's name, such as 'NVIDIA H100 80GB HBM3'), the one most ranks report first: for the
-- memory warnings and the MFU of `predict --from` (pipeline/model/memory.py) when job.yaml
-- names no hardware. Parameter: the job.
SELECT gpu_name
FROM ranks
WHERE job = ? AND gpu_name IS NOT NULL AND gpu_name <> ''
GROUP BY gpu_name
ORDER BY count(DISTINCT rank) DESC, gpu_name;
