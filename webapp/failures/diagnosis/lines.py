"""One log line: its prefixes stripped (timestamps, host, rank, program), what is left is the
message the rules read.

Every pattern here runs in time linear in the line's length (no two quantifiers that can
share characters in a row), so a crafted line costs what a normal one of its size does;
tests/failures/test_diagnosis.py and bench/diagnose_hostile.py hold them to it. The scan cuts
lines at scan.MAX_LINE_BYTES before they get here.

Kernel, scheduler and rank lines go through the same parser whichever file they come from;
whether a stream may carry kernel evidence at all is the scan's business (scan.py).
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"], 1
    )
}
_TS_ISO = (
    r"\[?(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?"
    r"(Z|[+-]\d{2}:?\d{2})?\]?(?:[ :|\t]\s*|(?=\[))"
)
# Python logging's level names (https://docs.python.org/3/library/logging.html#logging-levels)
# and the other spellings loggers print (WARN, FATAL, TRACE, loguru's SUCCESS).
_LEVEL = r"(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE|SUCCESS|NOTSET)"
_NAME = r"[\w.<>-]+"
_MONTH_NAME = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
# "node-12 kernel: " after a journal/syslog timestamp: host then program.
_HOST_PROGRAM = re.compile(
    r"([A-Za-z0-9][\w.-]*) (kernel|slurm\w*|srun|sbatch|systemd|nv-fabricmanager|[\w.-]+\[\d+\]): "
)
# An interface, or an interpreter printing its own argv[0] ("python3: can't open file ...").
_NOT_HOSTS = re.compile(
    r"(ib|ibp|eth|en|em|bond|nvme|sd|loop|md|dm|veth|lo|mlx)\d|(python|pypy)[0-9.]*$", re.I
)
# The prefixes parse_line strips, in the order they are tried at the start of what is left
# (the first that matches wins): (name, pattern, the ASCII characters a match can start with,
# whether its first group must be a host name). A host that is really an interface (ib0) or
# localhost fails its branch: the branches after it are tried.
_PREFIXES: tuple[tuple[str, str, str, bool], ...] = (
    ("pri", r"<\d{1,3}>", "<", False),
    ("iso", _TS_ISO, r"[\[0-9]", False),
    (
        "dmesg_t",
        r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) "
        r"(\d{4})\]\s*",
        r"\[",
        False,
    ),
    (
        "syslog",
        _MONTH_NAME + r" +(\d{1,2}) (\d{2}):(\d{2}):(\d{2})(?:\.\d+)? ",
        "[JFMASOND]",
        False,
    ),
    ("uptime", r"\[\s*\d+\.\d+\]\s*", r"\[", False),
    # torchrun's "[rank3]:" and, with --tee, "[default3]:".
    ("rank", r"\[(?:[Rr]ank ?|default)(\d+)\]:?\s*", r"\[", False),
    # Horovod's runner: "[2]<stderr>:", after a date with --timestamp-output; Open MPI's
    # mpirun --tag-output (Horovod's mpirun launch): "[1,4]<stderr>:", job then rank
    # (https://docs.open-mpi.org/en/main/man-openmpi/man1/mpirun.1.html, --tag-output).
    (
        "horovod",
        r"(?:[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{2}:\d{2}:\d{2} \d{4})?\[(?:\d+,)?(\d+)\]"
        r"<std(?:out|err)>:",
        r"[\[A-Z]",
        False,
    ),
    # SageMaker's mpirun (https://github.com/aws/sagemaker-training-toolkit, its MPI runner
    # tags each line): "[1,mpirank:3,algo-2]<stderr>:", the rank and the host it ran on.
    ("sagemaker_mpi", r"\[\d+,mpirank:(\d+),([A-Za-z0-9][\w.-]*)\]<std(?:out|err)>:", r"\[", False),
    (
        "c10",
        r"\[[EWIF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.\d+ (?:\d+ )?[\w./-]+:\d+\]\s*",
        r"\[",
        False,
    ),
    ("c10_short", r"\[[EWIF] [\w./-]+:\d+\]\s*", r"\[", False),
    # glog's own prefix, unbracketed, "F0522 14:58:03.803087 32152 Vector.h:139] " (severity,
    # month and day, time, thread id, file:line; https://github.com/google/glog#log-line-prefix-format),
    # which Caffe, Paddle and MXNet's dmlc print their CHECK failures under.
    (
        "glog",
        r"[IWEF](\d{2})(\d{2}) (\d{2}):(\d{2}):(\d{2})\.\d+ +\d+ [\w./-]+:\d+\] ?",
        "[IWEF]",
        False,
    ),
    # After a timestamp: absl's (TensorFlow's) "F tensorflow/core/framework/tensor_shape.cc:44] "
    # and Ray's C++ logger "E 3848117 3848117] logging.cc:501: " (level, pid, tid, then the
    # source line; https://github.com/ray-project/ray/blob/master/src/ray/util/logging.cc).
    ("level_src", r"[IWEF] [\w./-]+\.\w+:\d+\] ", "[IWEF]", False),
    # A Ray daemon's lines name it after the ids: "E 9751 9751] (raylet) node_manager.cc:3084: ".
    ("ray_cpp", r"[DIWEC] \d+ \d+\] (?:\([\w.-]+\) )?[\w./-]+:\d+: ", "[DIWEC]", False),
    # A native crash handler's "[host:pid]" (Open MPI's opal stacktrace: "[gpu-a:12345] Signal:
    # Segmentation fault (11)") and UCX's "[host:pid:thread:tid]" or "[host:pid :0:tid]"
    # (deepspeedai/DeepSpeed#2638): the host the process crashed on.
    ("mpi_host", r"\[([A-Za-z0-9][\w.-]*):\d+(?: ?:\d+:\d+)?\] ?", r"\[", True),
    # MVAPICH2's handler "[host:mpi_rank_24][error_sighandler] " (lanl/MPI-Bash#14): host, rank.
    ("mvapich", r"\[([A-Za-z0-9][\w.-]*):mpi_rank_(\d+)\](?:\[\w+\])? ?", r"\[", True),
    ("host_program", _HOST_PROGRAM.pattern, "[A-Za-z0-9]", True),
    (
        "program",
        r"(kernel|slurmstepd|slurmd|slurmctld|srun|sbatch|salloc)(?:\[\d+\])?: ",
        "[ks]",
        False,
    ),
    ("host_pid_tid", r"([A-Za-z][\w.-]*):(\d+):(\d+) ", "[A-Za-z]", True),
    # Sites that tag slurmstepd with its node: "slurmstepd-gpu20-15: error: ..."
    # (ZwwWayne/K-Net#30); before "host", which would take the whole word for the host.
    # Not needs_host: "slurmstepd-localhost: " (lyulyul/shine-cluster#4) names no host, but
    # it is still this prefix, not a host called "slurmstepd-localhost".
    ("slurm_host", r"(?:slurmstepd|slurmd)-([A-Za-z0-9][\w.-]*): ", "s", False),
    # Ray's worker prefix "(RayWorkerVllm pid=7046) ", with ", ip=10.0.0.3" on other nodes
    # (vllm-project/vllm#4108, wandb/wandb#6038): the ip is the worker's node.
    ("ray", r"\([\w.-]+ pid=\d+(?:, ip=([\d.]+))?\) ?", r"\(", False),
    # docker compose's service prefix "algo-1-cf199_1  | " (v1 project_service_index, v2 with
    # "-"; https://docs.docker.com/reference/cli/docker/compose/logs/): the container's line.
    ("compose", r"[A-Za-z0-9][\w.-]*[-_]\d+ +\| ", "[A-Za-z0-9]", False),
    # A host name holds a digit or a dash. "[a-z.-]*" before the first digit (not
    # "[a-z0-9.-]*", the same names) keeps the match linear: two stars over one class let re
    # try every split of a long run of letters and digits (quadratic in the line's length).
    ("host", r"([a-z][a-z.-]*[0-9][a-z0-9.-]*|[a-z][a-z0-9]*-[a-z0-9.-]+): ", "[a-z]", True),
    # pdsh's own report of a remote command, "pdsh@gpu-1: gpu-2: ssh exited with exit code
    # 137" (its host, then the remote host the command ran on; https://github.com/chaos/pdsh,
    # src/pdsh/dsh.c): the remote host is the line's.
    ("pdsh", r"pdsh@[\w.-]+: ([A-Za-z0-9][\w.-]*): ", "p", True),
    # pdsh-style launchers (DeepSpeed's multi-node runner) prefix each line with the host
    # they ran it on, often an address: "192.168.13.81: [rank19]:..." (hiyouga/LlamaFactory#8871).
    ("ip_host", r"(\d{1,3}(?:\.\d{1,3}){3}): ", "[0-9]", False),
    ("task", r"(\d{1,5}): ", "[0-9]", False),
    # Loggers' own framing, whatever wraps it, so that an exception or a traceback they print
    # starts the message as Python printed it. Python logging's basicConfig default
    # "%(levelname)s:%(name)s:%(message)s" ("ERROR:root:Traceback ..."; a name, no spaces).
    ("py_basic", _LEVEL + r":" + _NAME + r":", "[A-Z]", False),
    # After a stamp: "%(asctime)s - %(name)s - %(levelname)s - %(message)s" (the logging
    # cookbook's) and transformers' examples "%(asctime)s - %(levelname)s - %(name)s - ".
    ("py_dash", r"- (?:" + _NAME + r" - )?" + _LEVEL + r" - (?:" + _NAME + r" - )?", "-", False),
    # loguru's default "{time} | {level: <8} | {name}:{function}:{line} - " and fairseq's
    # "%(asctime)s | %(levelname)s | %(name)s | " (https://github.com/Delgan/loguru, _defaults.py;
    # https://github.com/facebookresearch/fairseq, fairseq_cli/train.py).
    (
        "py_pipe",
        r"\| " + _LEVEL + r" *\| (?:" + _NAME + r":" + _NAME + r":\d+ - |" + _NAME + r" \| )?",
        r"\|",
        False,
    ),
    # DeepSpeed's logger "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] "
    # (deepspeed/utils/logging.py), hydra's "[%(asctime)s][%(name)s][%(levelname)s] - " and a
    # bare "[ERROR] " after a stamp.
    (
        "py_bracket",
        r"(?:\[" + _NAME + r"\])?\[" + _LEVEL + r"\](?: - | ?)",
        r"\[",
        False,
    ),
    # DeepSpeed's "[launch.py:318:sigkill_handler] ": kept in the message (rules read which
    # launcher function spoke) unless an exception or a traceback follows it (parse_line).
    ("py_where", r"\[[A-Za-z_][\w.-]*:\d+:" + _NAME + r"\] ?", r"\[", False),
    # transformers' example scripts: "[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> ".
    (
        "hf_levelfile",
        r"\[" + _LEVEL + r"\|[\w.-]+:\d+\] (?:\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:,\d+)? )?>> ",
        r"\[",
        False,
    ),
    # transformers' examples' datefmt "%m/%d/%Y %H:%M:%S" (month, day, year).
    ("us_date", r"(\d{2})/(\d{2})/(\d{4}) (\d{2}):(\d{2}):(\d{2}) ", "[0-9]", False),
    # A time of day alone ("12:00:01 ", "[12:00:01] ", "12:00:01.123 ").
    ("clock", r"\[?\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\]? ", r"[\[0-9]", False),
    # vLLM's "ERROR 01-01 12:00:00 engine.py:12] " and "INFO 01-01 12:00:00 [engine.py:12] "
    # (vllm/logger.py: "%(levelname)s %(asctime)s %(filename)s:%(lineno)d] ").
    (
        "vllm",
        _LEVEL + r" \d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)? \[?[\w./-]+:\d+\] ",
        "[A-Z]",
        False,
    ),
    # NeMo's "[NeMo E 2024-01-01 12:00:00 exp_manager:123] " (nemo/utils/formatters/base.py).
    ("nemo", r"\[NeMo [DIWEC] \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [\w.-]+:\d+\] ", r"\[", False),
    # Jupyter's server "[I 2024-01-01 12:00:00.123 ServerApp] " (older releases:
    # "[I 12:00:00.123 NotebookApp] ").
    (
        "jupyter",
        r"\[[DIWEC] (?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}\.\d+ [\w.]+\] ",
        r"\[",
        False,
    ),
    # kubectl logs --prefix "[pod/trainer-0/pytorch] " (the pod is not a node: no host kept).
    ("kubectl", r"\[pod/[\w.-]+/[\w.-]+\] ", r"\[", False),
    # The kubelet's CRI log file: "<RFC3339Nano stamp> stderr F " (stream, then Full/Partial).
    ("cri", r"std(?:out|err) [FP] ", "s", False),
    # Lightning's rank_zero prefix "[rank: 0] " (lightning/fabric/utilities/rank_zero.py).
    ("rank_colon", r"\[rank: (\d+)\] ", r"\[", False),
    # Ray's worker prefixes without an actor name: "(pid=123, ip=10.0.0.1) " and its daemons'
    # "(raylet, ip=10.0.0.1) " (https://docs.ray.io/en/latest/ray-observability/user-guides/
    # configure-logging.html): the ip is the worker's node.
    ("ray_bare", r"\((?:pid=\d+|raylet|gcs_server)(?:, ip=([\d.]+))?\) ?", r"\(", False),
    # An exception group's margin (https://docs.python.org/3/library/traceback.html, PEP 654):
    # "  + Exception Group Traceback ...", then each line of it and of its sub-exceptions'
    # tracebacks behind "| ", nested ones further in.
    ("exc_group", r"(?:\| |\+ (?=Exception Group Traceback))", r"[|+]", False),
    # Ray's Python logger "%(asctime)s\t%(levelname)s %(filename)s:%(lineno)s -- %(message)s"
    # (ray/_private/ray_constants.py LOGGER_FORMAT): the source after the level.
    ("ray_py", r"[\w.-]+\.py:\d+ -- ", "[A-Za-z0-9_]", False),
    # A level word alone, only right after a stamp (see parse_line): "<stamp> ERROR ".
    ("level", r"\[?" + _LEVEL + r"\]?(?::| *-)?[ \t]+", r"[\[A-Z]", False),
)


# What an exception or a traceback a logger prints starts with (py_where).
_EXCEPTION_START = re.compile(
    r"Traceback \(|(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception)\b"
)
# The prefixes that are a time stamp: a level word right after one is a logger's (parse_line).
_STAMPS = frozenset({"iso", "syslog", "dmesg_t", "c10", "glog", "us_date", "clock", "uptime"})


@functools.cache
def _alternation(
    branches: tuple[int, ...],
) -> tuple[re.Pattern[str], dict[int, tuple[int, int]], tuple[int, ...]]:
    """The branches as one pattern, {outer group: (branch, its first group)}, the branches.

    Python's re tries alternatives left to right and keeps the first that matches, so one
    match() answers what a loop of match() calls over the branches would, several times faster.
    """
    parts, branch_at, group = [], {}, 1
    for k in branches:
        pattern = _PREFIXES[k][1]
        parts.append(f"({pattern})")
        branch_at[group] = (k, group + 1)
        group += 1 + re.compile(pattern).groups
    return re.compile("|".join(parts) or "(?!)"), branch_at, branches


# Only the branches that can start with a line's first character are tried (a character
# outside ASCII, a Unicode digit say, tries them all).
_PREFIX_FOR: dict[str, tuple[re.Pattern[str], dict[int, tuple[int, int]], tuple[int, ...]]] = {
    c: _alternation(tuple(k for k, p in enumerate(_PREFIXES) if re.fullmatch(p[2], c)))
    for c in map(chr, range(128))
}
_PREFIX_ANY = _alternation(tuple(range(len(_PREFIXES))))
# Terminal noise around a message (pasted real logs carry it): ANSI colour codes,
# tqdm bars a message is glued to ("...| 11/56 [00:02<00:08,  5.02it/s]Segmentation fault",
# Henry1iu/TNT-Trajectory-Prediction#33) and carriage returns of redrawn bars (the last
# segment is what the terminal showed).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Each candidate bar is read up to its second "|" at most ("[^\]|]", not "[^\]]"): a line of
# many "1%|" and no "]" then costs one pass, not one pass per "%|".
_TQDM = re.compile(r"^.*?\d{1,3}%\|[^|]*\|[^\]|]*\]\s*")
_RANK_IN_MSG = re.compile(r"\[(?:PG \d+ )?Rank (\d+)\]|\bRank (\d+):", re.I)

# A time without a year ("May 07 03:12:44", torch's "E0507 03:12:44"): resolved after the scan
# with the year of the log's dated lines, so the answer never depends on today's date.
Stamp = tuple[str, int, int, int, int, int, int, float]  # (style, y/0, mon, d, h, m, s, frac)


class Line(NamedTuple):  # a tuple: immutable, and cheap to build for every parsed line
    text: str
    message: str
    host: str | None = None
    rank: int | None = None
    program: str | None = None
    stamp: Stamp | None = None


def _prefix(rest: str) -> tuple[str, re.Match[str], int] | None:
    """The first prefix at the start of `rest`: (branch name, match, index of its group 1)."""
    rx, branch_at, branches = _PREFIX_FOR.get(rest[:1], _PREFIX_ANY)
    while branches:
        m = rx.match(rest)
        if m is None:
            return None
        k, g = branch_at[m.lastindex]
        name, _, _, needs_host = _PREFIXES[k]
        if needs_host and not _host(m.group(g)):
            rx, branch_at, branches = _alternation(branches[branches.index(k) + 1 :])
            continue
        return name, m, g
    return None


def parse_line(text: str) -> Line:
    """Strip the usual prefixes (timestamps, host, [rankN]:, srun labels, program names)."""
    rest = _clean(text.strip())
    if rest.startswith("{"):
        rest = _record_message(rest)
    host = rank = program = stamp = None
    stamped = False  # the prefix just stripped was a time stamp
    for _ in range(12):
        found = _prefix(rest)
        if found is None:
            break
        kind, m, g = found
        end = m.end()
        if kind == "level" and not stamped:
            break  # "ERROR " that no stamp precedes is the message's own word
        if kind == "py_where" and not _EXCEPTION_START.match(rest, end, end + 200):
            break
        stamped = kind in _STAMPS
        if kind == "host_pid_tid" or kind == "mpi_host":
            host = host or m.group(g)
            rest = rest[end:]
        elif kind == "mvapich":
            host = host or m.group(g)
            rank = int(m.group(g + 1)) if rank is None else rank
            rest = rest[end:]
        elif kind == "iso" or kind == "syslog":
            if kind == "iso":
                y, mo, d, hh, mi, ss, frac, tz = m.group(
                    g, g + 1, g + 2, g + 3, g + 4, g + 5, g + 6, g + 7
                )
                style = "aware" if tz else "naive"
                secs = float("0." + frac) if frac else 0.0
                if tz and tz != "Z":
                    sign = 1 if tz[0] == "+" else -1
                    off = int(tz[1:3]) * 3600 + int(tz[-2:]) * 60
                    secs -= sign * off  # seconds east of UTC: subtract to get UTC
                stamp = stamp or (style, int(y), int(mo), int(d), int(hh), int(mi), int(ss), secs)
            else:
                mon, d, hh, mi, ss = m.group(g, g + 1, g + 2, g + 3, g + 4)
                month = _MONTHS[mon.lower()]
                stamp = stamp or ("naive", 0, month, int(d), int(hh), int(mi), int(ss), 0.0)
            rest = rest[end:]
            hm = _HOST_PROGRAM.match(rest)
            if hm:
                host = host or _host(hm.group(1))
                program = program or hm.group(2).split("[")[0]
                rest = rest[hm.end() :]
        elif kind == "sagemaker_mpi":
            rank = int(m.group(g)) if rank is None else rank
            host = host or _host(m.group(g + 1))
            rest = rest[end:].lstrip()
        elif kind == "rank" or kind == "task" or kind == "horovod":
            rank = int(m.group(g)) if rank is None else rank
            rest = rest[end:].lstrip()
        elif kind == "host" or kind == "ip_host" or kind == "pdsh":
            host = host or m.group(g)
            rest = rest[end:].lstrip()
        elif kind == "slurm_host":
            host = host or _host(m.group(g))
            program = program or "slurmstepd"
            rest = rest[end:]
        elif kind == "ray":
            host = host or m.group(g)
            rest = rest[end:]
        elif kind == "host_program":
            host = host or m.group(g)
            program = program or m.group(g + 1).split("[")[0]
            rest = rest[end:]
        elif kind == "program":
            program = program or m.group(g)
            rest = rest[end:]
        elif kind == "uptime":
            program = program or "kernel"
            rest = rest[end:]
        elif kind == "c10" or kind == "glog":
            mo, d, hh, mi, ss = (int(x) for x in m.group(g, g + 1, g + 2, g + 3, g + 4))
            stamp = stamp or ("naive", 0, mo, d, hh, mi, ss, 0.0)
            rest = rest[end:]
        elif kind == "us_date":
            mo, d, y, hh, mi, ss = (int(x) for x in m.group(g, g + 1, g + 2, g + 3, g + 4, g + 5))
            stamp = stamp or ("naive", y, mo, d, hh, mi, ss, 0.0)
            rest = rest[end:]
        elif kind == "exc_group":
            rest = rest[end:].lstrip()
        elif kind == "rank_colon":
            rank = int(m.group(g)) if rank is None else rank
            rest = rest[end:]
        elif kind == "ray_bare":
            host = host or m.group(g)
            rest = rest[end:]
        elif kind == "dmesg_t":
            mon, d, hh, mi, ss, y = m.group(g, g + 1, g + 2, g + 3, g + 4, g + 5)
            month = _MONTHS.get(mon.lower(), 1)
            stamp = stamp or ("naive", int(y), month, int(d), int(hh), int(mi), int(ss), 0.0)
            rest = rest[end:]
        else:  # pri, c10_short, the loggers' framing, clock: nothing to keep
            rest = rest[end:]
    # "rank" in the lowercased message is necessary for a match (a cheap test first: the
    # search has no literal to skip ahead with and most messages name no rank).
    if rank is None and "rank" in rest.lower():
        m = _RANK_IN_MSG.search(rest)
        if m:
            rank = int(m.group(1) or m.group(2))
    return Line(text, rest, host, rank, program, stamp)


def _clean(rest: str) -> str:
    """`rest` without ANSI codes, tqdm bars before the message and redrawn segments."""
    if "\x1b[" in rest:
        rest = _ANSI.sub("", rest)
    if "\r" in rest:
        rest = next((seg.strip() for seg in reversed(rest.split("\r")) if seg.strip()), "")
    for _ in range(4):  # a few bars glued in a row (facebookresearch/maskrcnn-benchmark#400)
        if "%|" not in rest:
            break
        m = _TQDM.match(rest)
        if m is None:
            break
        rest = rest[m.end() :]
    return rest


# A line that is a JSON record: Docker's json-file log driver (one record per line the
# container printed: {"log":"...\\n","stream":"stderr","time":"..."}, what a node keeps under
# /var/log/containers; https://docs.docker.com/engine/logging/drivers/json-file/) and structured
# loggers' "message"/"msg". Only each key's first occurrence is tried, and its string read in
# one pass: linear in the line's length.
_RECORD_KEYS = ('"log":', '"message":', '"msg":')
_JSON_STRING = re.compile(
    r' ?"([^"\\]*+(?:\\.[^"\\]*+)*+)"'
)  # possessive: one pass, no backtracking


def _record_message(rest: str) -> str:
    """The printed line a JSON record holds, or `rest` itself where it holds none.

    A value of several lines (a whole traceback in one record) is left to the scan's reading of
    one-line tracebacks (unflattened)."""
    for key in _RECORD_KEYS:
        at = rest.find(key)
        if at < 0:
            continue
        m = _JSON_STRING.match(rest, at + len(key))
        if m is None:
            continue
        value = _ESCAPED.sub(lambda e: _UNESCAPE[e.group(1)], m.group(1)).rstrip("\n")
        if "\n" in value:
            return rest
        return _clean(value.strip())
    return rest


def _host(name: str) -> str | None:
    """A host name, or None for what only looks like one (an interface: ib0, nvme0n1)."""
    if _NOT_HOSTS.match(name) or name.lower() in ("localhost",):
        return None
    return name


# A whole traceback in one line, its line breaks escaped: a structured logger's "exc_info", a
# job API's "error_trace" (Databricks run_output), a task error a scheduler stores as a string.
# Its lines are read as if printed one per line (scan.py): its last MAX_FLAT_LINES, where the
# final exception and the innermost frames are (as many as a traceback look-back reads).
FLAT_TRACEBACK = "Traceback (most recent call last):\\n"
MAX_FLAT_LINES = 120
_ESCAPED = re.compile(r"\\([\"'\\/nrt])")
_UNESCAPE = {"n": "\n", "t": "\t", "r": "", '"': '"', "'": "'", "\\": "\\", "/": "/"}


def unflattened(text: str) -> list[str] | None:
    """The text before an escaped one-line traceback, then the traceback's own last lines
    (escapes undone); None where the line holds none (FLAT_TRACEBACK)."""
    at = text.find(FLAT_TRACEBACK)
    if at < 0:
        return None
    inner = _ESCAPED.sub(lambda m: _UNESCAPE[m.group(1)], text[at:])
    return [text[:at], *inner.rsplit("\n", MAX_FLAT_LINES)[-MAX_FLAT_LINES:]]


# The characters outside ASCII that re.IGNORECASE matches with an ASCII letter (all of them:
# found by trying every code point). Folded, then lowercased, a text holds an ASCII literal
# exactly when a case-insensitive search for that literal would find it.
_CASE_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}


def folded(text: str) -> str:
    """`text` lowercased for `in` tests of ASCII literals (see _CASE_FOLD)."""
    return (text if text.isascii() else text.translate(_CASE_FOLD)).lower()


# Kernel messages that reach a log without their "kernel:" prefix (folded).
_KERNEL_HINTS = (
    "nvrm:",
    "mlx5_core",
    "lost carrier",
    "out of memory: killed",
    "blocked for more than",
    "ext4-fs",
    "memory cgroup",
)


def kernel_hint(folded_text: str) -> bool:
    """Whether a folded message reads like a kernel message (even without "kernel:")."""
    return any(hint in folded_text for hint in _KERNEL_HINTS)


def is_kernel_line(line: Line) -> bool:
    """Whether a parsed line reads as the kernel's: its program, or a kernel message."""
    return line.program == "kernel" or kernel_hint(folded(line.message))
