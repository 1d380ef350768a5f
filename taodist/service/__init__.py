"""The taodist service: job files, the model store and (later) cluster-side jobs.

This package only parses and calls the public API (estimators, io).
"""

from .jobs import Job, JobError, job_from_mapping, load_job, run_job, with_params

__all__ = ["Job", "JobError", "job_from_mapping", "load_job", "run_job", "with_params"]
