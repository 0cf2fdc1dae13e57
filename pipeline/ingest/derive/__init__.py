"""Steps that run on parsed tables of one file, in the ingest workers, before the write.

- :mod:`.nesting`: each op's depth, parent and enclosing scopes (used by the parsers).
- :mod:`.attribution`: each collective's launch op, phase and layer from the ops around it.
- :mod:`.time_breakdown`: where each step's time went (compute, overlapped and exposed
  communication, idle).
"""
