"""Exit semantics: what a process's end, as its parent reports it, says about the cause.

A launcher (torchrun / torch.distributed.elastic, the DeepSpeed launcher, torch.multiprocessing),
a scheduler step (srun), an MPI launcher (mpirun / mpiexec) or a shell reports how a process
ended: an exit status, or the signal that ended it. The same signal means the same thing
whichever of them reports it, so the meaning lives in one table (SIGNALS) and each launcher's
wording is only parsed (verdict_signal). rules.yaml's `by_exit` rules hand their lines here, as
`by_xid` rules hand theirs to the Xid table.

Two readings of one signal:
- a *verdict*, reported by the parent after the fact: weak evidence (tier "weak"), since the
  parent only saw the end. SIGKILL is the kernel's OOM killer far more often than anything
  else on a training node (docs/failure-taxonomy.md host_oom, docs/failure-signatures.md s2
  "exitcode : -9 ... Signal 9 (SIGKILL) -> host_oom / preempted / cancelled"); a scheduler's
  time limit, preemption or cancel prints its own reason line, which outranks the verdict.
- a *crash report*, printed by the dying process itself (UCX's "Caught signal 7 (Bus error:
  ...)", glibc's "*** SIGSEGV", gdb's "received signal SIGSEGV"): the process crashed in
  native code, native_crash (docs/failure-taxonomy.md "native crash": "Segmentation fault,
  SIGABRT"), in the native tier.

Signal numbers are Linux x86-64's (signal(7), https://man7.org/linux/man-pages/man7/signal.7.html);
a shell reports a signal-killed child as status 128 + n (bash(1), "EXIT STATUS",
https://www.gnu.org/software/bash/manual/bash.html#Exit-Status); Python's subprocess and
torch.distributed.elastic report it as a negative return code -n
(https://docs.python.org/3/library/subprocess.html#subprocess.CompletedProcess.returncode).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class ExitMeaning:
    signal: int
    name: str
    verdict_cause: str  # what a parent's report of this signal points at (tier "weak")
    verdict_confidence: float
    crash_cause: str | None  # the process's own crash report of it (tier "native"), if any
    label: str  # the diagnosis detail


# The signals a training job dies of. SIGBUS, whoever reports it, is the training process's
# crash (docs/failure-taxonomy.md native_crash: "SIGSEGV / SIGABRT / SIGBUS / SIGILL exit"): every
# SIGBUS verdict in the labelled corpora of tests/data was one (launchers', srun's, shells');
# docs/failure-signatures.md s7 reads srun's "task <n>: Bus error" as a file mapped from a failed
# mount, but a failed mount prints its own errors (kernel storage lines, errnos: the filesystem
# rules, a higher tier), and a guess of the filesystem would escalate a user's crash as
# infrastructure. A DataLoader worker's SIGBUS (a full /dev/shm) is the DataLoader's own report.
# SIGABRT and SIGSEGV as verdicts stay weak: the NCCL watchdog aborts the ranks it times out
# (docs/failure-signatures.md s2), so a launcher's -6 often follows a timeout the log names.
# SIGTERM is what launchers send the surviving ranks after one failed (torchrun's "Sending
# process N closing signal SIGTERM"): not a verdict on the failed one, so it is not listed.
SIGNALS: dict[int, ExitMeaning] = {
    m.signal: m
    for m in (
        ExitMeaning(9, "SIGKILL", "host_oom", 0.4, None, "process killed (SIGKILL)"),
        ExitMeaning(11, "SIGSEGV", "native_crash", 0.35, "native_crash", "segmentation fault"),
        ExitMeaning(6, "SIGABRT", "native_crash", 0.35, "native_crash", "process aborted"),
        ExitMeaning(4, "SIGILL", "native_crash", 0.35, "native_crash", "illegal instruction"),
        ExitMeaning(8, "SIGFPE", "native_crash", 0.35, "native_crash", "floating-point exception"),
        ExitMeaning(7, "SIGBUS", "native_crash", 0.4, "native_crash", "bus error (SIGBUS)"),
    )
}
# The names launchers and shells print for a signal (strsignal(3) and Open MPI's wording).
_SIGNAL_WORDS: dict[str, int] = {
    "killed": 9,
    # strsignal's "Killed" in a zh_CN locale, as bash prints it (glibc po/zh_CN.po,
    # https://sourceware.org/git/?p=glibc.git;a=blob;f=po/zh_CN.po)
    "已杀死": 9,
    "sigkill": 9,
    "segmentation fault": 11,
    "sigsegv": 11,
    "aborted": 6,
    "abort": 6,  # zsh's word
    "sigabrt": 6,
    "illegal instruction": 4,
    "illegal hardware instruction": 4,  # zsh's word
    "sigill": 4,
    "floating point exception": 8,
    "sigfpe": 8,
    "bus error": 7,
    "sigbus": 7,
}
# Shell status 128 + n: only the ones that can only be a signal (a program may exit 1..127).
_SHELL_STATUS = {128 + n: n for n in SIGNALS}
# Windows has no signals: a process that crashes ends with its exception's NTSTATUS as its exit
# status, which Python prints unsigned (3221225477) or signed (-1073741819). Each is read as the
# signal a POSIX system raises for the same fault (NTSTATUS values,
# https://learn.microsoft.com/en-us/openspecs/windows_protocols/ms-erref/596a1078-e883-4972-9bbc-49e60bebca55):
# 0xC0000005 STATUS_ACCESS_VIOLATION and 0xC00000FD STATUS_STACK_OVERFLOW as SIGSEGV,
# 0xC000001D STATUS_ILLEGAL_INSTRUCTION as SIGILL, 0xC0000409 STATUS_STACK_BUFFER_OVERRUN (the
# fail-fast exit of the MSVC runtime's abort(), https://learn.microsoft.com/en-us/cpp/c-runtime-library/reference/abort)
# as SIGABRT.
_NTSTATUS = {
    status: sig
    for code, sig in ((0xC0000005, 11), (0xC00000FD, 11), (0xC000001D, 4), (0xC0000409, 6))
    for status in (code, code - (1 << 32))
}

# Each launcher's wording of "rank/task/process X ended by signal or status Y", the number or
# name in group 1 (a negative return code is a signal: -9 is SIGKILL).
_VERDICTS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # torch.distributed.elastic: "failed (exitcode: -9) local_rank: 0", the failure record's
        # "exitcode  : -9 (pid: 1)" and "traceback : Signal 9 (SIGKILL) received by PID 1"
        r"exitcode *: *(-\d+)",
        r"Signal (\d+) \(SIG[A-Z]+\) received",
        # the DeepSpeed launcher: "[...] exits with return code = -9"
        r"exits with return code = (-\d+)",
        # a Windows crash status (_NTSTATUS), before the negative codes below read it as a signal
        r"(?:exit status|exit code|return ?code)[ :=]*(3221225477|3221225501|3221225725|3221226505|"
        r"-1073741819|-1073741795|-1073741571|-1073740791)(?:\D|$)",
        # torch.multiprocessing.spawn: "process 1 terminated with signal SIGKILL"; fish's job
        # report "fish: Job 1, 'vim' terminated by signal SIGSEGV (Address boundary error)"
        # (square/maximum-awesome#49)
        r"terminated (?:with|by) signal (SIG[A-Z]+)",
        # subprocess: "died with <Signals.SIGSEGV: 11>"
        r"died with <Signals\.(SIG[A-Z]+)",
        # Open MPI: "mpirun noticed that process rank 1 ... exited on signal 9 (Killed)", the
        # signal sometimes wrapped onto its own line ("signal 6 (Aborted).")
        r"exited on signal (\d+)",
        # MPICH's Hydra: "<host>: rank 1 died from signal 15" (intel/pti-gpu#69)
        r"rank \d+ died from signal (\d+)",
        # Hydra's box for a process that ended badly: "=   EXIT CODE: 9" under "BAD TERMINATION
        # OF ONE OF YOUR APPLICATION PROCESSES" (a signal's number, or 128 + it), with "YOUR
        # APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)" after it, or in
        # newer releases "=   KILLED BY SIGNAL: 9 (Killed)"
        # (https://github.com/pmodels/mpich/blob/main/src/pm/hydra/mpiexec/mpiexec.c)
        r"^=\s+EXIT CODE: (\d+)$",
        r"EXIT STRING: [A-Za-z ]+ \(signal (\d+)\)",
        r"^=\s+KILLED BY SIGNAL: (\d+)",
        r"^signal (\d+) \([A-Za-z ]+\)\.?$",
        # srun: "srun: error: node-05: task 40: Bus error", "... task 3: Killed" (strsignal's
        # words for each signal of the table)
        r"tasks? [\d,-]+: (Killed|Segmentation fault|Bus error|Aborted|Illegal instruction|"
        r"Floating point exception)",
        # zsh's job table: "[1]    12345 killed     python train.py", "[1]  + 12345 abort ..."
        # (zsh's own signal names, https://zsh.sourceforge.io/Doc/Release/Jobs-_0026-Signals.html)
        r"^\[\d+\] +[+-]? *\d+ (killed|segmentation fault|bus error|abort|"
        r"illegal hardware instruction|floating point exception) ",
        # bash's job report: "line 41: 51234 Killed   python train.py"
        r"line \d+: +\d+ (Killed|Segmentation fault|Bus error|Aborted)",
        # zsh's report of a job ended by a signal: "zsh: killed     python3 x.py"
        # (naturalstupid/PyJHora#15), "zsh: segmentation fault  ./a.out"
        r"^zsh: (killed|segmentation fault|bus error|abort)\b",
        # a shell's bare report of a killed foreground job (**Killed** pasted as markdown),
        # in English or localised
        r"^\W*(Killed|已杀死)\W*$",
        # subprocess.CalledProcessError, as a launcher re-raises it: "Command '[...]' returned
        # non-zero exit status -11." (a negative return code is a signal,
        # MarvinTeichmann/MultiNet#61)
        r"returned non-zero exit status (-\d+)",
        # a negative return code under any of its names: Python's subprocess "returncode=-9",
        # a launcher's "return code: -9", "exit code -11" (a negative code is a signal)
        r"(?:return ?code|exit ?code|exit status)[ :=]*(-\d+)",
        # GNU time's "Command terminated by signal 9"; an IDE's "Process finished with exit
        # code 137 (interrupted by signal 9: SIGKILL)"
        r"terminated by signal (\d+)",
        r"interrupted by signal (\d+)",
        # Go's os/exec (ExitError: "signal: killed", https://pkg.go.dev/os#ProcessState.String)
        r"\bsignal: (killed|segmentation fault|aborted|bus error)\b",
        # macOS shells' report of a job killed by a signal: "Killed: 9"
        r"^\W*Killed: (\d+)\W*$",
        # Vertex AI's and AI Platform Training's verdict on a replica: a signal named after its
        # number, "The replica master 0 exited with a non-zero status of 9(SIGKILL)"
        # (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service)
        r"non-zero status of (\d+)\(SIG[A-Z]+\)",
        # SageMaker's training toolkit: "ExecuteUserScriptError:\nExitCode 137" (its status,
        # sagemaker_training/errors.py); only 128 + n or a negative code is a signal there
        r"^ExitCode (13[2-9]|-\d+)$",
        # exit statuses 128 + n: "Command exited with non-zero status 137", "exit code 137",
        # the replica verdict's "exited with a non-zero status of 137.",
        # Horovod's runner "Process 2 exit with status code 137." (its gloo launcher's report)
        # Kubernetes' "Exit Code:    137" (kubectl describe pod, a colon and padding)
        r"(?:exit(?:ed with)? (?:code|status)|non-zero status(?: of)?|status code):? +(13[2-9])\b",
    )
)
# A process's own report of the signal it caught (UCX/ucm: "[host:pid:0:tid] Caught signal 7
# (Bus error: nonexistent physical address)", deepspeedai/DeepSpeed#2638; Open MPI's handler:
# "[host:pid] Signal: Bus error (7)", https://github.com/open-mpi/ompi/blob/main/opal/util/stacktrace.c).
_CRASH_REPORT = re.compile(r"Caught signal (\d+) \(|^Signal: [A-Za-z ]+ \((\d+)\)$", re.IGNORECASE)


def _signal_of(token: str) -> int | None:
    token = token.strip().lower()
    if token.lstrip("-").isdigit():
        value = int(token)
        if value in _NTSTATUS:
            return _NTSTATUS[value]
        if value < 0:
            return -value
        return _SHELL_STATUS.get(value, value if token.isdigit() and value < 32 else None)
    return _SIGNAL_WORDS.get(token)


def verdict_signal(message: str) -> int | None:
    """The signal a launcher's, scheduler's or shell's report of a process's end names."""
    for rx in _VERDICTS:
        m = rx.search(message)
        if m:
            return _signal_of(m.group(1))
    return None


def verdict_cause(message: str, meaning: ExitMeaning) -> str:
    """The cause a parent's report of a signal points at (the table's, whoever reports it)."""
    return meaning.verdict_cause


def crash_signal(message: str) -> int | None:
    """The signal a process reports it caught itself (a native crash report)."""
    m = _CRASH_REPORT.search(message.strip())
    return int(m.group(1) or m.group(2)) if m else None


def exit_meaning(signal: int | None) -> ExitMeaning | None:
    """The table's row for a signal (None: not one a job's failure is told by)."""
    return SIGNALS.get(signal) if signal is not None else None


@dataclass(frozen=True)
class StateMeaning:
    state: str
    cause: str
    tier: str  # the tier of the rule that reads the same reason in words (rules.yaml)
    kind: str
    confidence: float
    label: str  # the diagnosis detail


# The scheduler's own record of how a job ended: Slurm's job state codes (squeue(1) "JOB STATE
# CODES", https://slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES), as scontrol
# ("JobState=OUT_OF_MEMORY"), seff ("State: OUT_OF_MEMORY (exit code 0)",
# jdblischak/smk-simple-slurm#29), sacct (its State column, cut to ten characters with a "+":
# "OUT_OF_ME+") and Slurm's job mail ("Failed, Run time 00:10:02, OUT_OF_MEMORY") print them.
# A memory-limit kill is host_oom, not cancelled; each state ranks with the rule that reads the
# same reason in words (scheduler-memory-limit, slurm-node-failure, slurm-time-limit,
# slurm-preemption, slurm-job-cancelled), at that rule's confidence. FAILED and COMPLETED say
# nothing about the cause and are not listed.
SCHEDULER_STATES: dict[str, StateMeaning] = {
    m.state: m
    for m in (
        StateMeaning(
            "OUT_OF_MEMORY",
            "host_oom",
            "node",
            "cause",
            0.9,
            "host out of memory: the scheduler's memory limit (OUT_OF_MEMORY)",
        ),
        StateMeaning(
            "NODE_FAIL",
            "node_lost",
            "node",
            "cause",
            0.9,
            "node failure reported by the scheduler (NODE_FAIL)",
        ),
        StateMeaning(
            "TIMEOUT", "timeout", "reason", "outcome", 0.95, "job reached its time limit (TIMEOUT)"
        ),
        StateMeaning(
            "DEADLINE", "timeout", "reason", "outcome", 0.95, "job reached its deadline (DEADLINE)"
        ),
        StateMeaning("PREEMPTED", "preempted", "reason", "outcome", 0.95, "job preempted"),
        StateMeaning("CANCELLED", "cancelled", "outcome", "outcome", 0.9, "job cancelled"),
    )
}
_STATE_WORDS = "|".join([*SCHEDULER_STATES, "OUT_OF_ME\\+"])
# Where a state is printed: scontrol's field, seff's line, the job mail's subject, and an sacct
# row (a job or step id first, the ExitCode "0:125" last).
_STATE = re.compile(
    rf"JobState=({_STATE_WORDS})\b|^State: ({_STATE_WORDS})\b|Run time [\d:-]+, ({_STATE_WORDS})\b|"
    rf"^\d+(?:_\d+)?(?:\.\w+)?\s.*\s({_STATE_WORDS})(?: by \d+)?\+?\s+\d+:\d+\s*$"
)


def scheduler_state(message: str) -> StateMeaning | None:
    """The table's row for the job state a scheduler line prints (None: not a listed one)."""
    m = _STATE.search(message.strip())
    if m is None:
        return None
    word = next(g for g in m.groups() if g)
    return SCHEDULER_STATES.get("OUT_OF_MEMORY" if word.startswith("OUT_OF_ME") else word)
