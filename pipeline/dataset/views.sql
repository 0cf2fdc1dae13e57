-- Convenience views over the raw and derived tables, made by every connection.

-- collectives_linked: each collective with what tokenwire link found out about it (step,
-- phase, layer, parallel dimension; sizes filled from a matched call of another source where
-- the trace lacks them); empty until the dataset has been linked.
CREATE VIEW collectives_linked AS
SELECT c.* EXCLUDE (step, phase, layer, attributed_by, bytes, dtype, size_source),
       l.step, l.step_from, l.bytes, l.dtype, l.size_source, l.phase, l.layer, l.layer_index,
       l.layer_kind, l.parallel_dim, l.attributed_by
FROM collectives c
JOIN collective_links l USING (job, rank, source, file_id, collective_id);

-- primary_kernel_sources: per job and rank, the source whose kernels count, in the order of
-- source_preference (sources.sql): the profiler's, else Nsight's (the only sources of kernels).
CREATE VIEW primary_kernel_sources AS
SELECT job, rank, arg_min(source, source_preference(source)) AS source
FROM (SELECT DISTINCT job, rank, source FROM kernels)
GROUP BY ALL;
