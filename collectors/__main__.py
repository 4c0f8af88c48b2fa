"""vigil-collector: the node agent.

    vigil-collector --source nvml --cluster seren --token-file /etc/vigil/tokens.json
    vigil-collector --source dcgm --cluster kalos --dcgm-url http://localhost:9400/metrics
    vigil-collector --source simulated --token-file tokens.json --count 360 --interval 10
    vigil-collector --source nvml --fixture h100-sxm5-80gb --stdout --count 3 --interval 1
    vigil-collector --source nvml --jobs slurm --cluster seren   # GPUs and the cluster's jobs
    vigil-collector --source none --jobs slurm --cluster seren   # a controller without GPUs
    vigil-collector --source nvml --cluster seren --kernel-log journal \
        --job-log-glob '/var/log/jobs/*/*.log'                     # GPU errors and job logs

Job events: `--jobs slurm` polls squeue and scontrol on this host (run it on
one host per cluster: it reports every job of the cluster); `--source simulated` also
simulates the cluster's jobs unless `--jobs none`.

GPU errors and job logs (sent as node-event batches, task vigil.failures.ingest_node_events):
Xid events from NVML event sets (`--no-xid` to skip), Xid lines from the kernel log
(`--kernel-log auto|kmsg|journal|FILE|none`), ECC / row-remap / NVLink counter increases in
the samples (`--no-counter-events`), and error windows from job logs (`--job-log-glob`,
`--job-logs-slurm`). With `--source simulated`, failed jobs leave the same kind of events
(`--no-sim-failures` to turn that off).

The agent's own Prometheus endpoint: `--metrics-port 9401` serves the latest reading at
/metrics in dcgm-exporter's metric names (collectors/exporter.py), on 127.0.0.1 unless
`--metrics-addr` says otherwise.

Exit status: 0 done, 2 bad flags or configuration (a --metrics-port that cannot be bound
too), 3 collector disabled (no NVIDIA driver).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

from collectors.schema import MAX_GPUS_PER_NODE, MAX_INTERVALS_PER_BATCH, NAME_PATTERN

log = logging.getLogger("vigil.collector")

EXIT_USAGE = 2
EXIT_DISABLED = 3  # systemd: RestartPreventExitStatus=3 stops restart loops on driverless hosts
MIN_TOKEN_LEN = 16  # collectors/schema.py Batch.token
# --stdout needs some token to build a valid batch; the server refuses this one.
STDOUT_TOKEN = "not-set-stdout-only"
# --history-minutes: by default a round every 30 s of the past (--history-step-s), and as
# many rounds to a batch as make 10 minutes (20 at 30 s), within the schema's cap.
HISTORY_STEP_S = 30.0
HISTORY_BATCH_S = 600.0
# The shortest step: NVML's power reading is a 1 s average on Ampere and newer (docs/telemetry.md
# section 2), so rounds closer than that would repeat it.
HISTORY_MIN_STEP_S = 1.0


def history_rounds_per_batch(step_s: float) -> int:
    """Rounds of history to a batch: 10 minutes' worth, at least 1, at most the schema's cap."""
    return max(1, min(MAX_INTERVALS_PER_BATCH, int(HISTORY_BATCH_S // step_s)))


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # One line, no usage dump: what is wrong and with which flag.
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _uid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a uid") from None
    if not 0 <= value < 2**32:
        raise argparse.ArgumentTypeError(f"{text!r} is not a uid (0 to 4294967295)")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return value


def _default_spool_dir() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "vigil-collector" / "spool"


def _default_state_dir() -> Path:
    return _default_spool_dir().parent


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vigil-collector",
        description="Vigil node agent: samples GPUs and sends one batch per node per interval; "
        "optionally watches the scheduler and sends job events.",
    )
    p.add_argument(
        "--source",
        choices=("nvml", "dcgm", "simulated", "none"),
        default="nvml",
        help="GPU telemetry source; 'none' for a host without GPUs that only watches jobs",
    )
    p.add_argument(
        "--jobs",
        choices=("none", "slurm", "simulated"),
        default=None,
        help="job events: 'slurm' polls squeue/scontrol here (one host per cluster); "
        "'simulated' (the default with --source simulated) runs the simulator's job model",
    )
    p.add_argument(
        "--jobs-interval",
        type=_positive_float,
        default=None,
        help="seconds between Slurm polls (default: --interval)",
    )
    p.add_argument(
        "--state-dir",
        type=Path,
        default=_default_state_dir(),
        help="where the Slurm watcher, the kernel log and job log readers remember what they "
        "reported (so a restart neither repeats nor skips)",
    )
    p.add_argument("--cluster", default=os.environ.get("VIGIL_CLUSTER"), help="cluster name")
    p.add_argument(
        "--node", default=socket.gethostname().split(".")[0], help="node name (short hostname)"
    )
    p.add_argument("--token", help="node token (else $VIGIL_NODE_TOKEN or --token-file)")
    p.add_argument("--token-file", type=Path, help='JSON {"hostname": "token", ...}')
    p.add_argument("--broker", default=os.environ.get("CELERY_BROKER_URL"), help="broker URL")
    p.add_argument("--interval", type=_positive_float, default=10.0, help="seconds per round")
    p.add_argument("--intervals-per-batch", type=_positive_int, default=1)
    p.add_argument("--count", type=_positive_int, help="stop after N rounds")
    p.add_argument(
        "--history-minutes",
        type=_positive_int,
        help="simulated: first send the last N minutes (--history-step-s apart, 10 minutes to "
        "a batch), then sample live from the same state, jobs still running",
    )
    p.add_argument(
        "--history-step-s",
        type=_positive_float,
        default=None,
        help=f"seconds between the rounds of --history-minutes (default {HISTORY_STEP_S:g}, at "
        f"least {HISTORY_MIN_STEP_S:g})",
    )
    p.add_argument(
        "--ready-file",
        type=Path,
        help="write this file once the --history-minutes history is handed over (at once "
        "without history): a start-up handshake for supervisors such as `manage.py demo`",
    )
    p.add_argument("--stdout", action="store_true", help="print batches as JSON lines")
    p.add_argument("--spool-dir", type=Path, default=_default_spool_dir())
    p.add_argument("--dcgm-url", default=None, help="dcgm-exporter /metrics URL")
    p.add_argument(
        "--server-power",
        default="auto",
        metavar="ipmi|redfish:URL|auto|none",
        help="whole-server power from the BMC: `ipmitool dcmi power reading`, or a Redfish "
        "Power resource (https://BMC/redfish/v1/Chassis/ID/Power; credentials from "
        "$VIGIL_REDFISH_USER / $VIGIL_REDFISH_PASSWORD, CA from $VIGIL_REDFISH_CA_FILE); auto: "
        "ipmi when ipmitool and /dev/ipmi0 exist (default); --source nvml/dcgm only",
    )
    p.add_argument("--fixture", help="fake-NVML fixture (YAML path or name) instead of a GPU")
    p.add_argument("--clusters", default="sable,kestrel", help="simulated: cluster names")
    p.add_argument("--nodes-per-cluster", type=_positive_int, default=16)
    p.add_argument("--gpus-per-node", type=_positive_int, default=8)
    p.add_argument("--seed", type=int, default=None, help="simulated: random seed")
    events = p.add_argument_group("GPU errors and job logs (node events)")
    events.add_argument(
        "--xid",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--source nvml: read Xid errors from NVML event sets (default: on)",
    )
    events.add_argument(
        "--kernel-log",
        metavar="auto|kmsg|journal|FILE|none",
        default=None,
        help="where to read kernel Xid lines: /dev/kmsg (root or CAP_SYSLOG), `journalctl -k -f`, "
        "a file that is appended to, or none; auto tries kmsg, then journal (default: auto for "
        "--source nvml/dcgm, none with --fixture or --source simulated/none)",
    )
    events.add_argument(
        "--counter-events",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="turn ECC, row-remap and NVLink error counter increases into events (default: on)",
    )
    events.add_argument(
        "--job-log-glob",
        action="append",
        default=[],
        metavar="PATTERN",
        help="job stdout/stderr files to follow, e.g. '/var/log/jobs/*/*.log' (job id: the first "
        "number in a wildcard part of the path); repeatable",
    )
    events.add_argument(
        "--job-logs-slurm",
        action="store_true",
        help="follow the StdOut/StdErr files Slurm names for the jobs running on --node",
    )
    events.add_argument(
        "--job-log-min-uid",
        type=_uid,
        default=1000,
        metavar="UID",
        help="job log files owned by a uid below this (root, system accounts) are never read "
        "(default: 1000)",
    )
    events.add_argument(
        "--sim-failures",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="--source simulated: failed jobs leave GPU error events and log windows (default: on)",
    )
    exporter = p.add_argument_group("Prometheus (the agent's own /metrics)")
    exporter.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help="serve the latest reading on this port at /metrics, in dcgm-exporter's metric names "
        "(default: off)",
    )
    exporter.add_argument(
        "--metrics-addr",
        default=None,
        help="address --metrics-port listens on (default 127.0.0.1: this host only; 0.0.0.0 "
        "for a Prometheus elsewhere)",
    )
    p.add_argument("--log-level", default=os.environ.get("VIGIL_LOG_LEVEL", "INFO"))
    return p


def _load_token_file(parser: argparse.ArgumentParser, path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        parser.error(f"--token-file {path}: {exc.strerror or exc}")
    except json.JSONDecodeError as exc:
        parser.error(f"--token-file {path}: not JSON ({exc.msg}, line {exc.lineno})")
    if not isinstance(data, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in data.items()
    ):
        parser.error(f'--token-file {path}: expected {{"hostname": "token", ...}}')
    return data


def _token_lookup(
    parser: argparse.ArgumentParser, args: argparse.Namespace, nodes: list[tuple[str, str]]
) -> Callable[[str, str], str]:
    single = args.token or os.environ.get("VIGIL_NODE_TOKEN")
    table = _load_token_file(parser, args.token_file) if args.token_file else {}
    tokens: dict[tuple[str, str], str] = {}
    for cluster, node in nodes:
        token = table.get(f"{cluster}/{node}") or table.get(node) or single
        if token is None:
            if not args.stdout:
                where = f"--token-file {args.token_file}" if args.token_file else "no token given"
                parser.error(
                    f"no token for node {node}: {where} (use --token, VIGIL_NODE_TOKEN or --token-file)"
                )
            token = STDOUT_TOKEN
        elif len(token) < MIN_TOKEN_LEN:
            parser.error(f"token for node {node} is shorter than {MIN_TOKEN_LEN} characters")
        tokens[(cluster, node)] = token
    return lambda cluster, node: tokens[(cluster, node)]


def yaml_error() -> type[Exception]:
    import yaml

    return yaml.YAMLError


def _check_name(parser: argparse.ArgumentParser, flag: str, value: str) -> None:
    if not re.match(NAME_PATTERN, value):
        parser.error(f"{flag} {value!r}: use 1-128 letters, digits, '.', '_' or '-'")


def _event_watchers(
    args: argparse.Namespace, backend: Any, tokens: Callable[[str, str], str]
) -> list[Any]:
    """The node-event watcher for the flags (Xids, kernel log, counters, job logs), if any."""
    from collectors.watchers.nodeevents import NodeEventWatcher

    sources: list[Any] = []
    if args.source == "simulated":
        if backend.jobs is not None and args.sim_failures:
            sources.append(backend.jobs.event_source())
    else:
        if args.source == "nvml" and args.xid:
            from collectors.watchers.xid import NvmlXidSource

            xid = NvmlXidSource(args.cluster, args.node, backend.gpus)
            if xid.active:
                sources.append(xid)
        if args.kernel_log != "none":
            from collectors.watchers.kernel import KernelLogSource

            sources.append(
                KernelLogSource(
                    args.cluster,
                    args.node,
                    list(getattr(backend, "gpus", None) or []),
                    args.kernel_log,
                    args.state_dir,
                )
            )
        if args.counter_events and args.source != "none":
            from collectors.watchers.counters import CounterEventSource

            sources.append(CounterEventSource())
        paths = []
        if args.job_log_glob or args.job_logs_slurm:
            from collectors.watchers.joblogs import JobLogSource, glob_paths, slurm_paths

            if args.job_log_glob:
                paths.append(glob_paths(args.job_log_glob))
            if args.job_logs_slurm:
                paths.append(slurm_paths(args.node))
            sources.append(
                JobLogSource(
                    args.cluster, args.node, paths, args.state_dir, min_uid=args.job_log_min_uid
                )
            )
    return [NodeEventWatcher(sources, tokens)] if sources else []


def _fill_defaults(args: argparse.Namespace) -> None:
    """The defaults that depend on other flags: --jobs and --kernel-log follow --source."""
    if args.jobs is None:
        args.jobs = "simulated" if args.source == "simulated" else "none"
    if args.kernel_log is None:
        args.kernel_log = "auto" if args.source in ("nvml", "dcgm") and not args.fixture else "none"


def _cluster_names(args: argparse.Namespace) -> tuple[str, ...]:
    """--clusters of a simulated run, split and stripped."""
    return tuple(c.strip() for c in args.clusters.split(",") if c.strip())


def _check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every flag combination that cannot work ends here, with one line naming the flag.

    Runs after `_fill_defaults` and before any backend starts, so a configuration error never
    leaves a half-started agent behind.
    """
    if args.fixture and args.source != "nvml":
        parser.error("--fixture only applies to --source nvml")
    if args.dcgm_url and args.source != "dcgm":
        parser.error("--dcgm-url only applies to --source dcgm")
    if not args.stdout and not args.broker:
        parser.error("no broker: pass --broker URL or set CELERY_BROKER_URL (or use --stdout)")
    if args.jobs == "simulated" and args.source != "simulated":
        parser.error("--jobs simulated only applies to --source simulated")
    if args.jobs == "slurm" and args.source == "simulated":
        parser.error("--jobs slurm watches a real cluster: use it with --source nvml, dcgm or none")
    if args.source == "none" and args.jobs == "none":
        parser.error("--source none collects nothing without --jobs slurm")
    if args.kernel_log != "none" and args.source == "simulated":
        parser.error("--kernel-log does not apply to --source simulated")
    if (args.job_log_glob or args.job_logs_slurm) and args.source == "simulated":
        parser.error("--job-log-glob/--job-logs-slurm do not apply to --source simulated")
    for pattern in args.job_log_glob:
        if not os.path.isabs(pattern):
            parser.error(f"--job-log-glob {pattern!r}: give an absolute path pattern")
    if args.history_minutes and args.source != "simulated":
        parser.error("--history-minutes only applies to --source simulated")
    if args.history_minutes and args.count:
        parser.error("--history-minutes runs live afterwards: it does not go with --count")
    if args.history_step_s is not None:
        if not args.history_minutes:
            parser.error("--history-step-s only applies with --history-minutes")
        if args.history_step_s < HISTORY_MIN_STEP_S:
            parser.error(
                f"--history-step-s {args.history_step_s:g}: at least {HISTORY_MIN_STEP_S:g} s "
                "(NVML's power reading is a 1 s average)"
            )
        if args.history_step_s > args.history_minutes * 60:
            parser.error(
                f"--history-step-s {args.history_step_s:g}: longer than the "
                f"--history-minutes window ({args.history_minutes * 60} s)"
            )
    if args.metrics_addr is not None and args.metrics_port is None:
        parser.error("--metrics-addr only applies with --metrics-port")
    # What the server's schema refuses must not get past the edge (collectors/schema.py).
    if args.intervals_per_batch > MAX_INTERVALS_PER_BATCH:
        parser.error(f"--intervals-per-batch: at most {MAX_INTERVALS_PER_BATCH} per batch")
    if args.gpus_per_node > MAX_GPUS_PER_NODE:
        parser.error(f"--gpus-per-node: at most {MAX_GPUS_PER_NODE} GPUs per node")
    if args.source == "simulated":
        clusters = _cluster_names(args)
        if not clusters:
            parser.error("--clusters: give at least one cluster name")
        for c in clusters:
            _check_name(parser, "--clusters", c)
    else:
        if not args.cluster:
            parser.error(f"--source {args.source} needs --cluster (or VIGIL_CLUSTER)")
        _check_name(parser, "--cluster", args.cluster)
        _check_name(parser, "--node", args.node)


def _nodes(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(cluster, node) of every node this agent speaks for (many when simulated)."""
    if args.source != "simulated":
        return [(args.cluster, args.node)]
    from collectors.backends.simulated import node_name

    return [
        (c, node_name(c, n))
        for c in _cluster_names(args)
        for n in range(1, args.nodes_per_cluster + 1)
    ]


def _backend(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[Any, Any]:
    """The telemetry backend for --source, and the fake NVML it installed (--fixture) or None.

    Raises BackendError when NVML finds no driver (a fake it installed is uninstalled first).
    """
    if args.source == "simulated":
        from collectors.backends.simulated import SimulatedBackend

        backend = SimulatedBackend(
            _cluster_names(args),
            args.nodes_per_cluster,
            args.gpus_per_node,
            seed=args.seed,
            jobs=args.jobs == "simulated",
            failures=args.sim_failures,
        )
        return backend, None
    if args.source == "none":
        from collectors.backends.none import NoBackend

        return NoBackend(), None
    from collectors.nodestats import NodeSampler
    from collectors.serverpower import server_power_reader

    try:
        # A fake NVML (--fixture) has no BMC behind it: auto finds none there.
        spec = "none" if args.fixture and args.server_power == "auto" else args.server_power
        sampler = NodeSampler(server_power=server_power_reader(spec))
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    if args.source == "dcgm":
        from collectors.backends.dcgm import DEFAULT_URL, DcgmBackend

        url = args.dcgm_url or DEFAULT_URL
        return DcgmBackend(args.cluster, args.node, url, node_sampler=sampler), None
    from collectors.backends.nvml import NvmlBackend

    fake: Any = None
    if args.fixture:
        from collectors.testing.fake_nvml import FakeNvml

        try:
            fake = FakeNvml(args.fixture).install()
        except (OSError, ValueError, yaml_error()) as exc:
            parser.error(f"--fixture {args.fixture}: {exc}")
    try:
        return NvmlBackend(args.cluster, args.node, node_sampler=sampler), fake
    except Exception:
        if fake is not None:
            fake.uninstall()
        raise


def _job_watchers(
    args: argparse.Namespace, backend: Any, tokens: Callable[[str, str], str]
) -> list[Any]:
    """The job-event watchers: the simulator's job model, or Slurm (--jobs slurm)."""
    watchers: list[Any] = []
    if args.source == "simulated" and backend.jobs is not None:
        watchers.append(backend.jobs.watcher(tokens))
    if args.jobs == "slurm":
        from collectors.watchers.slurm import SlurmWatcher

        watchers.append(
            SlurmWatcher(
                args.cluster,
                args.node,
                tokens(args.cluster, args.node),
                state_path=args.state_dir / f"slurm-{args.cluster}.json",
                interval_s=args.jobs_interval or args.interval,
            )
        )
    return watchers


Sink = Callable[[str, str], None]
"""(batch id, batch JSON) -> None: where one kind of batch goes."""


class _Sinks(NamedTuple):
    samples: Sink
    job_events: Sink
    node_events: Sink
    transport: Any  # the broker Transport, None with --stdout


def _stdout_sink(batch_id: str, text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _sinks(parser: argparse.ArgumentParser, args: argparse.Namespace) -> _Sinks:
    """JSON lines on stdout (--stdout), else one Celery task per batch through the broker."""
    if args.stdout:
        return _Sinks(_stdout_sink, _stdout_sink, _stdout_sink, None)
    from collectors.schema import JOB_EVENTS_TASK, NODE_EVENTS_TASK
    from collectors.transport import Transport

    try:
        transport = Transport(args.broker, args.spool_dir)
    except OSError as exc:
        parser.error(f"--spool-dir {args.spool_dir}: {exc.strerror or exc}")

    def samples(batch_id: str, text: str) -> None:
        transport.send(text, batch_id)

    def job_events(batch_id: str, text: str) -> None:
        transport.send(text, batch_id, task=JOB_EVENTS_TASK)

    def node_events(batch_id: str, text: str) -> None:
        transport.send(text, batch_id, task=NODE_EVENTS_TASK)

    return _Sinks(samples, job_events, node_events, transport)


def _metrics_server(
    parser: argparse.ArgumentParser, args: argparse.Namespace, sinks: _Sinks
) -> tuple[Any, Any]:
    """With --metrics-port: the latest-reading store the agent's /metrics serves
    (collectors/exporter.py) and its running server; (None, None) without. A port that cannot
    be bound is a configuration error, found before any backend starts."""
    if args.metrics_port is None:
        return None, None
    from collectors.exporter import LatestReadings, serve

    latest = LatestReadings()
    addr = args.metrics_addr or "127.0.0.1"
    try:
        server, _ = serve(latest, args.metrics_port, addr)
    except OSError as exc:
        if sinks.transport is not None:
            sinks.transport.close()
        parser.error(f"--metrics-port {args.metrics_port} on {addr}: {exc.strerror or exc}")
    log.info("serving /metrics on %s:%d", addr, args.metrics_port)
    return latest, server


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper() if isinstance(args.log_level, str) else "INFO",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    _fill_defaults(args)
    _check_flags(parser, args)
    nodes = _nodes(args)
    tokens = _token_lookup(parser, args, nodes)

    # The spool folder is a configuration error too: it is checked before any backend starts.
    sinks = _sinks(parser, args)
    latest, metrics_server = _metrics_server(parser, args, sinks)

    from collectors.backends.base import BackendError

    try:
        backend, fake = _backend(parser, args)
    except BackendError as exc:
        if sinks.transport is not None:
            sinks.transport.close()
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        print(f"vigil-collector: {exc}", file=sys.stderr)
        return EXIT_DISABLED
    watchers = _job_watchers(args, backend, tokens)
    event_watchers = _event_watchers(args, backend, tokens)
    sampled, event_sink = backend, sinks.node_events
    if latest is not None:
        from collectors.exporter import RecordingBackend

        sampled = RecordingBackend(backend, latest)

        def event_sink(batch_id: str, text: str) -> None:
            latest.observe_node_events(text)  # the last Xid of each GPU
            sinks.node_events(batch_id, text)

    from collectors.agent import Agent

    agent = Agent(
        sampled,
        tokens,
        sinks.samples,
        interval_s=args.interval,
        intervals_per_batch=args.intervals_per_batch,
        on_round=fake.advance if fake is not None else None,
        watchers=watchers,
        job_sink=sinks.job_events,
        event_watchers=event_watchers,
        event_sink=event_sink,
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: agent.stop())
    log.info(
        "collecting from %s (jobs: %s): %d node(s), every %g s, %d round(s) per batch, to %s",
        args.source,
        args.jobs,
        len(nodes),
        args.interval,
        args.intervals_per_batch,
        "stdout" if args.stdout else args.broker,
    )
    try:
        if args.history_minutes:
            step = args.history_step_s or HISTORY_STEP_S
            rounds = agent.replay_history(
                args.history_minutes * 60, step, history_rounds_per_batch(step)
            )
            log.info(
                "history sent: %d rounds of the last %d minutes, %g s apart",
                rounds,
                args.history_minutes,
                step,
            )
        if args.ready_file is not None:
            args.ready_file.touch()
        # Simulated with --count backfills: the rounds are stamped in the past, not waited for.
        agent.run(args.count, backfill=args.source == "simulated" and args.count is not None)
    except BrokenPipeError:
        # `vigil-collector --stdout | head` closed the pipe: a normal way to stop. Point stdout
        # at /dev/null so the interpreter's final flush does not raise again (Python docs,
        # "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    finally:
        for watcher in event_watchers:
            watcher.close()  # NVML event sets are freed before nvmlShutdown
        backend.close()
        if sinks.transport is not None:
            sinks.transport.close()
            if len(sinks.transport.spool):
                log.warning(
                    "%d batches stay spooled in %s", len(sinks.transport.spool), args.spool_dir
                )
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        if fake is not None:
            fake.uninstall()
    log.info(
        "stopped after %d rounds, %d batches, %d job-event batches, %d node-event batches",
        agent.rounds,
        agent.batches,
        agent.job_batches,
        agent.event_batches,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
