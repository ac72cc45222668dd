"""The REST API on the driver: every running job is served over HTTP by the process that runs it.

- :mod:`~epochal.rest.outline`: what a job kind tells the API about a job's shape (its vertices
  and their operators), built by the kind's ``job`` module when it starts the job.
- :mod:`~epochal.rest.models`: the typed contract, as pydantic models (the OpenAPI description at
  ``/openapi.json`` is generated from them).
- :mod:`~epochal.rest.directory`: the jobs a server serves; :mod:`~epochal.rest.views`: what their
  JobMasters report, read into those models (through the JobMaster's query methods).
- :mod:`~epochal.rest.names`: a job named by id, by unique id prefix, or by its name.
- :mod:`~epochal.rest.app`: the FastAPI application, behind a bearer token.
- :mod:`~epochal.rest.server`: one uvicorn server per driver process (in a thread of its own),
  started with the first job and stopped when none is left; :func:`~epochal.rest.server.serve`.
- :mod:`~epochal.control.job_registry`: the per-user file that names the jobs running on this machine,
  their addresses and tokens, so that the ``epochal`` command line finds them.
- :mod:`~epochal.rest.client`: the command line's HTTP calls (``urllib``; no third-party code).

This package imports nothing heavy at import time: the command line loads ``registry``,
``names`` and ``client`` without FastAPI or PySpark.
"""
