"""The analytic traffic model: job.yaml -> predicted bytes per rank per step.

``config`` reads and validates ``job.yaml``, ``presets`` holds published model dims,
``params`` counts weights and FLOPs, ``traffic`` turns message sizes into bytes on the wire,
``predict`` assembles per-rank rows and the ``predictions`` table, ``network`` inverts them
into bandwidth requirements and ``tokens`` goes from words to tokens to bytes.
"""

from ..model.config import Job, build_job, job_from_dict, load_job
from ..model.predict import Prediction, Row, predict, predictions_table

__all__ = [
    "Job",
    "Prediction",
    "Row",
    "build_job",
    "job_from_dict",
    "load_job",
    "predict",
    "predictions_table",
]
