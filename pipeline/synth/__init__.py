"""Synthetic job generator: PyTorch profiler (Kineto) traces of a Megatron-style GPT job.

``python -m pipeline.synth OUT_DIR`` writes one ``rank<r>.<id>.pt.trace.json`` per rank, in the
shape PyTorch 2.x's profiler writes on CUDA with NCCL: ``nn.Module:`` scopes, ``record_param_comms``
and NCCL kernels carrying the collective metadata, ``ac2g`` flows, ``ProfilerStep#N``. The bundled
``sample_traces/`` are this generator's output with its defaults (TP2 x PP2 x DP2, 8 ranks).

- :mod:`pipeline.synth.kineto`: the trace shape (events, ids, text layout).
- :mod:`pipeline.synth.job`: the job's knobs, process groups, simulation on one clock.
- :mod:`pipeline.synth.program`: what each rank runs (1F1B schedule, layers, collectives).

See ``docs/sample-job.md`` for the knobs and the collectives each rank issues per step.
"""

from ..synth.job import JobSpec, job_traces, process_groups
from ..synth.writer import write_job

__all__ = ["JobSpec", "job_traces", "process_groups", "write_job"]
