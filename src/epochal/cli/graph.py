"""The Graphalytics-style command line of graph jobs: ``epochal graph run ALGORITHM ...``
(also ``python -m epochal.graph run ...``).

This module owns the graph command line only: it parses the arguments, builds the algorithm's program
(:mod:`epochal.graph.algorithms`), loads the LDBC Graphalytics files
(:func:`~epochal.graph.loading.load_graph_located`), runs the job on Spark
(:func:`epochal.graph.job.run_graph`) or, with ``--local``, in this process
(:func:`~epochal.graph.local.run_graph_locally`, a testing aid without fault tolerance), writes the
Graphalytics output directory (:func:`~epochal.graph.output.write_results`) and prints one
summary line. With ``--on-executors`` Spark tasks load the files and the workers write the
output (:class:`~epochal.graph.executors.sources.GraphSource`); nothing of the graph passes
through this process. Bad input and bad arguments print one line to stderr and exit with status 2 (a
problem an algorithm finds with one edge, such as SSSP's negative weight, names the edge file's
line); a job that fails exits with status 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from epochal.errors import EpochalError
from epochal.graph.loading import load_graph_located
from epochal.graph.local import GraphResult, run_graph_locally
from epochal.graph.model import EdgeInputError, GraphInputError
from epochal.graph.output import GraphOutputError, check_output_dir, write_results
from epochal.graph.placement import PARTITIONERS
from epochal.graph.program import Program

PROG = "epochal graph"
ALGORITHMS = ("bfs", "pr", "wcc", "cdlp", "lcc", "sssp")
#: PageRank's and CDLP's iterations, PageRank's damping factor when not given (the values the
#: Graphalytics datasets' properties files commonly set)
DEFAULT_ITERATIONS = 10
DEFAULT_DAMPING = 0.85


class CommandLineError(EpochalError, ValueError):
    """The command line is wrong (a missing or contradictory option); nothing was run."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one :class:`CommandLineError` (printed as one line)."""

    def error(self, message: str) -> NoReturn:
        raise CommandLineError(message)


def _bounded(kind: Callable[[str], Any], low: float, high: float | None = None) -> Callable[[str], Any]:
    """An argparse type: ``kind(text)`` within ``[low, high]``."""
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {'number' if kind is float else 'whole number'}"
                                             ) from None
        if not (low <= value <= (high if high is not None else value)):
            limit = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{text} must be {limit}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Run an LDBC Graphalytics algorithm on epochal's graph engine.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="load a graph, run an algorithm, write the Graphalytics output")
    run.add_argument("algorithm", choices=ALGORITHMS)
    run.add_argument("--vertices", required=True, metavar="G.v", help="vertex file: one vertex id per line")
    run.add_argument("--edges", required=True, metavar="G.e", help="edge file: 'src dst [weight]' per line")
    direction = run.add_mutually_exclusive_group()
    direction.add_argument("--directed", dest="directed", action="store_true", default=True,
                           help="edges go from src to dst (the default)")
    direction.add_argument("--undirected", dest="directed", action="store_false", help="edges go both ways")
    run.add_argument("--weighted", action="store_true", help="read each edge's third field as its weight")
    run.add_argument("--drop-duplicate-edges", action="store_true",
                     help="keep the first of repeated edges (with --undirected, 'u v' and 'v u' are one edge) "
                          "instead of refusing the edge file")
    run.add_argument("--source-vertex", type=int, metavar="ID", help="the root of bfs and sssp")
    run.add_argument("--damping-factor", type=_bounded(float, 0.0, 1.0), default=DEFAULT_DAMPING, metavar="D",
                     help=f"pr's damping factor (default {DEFAULT_DAMPING})")
    run.add_argument("--max-iterations", type=_bounded(int, 1), default=DEFAULT_ITERATIONS, metavar="N",
                     help=f"pr's and cdlp's iterations (default {DEFAULT_ITERATIONS})")
    run.add_argument("--output", required=True, metavar="DIR", help="the output directory (part files)")
    run.add_argument("--parallelism", type=_bounded(int, 1), default=1, metavar="P", help="workers (default 1)")
    run.add_argument("--partitioner", choices=sorted(PARTITIONERS), default="hash")
    run.add_argument("--fault-tolerance", choices=("none", "checkpoint", "replication"), default="none")
    run.add_argument("--checkpoint-interval", type=_bounded(int, 1), metavar="K",
                     help="supersteps between checkpoints (with --fault-tolerance checkpoint)")
    run.add_argument("--recovery", choices=("rebirth", "migration"),
                     help="with --fault-tolerance replication: a new worker takes the lost one's place (rebirth, "
                          "the default) or the survivors take over its vertices (migration)")
    run.add_argument("--replicas", type=_bounded(int, 1), metavar="K",
                     help="with --fault-tolerance replication: workers that may be lost at once (default 1)")
    run.add_argument("--no-selfish", action="store_true",
                     help="with --fault-tolerance replication: synchronise every FT replica every superstep")
    run.add_argument("--kill-worker", type=_bounded(int, 0), metavar="W", help="kill this worker (a failure test)")
    run.add_argument("--kill-at-superstep", type=_bounded(int, 0), metavar="S", help="... in this superstep")
    run.add_argument("--work-dir", metavar="DIR", help="where the driver writes partitions and checkpoints; on a "
                     "cluster a location every executor can read (default: a local temporary directory)")
    run.add_argument("--local", action="store_true", help="run in this process without Spark (a testing aid)")
    run.add_argument("--on-executors", action="store_true",
                     help="load and partition the graph with Spark tasks and let the workers write the output: "
                          "the graph never passes through this process (its limit is the executors' memory)")
    return parser


def _check_options(args: argparse.Namespace) -> None:
    """Refuse option combinations that cannot run (before anything is loaded)."""
    if args.fault_tolerance != "replication" and (args.recovery or args.replicas or args.no_selfish):
        raise CommandLineError("--recovery, --replicas and --no-selfish need --fault-tolerance replication")
    if args.replicas is not None and args.replicas >= args.parallelism:
        raise CommandLineError(f"--replicas {args.replicas} needs more workers: --parallelism at least "
                               f"{args.replicas + 1}")
    if args.checkpoint_interval is not None and args.fault_tolerance != "checkpoint":
        raise CommandLineError("--checkpoint-interval needs --fault-tolerance checkpoint")
    if (args.kill_worker is None) != (args.kill_at_superstep is None):
        raise CommandLineError("--kill-worker and --kill-at-superstep go together; give both or neither")
    if args.kill_worker is not None and args.kill_worker >= args.parallelism:
        raise CommandLineError(f"--kill-worker {args.kill_worker} is not a worker; workers are numbered 0 to "
                               f"{args.parallelism - 1} (--parallelism {args.parallelism})")
    if args.local and args.on_executors:
        raise CommandLineError("--local and --on-executors exclude each other: --on-executors loads with Spark")
    if args.local and (args.fault_tolerance != "none" or args.kill_worker is not None):
        raise CommandLineError("--local runs without fault tolerance; drop --fault-tolerance and --kill-worker "
                               "or run on Spark (without --local)")


def build_program(args: argparse.Namespace) -> Program:
    """The program of ``args.algorithm`` with its parameters from ``args``."""
    name = args.algorithm
    if name in ("bfs", "sssp") and args.source_vertex is None:
        raise CommandLineError(f"{name} needs --source-vertex ID, the vertex it starts from")
    if name == "sssp" and not args.weighted:
        raise CommandLineError("sssp needs edge weights; pass --weighted (the edge file's third field)")
    from epochal.graph import algorithms

    factories: dict[str, Callable[[], Program]] = {
        "bfs": lambda: algorithms.BFS(args.source_vertex),
        "pr": lambda: algorithms.PageRank(args.max_iterations, args.damping_factor),
        "wcc": lambda: algorithms.WCC(),
        "cdlp": lambda: algorithms.CDLP(args.max_iterations),
        "lcc": lambda: algorithms.LCC(),
        "sssp": lambda: algorithms.SSSP(args.source_vertex),
    }
    return factories[name]()


def _execute(args: argparse.Namespace, graph: Any, program: Program, **more: Any) -> GraphResult:
    if args.local:
        return run_graph_locally(graph, program, args.parallelism, args.partitioner)
    from epochal.graph.job import run_graph
    from epochal.runtime.host.hooks import Fault

    options: dict[str, Any] = {"work_dir": args.work_dir, **more}
    if args.checkpoint_interval is not None:
        options["checkpoint_interval"] = args.checkpoint_interval
    if args.kill_worker is not None:
        options["faults"] = [Fault("superstep", worker=args.kill_worker, superstep=args.kill_at_superstep)]
    if args.fault_tolerance == "replication":
        options.update(recovery=args.recovery or "rebirth", replicas=args.replicas or 1, selfish=not args.no_selfish)
    return run_graph(graph, program, parallelism=args.parallelism, partitioner=args.partitioner,
                     fault_tolerance=args.fault_tolerance, **options)


def run_from_args(args: argparse.Namespace) -> GraphResult:
    """Load, run and write as ``args`` (from :func:`build_parser`) say; print one summary line."""
    _check_options(args)
    program = build_program(args)
    check_output_dir(args.output)
    if args.on_executors:
        return _run_on_executors(args, program)
    started = time.perf_counter()
    graph, edges_at = load_graph_located(args.vertices, args.edges, directed=args.directed, weighted=args.weighted,
                                         duplicates="drop" if args.drop_duplicate_edges else "error")
    loaded = time.perf_counter()
    try:
        result = _execute(args, graph, program)
    except EdgeInputError as error:  # the program's check refused an edge: name its line, not its index
        raise GraphInputError(error.at(edges_at.where(error.edge))) from error
    ran = time.perf_counter()
    write_results(result, args.output, parts=args.parallelism)
    written = time.perf_counter()
    print(f"{args.algorithm}: {graph.num_vertices} vertices, {graph.num_edges} edges, {result.supersteps} supersteps "
          f"({result.halt_reason}), load {loaded - started:.2f} s, run {ran - loaded:.2f} s, write "
          f"{written - ran:.2f} s, replication factor {result.replication_factor:.2f}, "
          f"{len(result.restarts)} restarts, {len(result.recoveries)} recoveries, output {args.output}")
    return result


def _run_on_executors(args: argparse.Namespace, program: Program) -> GraphResult:
    """``--on-executors``: Spark tasks load the files, workers write the output directory."""
    from epochal.graph.executors.sources import GraphSource

    source = GraphSource.graphalytics(args.vertices, args.edges, directed=args.directed, weighted=args.weighted,
                                      duplicates="drop" if args.drop_duplicate_edges else "error")
    started = time.perf_counter()
    result = _execute(args, source, program, output_dir=args.output)
    load = result.load
    print(f"{args.algorithm}: {load.num_vertices} vertices, {load.num_edges} edges, {result.supersteps} supersteps "
          f"({result.halt_reason}), loaded on the executors in {sum(load.seconds.values()):.2f} s, load + run + "
          f"write {time.perf_counter() - started:.2f} s, replication factor {result.replication_factor:.2f}, "
          f"{len(result.restarts)} restarts, {len(result.recoveries)} recoveries, output {args.output}")
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """The command line's entry point; returns the exit status."""
    try:
        run_from_args(build_parser().parse_args(argv))
    except (CommandLineError, GraphInputError, GraphOutputError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    except EpochalError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0

