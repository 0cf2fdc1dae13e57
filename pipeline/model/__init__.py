"""The analytic traffic model: job.yaml -> predicted bytes per rank per step.

``config`` reads and validates ``job.yaml``, ``presets`` holds published model dims,
``params`` counts weights and FLOPs, ``traffic`` turns message sizes into bytes on the wire,
``predict`` assembles per-rank rows and the ``predictions`` table, ``network`` inverts them
into bandwidth requirements and ``tokens`` goes from words to tokens to bytes.

Each is imported on its own (``from pipeline.model.predict import predict``): link reads
``link_inputs`` without a job.yaml, and the package importing ``predict`` (with Polars)
would cost every such link 0.15 s.
"""
