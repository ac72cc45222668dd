"""The verbs that look at jobs: ``list``, ``info``, ``checkpoints``, ``dashboard``."""

from __future__ import annotations

import argparse
from typing import Any

from epochal.cli.common import Exit, emit, find_job, from_rest, token_for
from epochal.cli.output import duration, number, size, table, when
from epochal.control.job_registry import Registry
from epochal.rest.client import RestClient, RestError

#: Seconds ``epochal list`` waits for each driver.
LIST_TIMEOUT_S = 5.0


def list_jobs(args: argparse.Namespace) -> int:
    """The running jobs of this machine's registry, with their status as their drivers report
    it (``unreachable`` when a driver does not answer); or every job of the driver at ``--address``."""
    if args.address:
        try:
            jobs = RestClient(args.address, token_for(args), LIST_TIMEOUT_S).get("/jobs/overview")["jobs"]
        except RestError as error:
            raise from_rest(error, f"listing the jobs at {args.address}") from None
        for job in jobs:
            job["address"] = args.address
    else:
        registry = Registry()
        entries = registry.entries()
        reports: dict[str, dict[str, Any]] = {}
        for address in dict.fromkeys(e.address for e in entries if e.served):
            token = next(e.token for e in entries if e.address == address)
            try:
                for job in RestClient(address, token, LIST_TIMEOUT_S).get("/jobs/overview")["jobs"]:
                    reports[job["id"]] = job
            except RestError:
                pass  # shown as unreachable
        jobs = [{**(reports.get(e.job_id, {"id": e.job_id, "name": e.name, "kind": e.kind, "status": "unreachable",
                                           "start_time": e.started_at}) if e.served else
                    {"id": e.job_id, "name": e.name, "kind": e.kind, "status": "standby", "start_time": e.started_at}),
                 "address": e.address, "pid": e.pid, **({"role": e.role, "ha": e.ha} if e.ha else {})}
                for e in entries]
    if args.json:
        emit({"jobs": jobs})
    elif not jobs:
        where = args.address or f"this machine (registry {Registry().path})"
        print(f"no running epochal jobs on {where}")
    elif any(j.get("ha") for j in jobs):  # high availability: a row per driver, leader and standbys
        print(table(["JOB ID", "NAME", "KIND", "STATUS", "ROLE", "PID", "STARTED", "DURATION", "ADDRESS"],
                    [[j["id"], j.get("name"), j.get("kind"), j.get("status"), j.get("role") or "-", j.get("pid"),
                      when(j.get("start_time")), duration(j.get("duration_s")), j["address"] or "-"] for j in jobs]))
    else:
        print(table(["JOB ID", "NAME", "KIND", "STATUS", "PARALLELISM", "STARTED", "DURATION", "ADDRESS"],
                    [[j["id"], j.get("name"), j.get("kind"), j.get("status"), j.get("parallelism"),
                      when(j.get("start_time")), duration(j.get("duration_s")), j["address"]] for j in jobs]))
    return Exit.OK


def info(args: argparse.Namespace) -> int:
    """One job: its details and its vertices."""
    target = find_job(args)
    job = target.call(f"job {args.job}", "GET")
    vertices = target.call(f"job {args.job}", "GET", "vertices")["vertices"]
    if args.json:
        emit({"job": job, "vertices": vertices})
        return Exit.OK
    lines = [f"job '{job['name']}' (id {job['id']})",
             f"  kind {job['kind']}, status {job['status']}, attempt {job['attempt']}, parallelism "
             f"{job['parallelism']} on {job['workers']} workers",
             f"  started {when(job['start_time'])}, "
             + (f"ended {when(job['end_time'])} after " if job["end_time"] else "running for ")
             + f"{duration(job['duration_s'])}, {job['restarts']} restart{'s' * (job['restarts'] != 1)}",
             f"  records read {job['records_read']}"]
    if job["error"]:
        lines.append(f"  error: {job['error']}")
    if job["checkpoint_path"]:
        lines.append(f"  checkpoints in {job['checkpoint_path']}")
    if job["savepoint_directory"]:
        lines.append(f"  savepoints go to {job['savepoint_directory']} unless told otherwise")
    for restart in job["restart_history"]:
        lines.append(f"  restart after attempt {restart['attempt']}: {restart['cause']} (back in "
                     f"{duration(restart['recovered_s'])})")
    if vertices:
        lines.append("vertices:")
        for vertex in vertices:
            pressure = vertex["backpressure"]
            ratio = "" if pressure["ratio"] is None else f" ({pressure['ratio']:.2f})"
            lines.append(f"  #{vertex['id']} {vertex['name']} (parallelism {vertex['parallelism']}): in "
                         f"{vertex['records_in']}, out {vertex['records_out']}, watermark "
                         f"{number(vertex['watermark'])}, backpressure {pressure['level']}{ratio}")
            for operator in vertex["operators"]:
                lines.append(f"      uid '{operator['uid']}' {operator['name']}: in {operator['records_in']}, "
                             f"out {operator['records_out']}")
    print("\n".join(lines))
    return Exit.OK


def checkpoints(args: argparse.Namespace) -> int:
    """A job's checkpoints: counts, summary, the latest ``--history`` entries."""
    target = find_job(args)
    report = target.call(f"job {args.job}", "GET", "checkpoints", history=args.history)
    if args.json:
        emit(report)
        return Exit.OK
    counts, summary = report["counts"], report["summary"]
    lines = [f"checkpoints of job {report['job_id']}" + (f" in {report['checkpoint_path']}"
                                                          if report["checkpoint_path"] else " (none configured)"),
             f"  {counts['completed']} completed ({counts['savepoints']} savepoints), {counts['failed']} failed",
             f"  duration min {duration(summary['duration_s']['min'])}, avg {duration(summary['duration_s']['avg'])}, "
             f"max {duration(summary['duration_s']['max'])}; size avg {size(summary['bytes']['avg'])}, max "
             f"{size(summary['bytes']['max'])}; alignment max {duration(summary['alignment_s_max']['max'])}"]
    if report["history"]:
        lines.append(table(["ID", "STATUS", "TRIGGERED", "DURATION", "SIZE", "ALIGNMENT", "NOTE"],
                           [[c["id"], c["status"], when(c["trigger_time"]), duration(c["duration_s"]),
                             size(c["bytes"]), duration(c["alignment_s_max"]),
                             f"savepoint {c['savepoint']}" if c["savepoint"] else c["reason"] or ""]
                            for c in report["history"]]))
    print("\n".join(lines))
    return Exit.OK



def dashboard(args: argparse.Namespace) -> int:
    """The URL of a job's page on its driver's dashboard, with the token that opens it (once: the
    browser keeps a cookie). The job is looked up first, so a URL printed is one that works."""
    target = find_job(args)
    job = target.call(f"job {args.job}", "GET")
    url = f"{target.client.base}/dashboard?token={target.client.token}#/jobs/{job['id']}"
    if args.json:
        emit({"job_id": job["id"], "url": url})
    else:
        print(url)
    return Exit.OK
