"""A matched line becomes an Event: its cause and tier (the Xid table or the traceback decide
for the rules that defer), the node, GPU, rank, peer and time it names.

Plain data over plain text: classify() reads one line, the scan (scan.py) calls event_of()
for every line a rule matched.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import webapp.failures.diagnosis.exits as exits
import webapp.failures.diagnosis.families_python as families_python
from webapp.failures import taxonomy
from webapp.failures.diagnosis.catalogue import Catalogue, Rule, catalogue_load, first_rule
from webapp.failures.diagnosis.lines import Line, Stamp, folded, kernel_hint, parse_line

EVIDENCE_TEXT_CHARS = 300  # an evidence line is cut here (the detail page shows it whole)
# An event's signature (what repeats of one message share, for coalescing) is this much of
# its message. The detail is not log text: the failure list, CSV, emails and webhooks show it
# to everyone, and a log line can hold paths and tokens (the evidence, which keeps the text,
# is shown behind the team rule).
SIGNATURE_CHARS = 120
# An Xid outside the hardware tier (13 graphics exception, 31 MMU fault, 43 stopped channel:
# taxonomy.XIDS) is as often the job's own bug as the GPU's: capped at the confidence of a
# cause told by a name alone (below).
NON_HARDWARE_XID_CONFIDENCE = 0.6
# An exception with no traceback frame to look at: its name alone decides framework vs script
# (taxonomy.EXCEPTION_DEFAULT_CAUSE), a guess, so it stays under every exception-tier rule of
# rules.yaml (0.7 to 0.95) that names its cause from the line itself.
NAME_ONLY_CONFIDENCE = 0.6

# The programs whose lines are the scheduler's record of a job (lines.py takes the program
# from the line's prefix).
SCHEDULER_PROGRAMS = frozenset({"slurmctld", "slurmstepd", "slurmd", "srun"})
EXCEPTIONS_IGNORED = frozenset(
    {"KeyboardInterrupt", "SystemExit", "GeneratorExit", "StopIteration"}
)
# Innermost frame in one of these packages = framework (docs/failure-taxonomy.md: "a frame in
# site-packages (torch, megatron, deepspeed, transformers, ...) means framework"). Megatron and
# InternEvo usually run from a git checkout, not site-packages, hence the package names.
FRAMEWORK_PACKAGES = frozenset(
    {
        "torch",
        "megatron",
        "deepspeed",
        "transformers",
        "apex",
        "accelerate",
        "internevo",
        "internlm",
        "colossalai",
        "flash_attn",
        "datasets",
        "tokenizers",
        "vllm",
        "lightning",
        "pytorch_lightning",
        "fairscale",
        "triton",
        "peft",
        "trl",
        "nemo",
        "transformer_engine",
        # Frameworks run from a git checkout as often as installed (fairseq, metaseq, GPT-NeoX's
        # megatron package above, torchtitan, Composer and LLM Foundry, nanotron, OpenMMLab's).
        "fairseq",
        "fairseq2",
        "metaseq",
        "torchtitan",
        "torchtune",
        "composer",
        "llmfoundry",
        "nanotron",
        "mmengine",
        "mmcv",
        "detectron2",
        "xformers",
        "ray",
    }
)
# What an exception raised in a library's own frames is, by the library's role
# (docs/failure-taxonomy.md): the dataset libraries reading the data (HF datasets, webdataset's
# shards, decord's videos), the weights reader reading a model's file. The innermost frame
# decides, installed or run from its source checkout.
PACKAGE_ROLES: dict[str, str] = {
    "datasets": "dataset_loading",
    "webdataset": "dataset_loading",
    "decord": "dataset_loading",
    "safetensors": "model_loading",
}
# transformers' model loading: the functions of modeling_utils and configuration_utils that read
# a model's config and weights (from_pretrained and the loaders under it).
_MODEL_LOADING_FRAME = re.compile(
    r"transformers[/\\](?:modeling_utils|modeling_tf_utils|configuration_utils)\.py$"
)
_MODEL_LOADING_FUNCTIONS = frozenset(
    {
        "from_pretrained",
        "load_state_dict",
        "_load_pretrained_model",
        "load_sharded_checkpoint",
        "_load_state_dict_into_model",
        "get_config_dict",
        "_get_config_dict",
        "_get_resolved_checkpoint_files",
    }
)
# A class of families_python that reports another failure (a Ray actor that died, torchrun's
# ChildFailedError) names no cause: a symptom, under every rule that names one.
CONSEQUENCE_CONFIDENCE = 0.3


@dataclass(frozen=True)
class Evidence:
    file: str
    line: int
    text: str
    rule_id: str


@dataclass
class Event:
    file_index: int
    file: str
    line_no: int
    text: str
    rule: Rule
    cause: str
    tier: str
    kind: str
    confidence: float
    detail: str | None = None
    host: str | None = None
    rank: int | None = None
    gpu: str | None = None
    peer: str | None = None
    stamp: Stamp | None = None
    is_kernel: bool = False
    is_scheduler: bool = False  # printed by a Slurm program (SCHEDULER_PROGRAMS)
    action: str | None = None
    last_completed: int | None = None
    timeout_ms: int | None = None
    count: int = 1
    signature: str = ""  # the start of the message: repeats of one message share it
    ts: float | None = None  # resolved after the scan
    # A line of a torchrun failure record: the record's time, and whether torchrun named it
    # the first observed failure (scan.Record).
    failed_at: float | None = None
    root_cause: bool = False
    ts_style: str | None = None
    # A JVM exception printed as the cause of the one before it ("Caused by: ..."): the chain's
    # root cause is its last one (decide.py).
    chained: bool = False

    @property
    def seq(self) -> tuple[int, int]:
        return (self.file_index, self.line_no)


_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)", re.I)


@dataclass(frozen=True)
class _Find:
    """A case-insensitive pattern, and literals (folded) one of which every match contains.

    re has no fast path for an IGNORECASE search: over a long line one costs 3-40 us, the `in`
    tests on the folded line well under 1, so the search runs only where it can match.
    """

    rx: re.Pattern[str]
    needles: tuple[str, ...]

    def search(self, text: str, low: str) -> re.Match[str] | None:
        return self.rx.search(text) if any(n in low for n in self.needles) else None


_NVRM_BDF = _Find(
    re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at PCI:)?([0-9a-fA-F]{4}:[0-9a-fA-F:.]+)", re.I),
    ("nvrm: ",),
)
_EXC_NAME = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*)")
_PEER = _Find(
    re.compile(
        r"(?:remote peer|from peer|Call to recv from|connect to|peer) \(?\[?([A-Za-z0-9][\w.:-]*?)\]?(?:<\d+>|:\d+|,|\)|\s|$)",
        re.I,
    ),
    ("peer", "call to recv from", "connect to"),
)
# The host a scheduler or launcher line names (Open MPI's "... on node gpu-07 exited on signal
# 9" included: the host of the failed rank; slurmstepd's "*** JOB 7518 ON xantipa CANCELLED AT
# ..." names the node of the slurmstepd that printed it).
_SLURM_NODE = _Find(
    re.compile(
        r"Node failure on ([\w.-]+)|srun: error: ([\w.-]+): task|Nodes? ([\w.-]+) not responding|"
        r"^error: ([\w.-]+): task|, node: ([\w.-]+)|on node ([\w.-]+) exited|"
        r"\*\*\* (?:JOB|STEP) [\w.+]+ ON ([\w.-]+) CANCELLED",
        re.I,
    ),
    ("node", "error: ", "cancelled"),
)
# Ray's memory monitor: "Memory on the node (IP: 10.0.62.231, ID: ...)" and the raylet's "at
# node (ID: ..., IP: 10.0.62.231)" name the node it killed on (Ray prints them in this case;
# a pattern of its own keeps them off the case-insensitive search above).
_RAY_NODE = _Find(
    re.compile(r"Memory on the node \(IP: ([\d.]+)|node \(ID: \w+, IP: ([\d.]+)\)"),
    ("memory on the node (ip: ", "node (id: "),
)
_GPU_INDEX = _Find(
    re.compile(r"\(GPU (\d+);|GPU (\d+) has a total capacity|Device: (\d+)|cuda:(\d+)", re.I),
    ("gpu ", "device: ", "cuda:"),
)
_LAST_COMPLETED = _Find(
    re.compile(r"last completed NCCL work: (-?\d+)", re.I), ("last completed nccl work: ",)
)
_TIMEOUT_MS = _Find(re.compile(r"Timeout\(ms\)=(\d+)", re.I), ("timeout(ms)=",))
_CANCELLED_AT = re.compile(r"CANCELLED AT (\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})")
# Location noise at the start of a message, dropped from the signature: Slurm's "error: ",
# NCCL's "[2] transport/net_ib.cc:1712 NCCL WARN ", torch's "[E socket.cpp:957] ".
_DETAIL_NOISE = re.compile(
    r"^(?:error: |\[\d+\] (?:[\w./-]+:\d+ )?NCCL (?:WARN|INFO) |\[[EWI] [\w./-]+:\d+\] )+"
)
_FRAME = re.compile(r'File "([^"]+)", line \d+(?:, in ([\w<>.]+))?')
# Rich's traceback (https://rich.readthedocs.io/en/latest/traceback.html), as typer, accelerate
# and many CLIs print it: a box headed "╭─── Traceback (most recent call last) ───╮" whose
# frames read "│ /path/to/file.py:520 in main   │" (a long path may wrap onto the next line:
# the part kept still says site-packages or the package), the exception after the box.
_RICH_FRAME = re.compile(r"^│ ((?:[A-Za-z]:)?[/\\~][^\s│:]*)(?::\d+)?(?: in(?: \S+)?)?\s*│?\s*$")
_RICH_HEADER = "╭"
# IPython's (Jupyter's, Colab's) frames: "File ~/env/lib/python3.10/site-packages/x/y.py:3200, in
# Class.func(args)" (IPython 8) and "/usr/lib/python3/dist-packages/x/y.py in func(args)" or
# "<ipython-input-48-6a7b3e847019> in <cell line: 7>()" (IPython 7); a cell of the notebook
# itself, "Cell In[12], line 5" (https://ipython.readthedocs.io/en/stable/whatsnew/version8.html).
_IPY_FRAME = re.compile(
    r"^(?:File )?((?:[A-Za-z]:)?[~/\\][^\s:]*\.py|<ipython-input-[\w-]+>)(?::\d+,)? in ([\w.<>]+)"
)
_NOTEBOOK_CELL = "Cell In["
# How the JVM prints an exception's place in its chain (Throwable.printStackTrace): the uncaught
# one "Exception in thread "main" x.Y: ...", each cause after it "Caused by: x.Z: ..."; and a
# debugger's header of a Python exception (VS Code's "Exception has occurred: x.Y").
JVM_CAUSED_BY = "Caused by: "
_DEBUGGER_HEADER = "Exception has occurred: "
_JVM_EXCEPTION_PREFIX = re.compile(
    r'^(?:Caused by: |Exception in thread "[^"]*" |Exception has occurred: )'
)
# The packages of object-store clients (rules.yaml storage-client-frame names the same ones).
_STORE_CLIENT_FRAME = re.compile(
    r"[/\\](?:botocore|boto3|s3transfer|s3fs|minio|gcsfs|adlfs|google[/\\]cloud[/\\]storage|"
    r"azure[/\\]storage)[/\\]"
)

# The launchers that start the training processes and raise CalledProcessError when one exits
# non-zero: accelerate/commands/launch.py, torch/distributed/launch.py, deepspeed/launcher/
# (runner.py, launch.py), colossalai/cli/launcher.
_LAUNCHER_FRAME = re.compile(
    r"/(?:accelerate/commands/launch|torch/distributed/launch|deepspeed/launcher/\w+|"
    r"colossalai/cli/launcher/\w+)\.py$"
)
# A library's own dataset loader: a module under a `datasets` / `dataset` / `data` package of
# an installed library (xturing/datasets/instruction_dataset.py, mmdet/datasets/coco.py,
# llamafactory/data/loader.py), or of one run from its source checkout's src/ (PyPA's src
# layout: https://packaging.python.org/en/latest/discussions/src-layout-vs-flat-layout/),
# never a framework's data machinery (torch/utils/data, tf.data), which re-raises its
# workers' exceptions or fails for reasons of its own.
_DATASET_LOADER_FRAME = re.compile(
    r"(?:(?:site|dist)-packages|[/\\]src)[/\\](?!(?:torch|tensorflow|keras|jax)[/\\])"
    r"[A-Za-z0-9_]+[/\\]"
    r"(?:[A-Za-z0-9_]+[/\\])*(?:datasets?|data)[/\\][A-Za-z0-9_]+\.py"
)


def _frame_is_library(path: str) -> bool | None:
    """True: framework frame; False: user frame; None: stdlib or frozen (look further out)."""
    p = path.replace("\\", "/")
    if "site-packages/" in p or "dist-packages/" in p:
        return True
    if p.startswith(("<ipython-input-", "<notebook cell>")):
        return False  # a notebook cell: the user's own code
    # A Cython module's frame ("pyarrow/error.pxi", "python/ray/_raylet.pyx") is a compiled
    # library's, printed with the path it was built from.
    if p.endswith((".pyx", ".pxi")):
        return True
    # The standard library: /usr/lib/python3.10/..., or Windows' <prefix>/Lib/runpy.py.
    if p.startswith("<") or _STDLIB.search(p):
        return None
    parts = p.split("/")
    return any(part in FRAMEWORK_PACKAGES for part in parts[:-1])


_STDLIB = re.compile(
    r"/lib/python\d[.\d]*/|^(?:[A-Za-z]:)?/(?:[^/]+/)*Lib/(?:[A-Za-z_]\w*/)*[A-Za-z_]\w*\.py$"
)


# The package a frame is in: under site-packages or dist-packages, or under a source checkout's
# src/ (PyPA's src layout, installed editable).
_ROLE_PACKAGE = re.compile(r"(?:(?:site|dist)-packages|/src)/([A-Za-z0-9_]+)/")


def _frame_role(frame: str, function: str | None) -> str | None:
    """The cause an exception raised in this innermost frame has by its package's role
    (PACKAGE_ROLES, transformers' model loading), or None."""
    p = frame.replace("\\", "/")
    m = _ROLE_PACKAGE.search(p)
    if m and m.group(1) in PACKAGE_ROLES:
        return PACKAGE_ROLES[m.group(1)]
    if function in _MODEL_LOADING_FUNCTIONS and _MODEL_LOADING_FRAME.search(p):
        return "model_loading"
    return None


def classify(
    text: str, cat: Catalogue | None = None, before: Callable[[], list[str]] | None = None
) -> tuple[Event | None, Line] | None:
    """The event one line stands for (None for noise), with the parsed line.

    `before` returns the preceding lines (nearest first), used to find the innermost
    traceback frame of a Python exception.
    """
    cat = cat or catalogue_load()
    line = parse_line(text)
    rule = first_rule(cat, line.message)
    if rule is None or rule.kind == "ignore":
        return None, line
    return event_of(text, line, rule, before), line


def event_of(
    text: str, line: Line, rule: Rule, before: Callable[[], list[str]] | None
) -> Event | None:
    """The event of a line that `rule` (not an ignore rule) matched; None if it is noise."""
    msg = line.message
    cause, tier, detail, action, kind = rule.cause, rule.tier, rule.detail, None, rule.kind
    confidence, gpu = rule.confidence, None
    python_chained = False
    if cause == "by_xid":
        xm = _XID.search(msg)
        if not xm:
            return None
        # The line's own words can decide (a root Xid it names, Xid 154's recovery phrase,
        # Xid 48's row-remap state): the taxonomy reads them.
        xid = taxonomy.xid_resolved(int(xm.group(2)), msg)
        if xid.cause is None:
            return None
        cause, tier, gpu = xid.cause, xid.tier, xm.group(1)
        detail = f"Xid {xid.code}: {xid.meaning}"
        action = xid.action.value if xid.action else None
        if xid.tier != "hardware":
            confidence = min(confidence, NON_HARDWARE_XID_CONFIDENCE)
    elif cause == "by_exit":
        if rule.kind == "cause":  # the process's own crash report
            meaning = exits.exit_meaning(exits.crash_signal(msg))
            if meaning is None or meaning.crash_cause is None:
                return None
            cause = meaning.crash_cause
        else:  # a parent's verdict: weak, with the table's confidence for the signal
            meaning = exits.exit_meaning(exits.verdict_signal(msg))
            if meaning is None:
                return None
            cause = exits.verdict_cause(msg, meaning)
            confidence = meaning.verdict_confidence
        detail = meaning.label
    elif cause == "by_state":  # the scheduler's record of the job's end: the state table
        state = exits.scheduler_state(msg)
        if state is None:
            return None
        cause, tier, kind, confidence = state.cause, state.tier, state.kind, state.confidence
        detail = state.label
    elif cause == "by_exception":
        # A JVM exception's line starts with its place in the chain (rules.yaml jvm-exception).
        exc = _JVM_EXCEPTION_PREFIX.sub("", msg, count=1)
        name = _EXC_NAME.match(exc).group(1)
        if name in EXCEPTIONS_IGNORED:
            return None
        detail = name
        found = _innermost_frame_at(line, before) if before else None
        frame, function = found if found else (None, None)
        library = _frame_is_library(frame) if frame else None
        verdict = families_python.exception_cause(exc)
        if (
            verdict is None
            and name == "CalledProcessError"
            and frame
            and _LAUNCHER_FRAME.search(frame.replace("\\", "/"))
        ):
            # A launcher's report that the training process it started exited non-zero
            # (accelerate's simple_launcher, torch.distributed.launch, DeepSpeed's runner):
            # the child's own error is the cause.
            verdict = families_python.ClassVerdict(families_python.CONSEQUENCE, "launchers", name)
        if verdict is None and msg.startswith(_DEBUGGER_HEADER):
            # A debugger's header names the class alone, its message and frames after it: a
            # class no catalog holds is read from the traceback's own last line, if any.
            return None
        chain = _chain_verdicts(line, before) if before else None
        # The innermost catalogued class of the chain this exception ends (printed first).
        root = next((v for v in reversed(chain or []) if v is not None), None)
        if root is not None:
            # Root cause over the frame that reported it: an exception raised from (or while
            # handling) a catalogued one is decided by the innermost catalogued class.
            cause, detail = root.cause, root.name
        elif verdict is not None and verdict.cause == families_python.CONSEQUENCE:
            # The class reports another failure (an actor whose process died, a launcher's
            # child that failed, a wrapper of the task's own exception): the log's other
            # events name the cause, and where there are none it is unknown, never the
            # framework frame that printed the report.
            cause, kind, detail = "unknown", "symptom", verdict.name
            confidence = min(confidence, CONSEQUENCE_CONFIDENCE)
        elif verdict is not None:
            # Root cause over the frame that raised it: a library's exception class is known
            # by the library's own catalog (families_python), whatever its message says.
            cause = verdict.cause
            # Ending a chain whose earlier exceptions no catalog knows (a loader script's
            # KeyError under datasets' DatasetGenerationError), the catalogued class names
            # the chain's cause over the earlier exception's frames: decide.py reads a
            # chained event as the root of the one before it.
            python_chained = chain is not None
        elif msg.startswith(DATASET_LIBRARY_MODULES):
            # Root cause over the frame that raised it: the dataset library's own exception
            # (a schema it cannot infer or cast, a split it cannot generate) is the data's,
            # whichever trainer frame it surfaces in.
            cause = "dataset_loading"
        elif name in CHECKPOINT_READ_ERRORS and before and _in_checkpoint_read(line, before):
            # Root cause over the frame that raised it: torch.load's reader failing (a
            # truncated or corrupt checkpoint, whatever its message) is a model loading error.
            cause = "model_loading"
        elif msg.startswith(CONFIG_ERROR_MODULES):
            # Root cause over the frame that raised it: the config library's own errors (a
            # key the job's config lacks, a value of the wrong type) are the job's config.
            cause = "user_exception"
        elif _STORE_TRANSFER_FAILED.search(msg):
            # Root cause over the frame that raised it: a transfer from or to an object
            # store's URL failing, in whichever library's words, is the store's.
            cause = "object_storage"
        elif taxonomy.EXCEPTION_ALIAS.get(name, name) in ENVIRONMENT_EXCEPTIONS:
            # Root cause over the frame that raised it: a module or name the job's environment
            # lacks is the job's, whichever library's import statement found it missing.
            cause = "user_exception"
        elif frame and _STORE_CLIENT_FRAME.search(frame):
            # Root cause over the frame that raised it: the object-store client raising on
            # its endpoint's answer is the store's, whatever the exception's name.
            cause = "object_storage"
        elif frame and _DATASET_LOADER_FRAME.search(frame):
            # Root cause over the frame that raised it: a library's dataset loader refusing
            # the data it was given (a key, a schema, a format) is the data's.
            cause = "dataset_loading"
        elif frame and (role := _frame_role(frame, function)):
            # Root cause over the frame that raised it: the package's role (the dataset
            # library, the weights reader, transformers' from_pretrained) names the cause.
            cause = role
        elif library is None:
            cause = taxonomy.EXCEPTION_DEFAULT_CAUSE.get(
                taxonomy.EXCEPTION_ALIAS.get(name, name), "framework_exception"
            )
            confidence = NAME_ONLY_CONFIDENCE
        else:
            cause = "framework_exception" if library else "user_exception"
    elif tier == "exception" and before and _EXCEPTION_LINE.match(msg):
        # An exception a rule names (datasets' DatasetGenerationError, a state_dict that does
        # not load) ending a chain whose earlier exceptions no catalog knows: the rule's cause
        # is the chain's, over the earlier exception's frames (decide.py reads a chained event
        # as the root of the one before it).
        chain = _chain_verdicts(line, before)
        python_chained = chain is not None and not any(chain)
    if detail is None:
        detail = rule_label(rule)
    low = folded(msg)
    if gpu is None:
        bm = _NVRM_BDF.search(msg, low)
        gm = _GPU_INDEX.search(msg, low)
        gpu = bm.group(1) if bm else next((g for g in gm.groups() if g), None) if gm else None
    host = line.host
    sm = _SLURM_NODE.search(msg, low) or _RAY_NODE.search(msg, low)
    if sm:
        host = next(g for g in sm.groups() if g)
    peer = None
    if rule.blame == "peer" or cause == "ib_link":
        pm = _PEER.search(msg, low)
        peer = pm.group(1) if pm else None
    stamp = line.stamp
    if stamp is None:
        am = _CANCELLED_AT.search(msg)
        if am:
            stamp = parse_line(am.group(1) + " x").stamp
    lc = _LAST_COMPLETED.search(msg, low)
    tm = _TIMEOUT_MS.search(msg, low)
    event = Event(
        file_index=0,
        file="",
        line_no=0,
        text=text.strip()[:EVIDENCE_TEXT_CHARS],
        rule=rule,
        cause=cause,
        tier=tier,
        kind=kind,
        confidence=confidence,
        detail=detail,
        host=host,
        rank=line.rank,
        gpu=gpu,
        peer=peer,
        stamp=stamp,
        is_kernel=line.program == "kernel" or kernel_hint(low),  # is_kernel_line(), folded once
        is_scheduler=line.program in SCHEDULER_PROGRAMS,
        action=action,
        last_completed=int(lc.group(1)) if lc else None,
        timeout_ms=int(tm.group(1)) if tm else None,
        signature=_DETAIL_NOISE.sub("", msg.strip())[:SIGNATURE_CHARS],
        chained=msg.startswith(JVM_CAUSED_BY) or python_chained,
    )
    return event


def rule_label(rule: Rule) -> str:
    """The rule's own short description (rules.yaml `detail`), else its id in words."""
    return rule.detail or rule.id.replace("-", " ")


# Python's ImportError and its subclass ModuleNotFoundError (https://docs.python.org/3/library/
# exceptions.html#ImportError), and the JVM's missing class (taxonomy.EXCEPTION_ALIAS): the
# environment the job brought (Acme's ImportError is a script failure). And the OSError
# subclasses of ENOENT and EACCES/EPERM (https://docs.python.org/3/library/exceptions.html#os-
# exceptions; IsADirectoryError and NotADirectoryError alias to FileNotFoundError): a path the
# job names that is not there or not its own, whichever library opened it (a dataset's path is
# rules.yaml dataset-load's, earlier; a full or failing disk is fs-errno's, by its errno).
ENVIRONMENT_EXCEPTIONS = frozenset({"ImportError", "FileNotFoundError", "PermissionError"})
# The modules of Hugging Face datasets, whose exceptions name them ("datasets.table.CastError:
# Couldn't cast", ibrahimethemhamamci/CT-CLIP#9; "datasets.builder.DatasetGenerationError").
DATASET_LIBRARY_MODULES = ("datasets.",)
# omegaconf's exceptions (https://omegaconf.readthedocs.io/en/latest/usage.html: ConfigKeyError,
# ConfigAttributeError, MissingMandatoryValue, ValidationError ...) and Hydra's, printed with
# their module, are about the config the job gave.
CONFIG_ERROR_MODULES = ("omegaconf.errors.", "hydra.errors.")
# "Failed to download s3://bucket/key -> /tmp/..." (mosaicml streaming's download, whose
# schemes include azure://), "failed to upload ... to gs://...": a transfer naming an object
# store's URL that failed; and streaming's "Waited longer than 60s for other worker to download"
# (https://github.com/mosaicml/streaming/blob/main/streaming/base/storage/download.py
# wait_for_download): the shard another rank fetches from the store did not arrive.
_STORE_TRANSFER_FAILED = re.compile(
    r"\b[Ff]ailed to (?:download|upload)\b[^\n]{0,200}?\b(?:s3|s3a|gs|gcs|az|azure|abfss?|oci)://"
    r"|^TimeoutError: Waited longer than [0-9.]+s for other worker to download "
)
# Exceptions torch.load's reader raises on a file it cannot read (a zip archive with no central
# directory, an unpickling error, a short read): open-mmlab/mmagic#876, junyanz/pytorch-CycleGAN-
# and-pix2pix#1703, zhufq00/mcnc#3. A missing file (FileNotFoundError) is the job's path.
CHECKPOINT_READ_ERRORS = frozenset({"RuntimeError", "EOFError", "UnpicklingError"})
# A frame of torch.load: serialization.py's load and the legacy and zip readers under it.
_CHECKPOINT_FRAME = re.compile(
    r'File "[^"]*torch[/\\]serialization\.py", line \d+, in _?(legacy_)?load'
)


def _in_checkpoint_read(exc: Line, before: Callable[[], list[str]]) -> bool:
    """Whether the exception's traceback (same host/rank) runs through torch.load."""
    for text in before():
        prev = parse_line(text)
        if (prev.host, prev.rank) != (exc.host, exc.rank):
            continue
        if prev.message.startswith("Traceback (most recent call last)"):
            return False
        if _CHECKPOINT_FRAME.match(prev.message):
            return True
    return False


# An exception's last line, as a rule of the exception tier may read one ("x.YError: ...").
_EXCEPTION_LINE = re.compile(
    r"(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception): "
)
# How Python prints an exception's place in a chain (https://docs.python.org/3/library/
# exceptions.html#exception-context): the earlier exception, then one of these, then the
# traceback of the one raised from it or while handling it.
_CHAIN_SEPARATORS = (
    "The above exception was the direct cause of the following exception",
    "During handling of the above exception, another exception occurred",
)
_TRACEBACK_HEADER = "Traceback (most recent call last)"


def _chain_verdicts(
    exc: Line, before: Callable[[], list[str]]
) -> list[families_python.ClassVerdict | None] | None:
    """The catalog's verdicts (families_python, consequences left out as None) for the earlier
    exceptions of the chain `exc` ends, nearest first; None where `exc` ends no chain."""
    out: list[families_python.ClassVerdict | None] = []
    after_header = in_earlier = False
    for text in before():
        prev = parse_line(text)
        if (prev.host, prev.rank) != (exc.host, exc.rank):
            continue
        msg = prev.message.strip()
        if not msg:
            continue
        if after_header:
            # A traceback's header: the chain goes on only where a separator precedes it.
            if not msg.startswith(_CHAIN_SEPARATORS):
                break
            after_header, in_earlier = False, True
            continue
        if msg.startswith(_TRACEBACK_HEADER) or msg.endswith(_TRACEBACK_HEADER):
            after_header = True
        elif in_earlier and not msg.startswith(("File ", "│", "^", "~")):
            verdict = families_python.exception_cause(msg)
            if verdict is not None or _EXC_NAME.fullmatch(msg.split(":", 1)[0]):
                # The earlier exception's last line (a catalogued class, or any dotted name
                # before a colon): its frames, further back, are looked through.
                cons = verdict is not None and verdict.cause == families_python.CONSEQUENCE
                out.append(None if cons else verdict)
                in_earlier = False
    return out if out else None


def _innermost_frame_at(
    exc: Line, before: Callable[[], list[str]]
) -> tuple[str, str | None] | None:
    """Walk back from an exception line to its innermost non-stdlib frame (same host/rank):
    the frame's file and function (None where the frame's line does not name one), or None."""
    for text in before():
        prev = parse_line(text)
        if (prev.host, prev.rank) != (exc.host, exc.rank):
            continue
        msg = prev.message
        if (
            msg.startswith(_TRACEBACK_HEADER)
            or (msg.startswith(_RICH_HEADER) and "Traceback" in msg)
            or msg.rstrip().endswith(_TRACEBACK_HEADER)  # IPython's "KeyError   Traceback (...)"
        ):
            return None
        if msg.startswith(_NOTEBOOK_CELL):
            return "<notebook cell>", None  # the user's own cell (IPython 8)
        fm = (
            _FRAME.match(msg)
            or (_RICH_FRAME.match(msg) if msg.startswith("│") else None)
            or _IPY_FRAME.match(msg)
        )
        if fm:
            if _frame_is_library(fm.group(1)) is not None:
                function = fm.group(2) if fm.re is not _RICH_FRAME else None
                return fm.group(1), function.rsplit(".", 1)[-1] if function else None
        elif _EXC_NAME.fullmatch(msg.split(":", 1)[0]) and msg.split(":", 1)[0].endswith(
            ("Error", "Exception")
        ):
            return None  # an earlier exception of a chain: its frames are not ours
    return None
