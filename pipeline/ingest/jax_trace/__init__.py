"""The JAX profiler's own trace (``jax.profiler.trace``): the TensorBoard profile plugin's
``<host>.trace.json.gz`` (:mod:`pipeline.ingest.jax_trace.parse`)."""
