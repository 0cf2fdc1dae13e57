"""Nsight Systems exports (``nsys export --type sqlite`` and ``--type json``).

- :mod:`.parse`: ``sniff`` and ``parse``, the format's entry.
- :mod:`.sqlite_export`, :mod:`.json_export`: the two readers, each giving an
  :class:`~pipeline.ingest.nsys.raw.NsysRaw` (:mod:`.raw`).
- :mod:`.tables`: turns an ``NsysRaw`` into dataset tables, with :mod:`.ranks` (which
  process is which rank) and :mod:`.collectives` (NCCL's NVTX ranges and payloads).
"""
