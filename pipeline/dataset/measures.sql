-- Measures with one definition, made by every connection that reads a dataset (dataset
-- views, link) and by diff's in-memory one.

-- achieved_busbw: the bus bandwidth of a set of collective instances, in GB/s: their bus
-- bytes over their transfer time, i.e. each instance's nccl-tests busbw
-- (collective_instances.busbw_gbps: bytes / shortest duration across ranks x bus_factor)
-- weighted by that duration. nccl-tests (src/common.cu) times a run of iterations and
-- divides the size by the mean time, which for instances of one size is exactly this; the
-- shortest duration is the one that holds the least waiting for the last rank. Every
-- reader that sums bandwidth over instances (the report's chart, diff) uses this aggregate.
CREATE MACRO achieved_busbw(busbw_gbps, dur_ns) AS
    sum(busbw_gbps * dur_ns) FILTER (dur_ns > 0) / sum(dur_ns) FILTER (dur_ns > 0);
