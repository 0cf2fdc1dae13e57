"""AMD ROCm profiler output: rocprofiler-sdk's ``rocprofv3 --output-format json``
(:mod:`pipeline.ingest.rocprof.parse`)."""
