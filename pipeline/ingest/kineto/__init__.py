"""PyTorch profiler (Kineto) Chrome traces.

- :mod:`.parse`: ``sniff`` and ``parse``, the format's entry; ops, kernels, ranks and steps.
- :mod:`.stream`: reads ``traceEvents`` once, in batches, gzip or plain.
- :mod:`.comms`: the collectives and communicators a trace records (c10d ops, NCCL kernels).
"""
