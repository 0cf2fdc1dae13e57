"""PyTorch's NCCL flight-recorder dumps (``TORCH_NCCL_TRACE_BUFFER_SIZE``), pickle or JSON.

- :mod:`.parse`: ``sniff`` and ``parse``, the format's entry.
"""
