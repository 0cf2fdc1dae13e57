-- Convenience views over the raw and derived tables, made by every connection.

-- collectives_linked: each collective with what tokenwire link found out about it (step,
-- phase, layer, parallel dimension); empty until the dataset has been linked.
CREATE VIEW collectives_linked AS
SELECT c.* EXCLUDE (phase, layer), l.phase, l.layer, l.layer_index, l.layer_kind,
       l.parallel_dim, l.attributed_by
FROM collectives c
JOIN collective_links l USING (job, rank, source, file_id, collective_id);
