"""NCCL's own text output: ``NCCL_DEBUG=INFO`` logs and nccl-tests result tables.

- :mod:`.log`: ``sniff`` and ``parse`` of an NCCL log (communicators, collectives, topology).
- :mod:`.nccl_tests`: ``sniff`` and ``parse`` of nccl-tests output (``bandwidth_tests``).
- :mod:`.lines`: the batched line reader and the vectorized line patterns both use.
- :mod:`.version`: the NCCL version a log was written by, from what it prints.
"""
