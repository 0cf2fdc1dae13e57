"""JAX jobs profiled with NVIDIA JAX-Toolbox's ``nsys-jax``: its archives
(:mod:`pipeline.ingest.nsys_jax.parse`)."""
