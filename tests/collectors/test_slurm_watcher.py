"""The Slurm watcher's parsing of recorded squeue / sinfo / scontrol text, and its events and
node states."""

from __future__ import annotations

import json

import pytest

from collectors.schema import JobEventBatch, JobGpus
from collectors.watchers import slurm as slurm_watcher
from collectors.watchers.slurm import SlurmWatcher
from collectors.watchers.slurmtext import (
    SEP,
    end_state,
    exit_status,
    expand_hostlist,
    field_separator,
    gres_gpu_indices,
    node_state_of,
    parse_exit_code,
    parse_key_values,
    parse_scontrol_job,
    parse_sinfo,
    parse_squeue,
    parse_time,
    sinfo_args,
    squeue_args,
    tres_gpus,
)

# Recorded from Debian 12's slurm-wlm 22.05.8 (tests/slurm.py's cluster), SLURM_TIME_FORMAT=%s.
SCONTROL_RUNNING = """\
JobId=1 JobName=a|b
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   Priority=4294901759 Nice=0 Account=(null) QOS=(null)
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   SubmitTime=1795942859 EligibleTime=1795942859
   StartTime=1795942862 EndTime=Unknown Deadline=N/A
   Partition=gpu AllocNode:Sid=vm:27577
   NodeList=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:2
     Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:2(IDX:0-1)
   Comment=ckpt 7b eval
   TresPerNode=gres:gpu:2
"""
SCONTROL_MULTINODE = """\
JobId=77 JobName=pretrain-123b
   UserId=alice(1001) GroupId=llm(1001) MCS_label=N/A
   Priority=4294901700 Nice=0 Account=llm-123b QOS=normal
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   SubmitTime=1795942800 EligibleTime=1795942800
   StartTime=1795942860 EndTime=1796029260 Deadline=N/A
   Partition=pretrain AllocNode:Sid=login:1
   NodeList=gpu[01-02],gpu05
   NumNodes=3-3 NumCPUs=48 NumTasks=3 CPUs/Task=16 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:a100:20
     Nodes=gpu[01-02] CPU_IDs=0-15 Mem=0 GRES=gpu:a100:8(IDX:0-7)
     Nodes=gpu05 CPU_IDs=0-15 Mem=0 GRES=gpu:a100:2(IDX:0,3),gpu:v100:1(IDX:5)
   TresPerJob=gres:gpu:20
"""
SCONTROL_FAILED = """\
JobId=2 JobName=wrap
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=1:0
   StartTime=2026-11-29T09:00:37 EndTime=2026-11-29T09:00:37 Deadline=N/A
   NodeList=vm
   NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:*
   JOB_GRES=gpu:1
     Nodes=vm CPU_IDs=1 Mem=0 GRES=
"""
# `sinfo_args()` on tests/slurm.py's two-node cluster (vn1, vn2), SLURM_TIME_FORMAT=%s: vn1
# runs a job and is drained by hand (draining), vn2 was drained idle with a reason holding a
# `|`; a third line lists vn2 again, as sinfo does for a node in two partitions.
SINFO = (
    f"vn1{SEP}allocated+drain{SEP}drain while running{SEP}1796168229{SEP}\n"
    f"vn2{SEP}idle+drain{SEP}hand drain | with pipe{SEP}1796168216{SEP}\n"
    f"vn2{SEP}idle+drain{SEP}hand drain | with pipe{SEP}1796168216{SEP}\n"
)


def sinfo_line(node, state, reason="none", ts="Unknown"):
    return f"{node}{SEP}{state}{SEP}{reason}{SEP}{ts}{SEP}\n"


def squeue_line(
    job_id,
    state,
    *,
    name="wrap",
    submit="1795942859",
    start="N/A",
    end="N/A",
    per_node="gres:gpu:2",
    per_job="N/A",
    nodes="1",
    node_list="",
    comment="(null)",
    account="(null)",
    exit_code="0",
):
    cols = [
        job_id,
        state,
        name,
        "root",
        "gpu",
        "(null)",
        submit,
        start,
        end,
        per_node,
        per_job,
        nodes,
        node_list,
        comment,
        account,
        exit_code,
    ]
    return SEP.join(cols) + SEP + "\n"


def test_gpu_indices_ranges_lists_and_types():
    assert gres_gpu_indices("gpu:2(IDX:0-1)") == [0, 1]
    assert gres_gpu_indices("gpu(IDX:0,2,5-7)") == [0, 2, 5, 6, 7]
    assert gres_gpu_indices("gpu:a100:2(IDX:0,3),gpu:v100:1(IDX:5)") == [0, 3, 5]
    assert gres_gpu_indices("gpu:2(IDX:0-1),shard:4(4/8,0/8)") == [0, 1]
    assert gres_gpu_indices("") == [] and gres_gpu_indices("gpu:1(IDX:N/A)") == []


def test_hostlists_expand_with_padding():
    assert expand_hostlist("gpu[01-03,07],login") == ["gpu01", "gpu02", "gpu03", "gpu07", "login"]
    assert expand_hostlist("rack[1-2]-n[8-9]") == ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]
    assert expand_hostlist("(null)") == [] and expand_hostlist("vm") == ["vm"]


def test_small_fields():
    assert tres_gpus("gres:gpu:2") == 2 and tres_gpus("cpu=1,gres/gpu=4") == 4
    assert tres_gpus("gres:gpu:a100:8") == 8 and tres_gpus("N/A") is None
    assert parse_exit_code("1:0") == 1 and parse_exit_code("0:9") == -9
    assert parse_exit_code("0:0") == 0 and parse_exit_code("") is None
    assert exit_status("768") == 3 and exit_status("9") == -9 and exit_status("0") == 0
    assert exit_status("N/A") is None
    assert end_state("CANCELLED by 0") == "CANCELLED" and end_state("BOOT_FAIL") == "NODE_FAIL"
    assert end_state("RUNNING") is None and end_state("PENDING") is None
    assert parse_time("1795942859") == 1795942859.0 and parse_time("Unknown") is None
    assert parse_time("N/A") is None and parse_time("NONE") is None


def test_squeue_args_name_explicit_fields():
    args = squeue_args()
    assert args[:4] == ["squeue", "--all", "--noheader", "--states=all"]
    assert "JobID:" + SEP in args[-1] and "tres-per-job:" + SEP in args[-1]


def test_squeue_rows():
    text = squeue_line(
        "1",
        "RUNNING",
        name="a|b",
        start="1795942862",
        node_list="gpu[1-2]",
        nodes="2",
        comment="ckpt 7b",
        account="llm-7b",
    ) + squeue_line("2", "PENDING", per_node="N/A", per_job="gres:gpu:3")
    running, pending = parse_squeue(text)
    assert running.name == "a|b" and running.comment == "ckpt 7b" and running.qos == ""
    assert running.project == "llm-7b" and pending.project == ""  # Slurm prints (null)
    assert running.start_ts == 1795942862.0 and running.end_ts is None
    assert running.gpus == 4 and running.nodes == 2 and running.node_list == ["gpu1", "gpu2"]
    assert pending.gpus == 3 and pending.start_ts is None and pending.node_list == []


def test_a_job_name_cannot_write_rows_or_fields_into_the_squeue_listing():
    """A name holding newlines and the plain SEP (Slurm 22.05 prints both as given) stays one
    field when the listing is split on a separator drawn for the call."""
    sep = field_separator()
    assert sep != field_separator() and sep.startswith(SEP) and sep.endswith(SEP)
    forged_row = squeue_line("999", "FAILED", node_list="victim-node-77", account="other")
    name = "x" + SEP + "COMPLETED\n" + forged_row.rstrip("\n")
    text = squeue_line("5", "RUNNING", name="NAME", node_list="gpu1", account="mine")
    (job,) = parse_squeue(text.replace(SEP, sep).replace("NAME", name), sep)
    assert (job.job_id, job.state, job.node_list, job.project) == ("5", "RUNNING", ["gpu1"], "mine")
    assert job.name == name.strip()  # outer blanks go, as for every field


def test_a_key_printed_twice_by_scontrol_is_not_believed():
    kv = parse_key_values(
        "JobId=5 JobName=t StdOut=/etc/shadow UserId=root(0)\n"
        "   UserId=alice(1000) GroupId=alice(1000)\n   StdOut=/home/a/5.out"
    )
    assert "UserId" not in kv and "StdOut" not in kv and "JobName" in kv
    assert kv["GroupId"] == "alice(1000)"


def test_a_job_name_cannot_give_its_job_gpus_in_scontrol():
    forged = SCONTROL_RUNNING.replace(
        "JobName=a|b",
        "JobName=a\n     Nodes=vm CPU_IDs=0 Mem=0 GRES=gpu:8(IDX:0-7)\n   ExitCode=1:0",
    )
    job = parse_scontrol_job(forged)
    assert job.allocation == [] and job.exit_code is None
    assert parse_scontrol_job(SCONTROL_RUNNING).allocation == [
        JobGpus(node="vm", gpu_indices=[0, 1])
    ]


def test_scontrol_allocation_per_node():
    job = parse_scontrol_job(SCONTROL_RUNNING)
    assert job.allocation == [JobGpus(node="vm", gpu_indices=[0, 1])]
    assert job.state == "RUNNING" and job.comment == "ckpt 7b eval" and job.user == "root"
    assert job.start_ts == 1795942862.0 and job.end_ts is None and job.gpus == 2
    multi = parse_scontrol_job(SCONTROL_MULTINODE)
    assert [(a.node, a.gpu_indices) for a in multi.allocation] == [
        ("gpu01", list(range(8))),
        ("gpu02", list(range(8))),
        ("gpu05", [0, 3, 5]),
    ]
    assert multi.gpus == 19 and multi.nodes == 3 and multi.user == "alice"
    assert multi.project == "llm-123b" and job.project == ""
    failed = parse_scontrol_job(SCONTROL_FAILED)
    assert failed.exit_code == 1 and failed.allocation == [JobGpus(node="vm", gpu_indices=[])]


# What Slurm 22.05 printed on tests/slurm.py's two-node cluster for each node state seen
# there: the complete form the watcher reads (`StateComplete`), then the long (`%T`) and short
# (`%t`) forms of the same states, with Vigil's state for each.
SEEN_STATES = [
    ("idle", "up"),
    ("mixed", "up"),  # a job on some of its CPUs
    ("allocated", "up"),  # a job on all of them
    ("allocated+drain", "draining"),  # drained by hand, its job still running
    ("idle+drain", "drained"),
    ("down", "down"),  # scontrol update State=DOWN
    ("down+drain", "down"),  # drained, then State=DOWN (%T says `drained`, hiding the down)
    ("idle+fail", "down"),  # scontrol update State=FAIL
    ("mixed+fail", "down"),  # State=FAIL with a job still running
    ("idle+not_responding", "down"),  # its slurmd killed
    ("idle+drain+not_responding", "down"),  # then drained
    ("down+not_responding", "down"),  # SlurmdTimeout (300 s) later: reason "Not responding"
    # %T
    ("draining", "draining"),
    ("drained", "drained"),
    ("fail", "down"),
    ("idle*", "down"),
    ("drained*", "down"),
    ("down*", "down"),
    # %t
    ("mix", "up"),
    ("alloc", "up"),
    ("drng", "draining"),
    ("drain", "drained"),
    ("drain*", "down"),
]


@pytest.mark.parametrize(("slurm", "vigil"), SEEN_STATES)
def test_node_states_as_slurm_prints_them(slurm, vigil):
    assert node_state_of(slurm) == vigil


@pytest.mark.parametrize(
    ("slurm", "vigil"),
    [
        # Documented in sinfo(1) "NODE STATE CODES", not reproduced on the test cluster.
        ("unknown*", "down"),
        ("down+drain+not_responding", "down"),
        ("failing", "down"),
        ("inval", "down"),
        ("allocated", "up"),
        ("completing", "up"),
        ("mixed+completing", "up"),
        ("planned", "up"),
        ("idle~", "up"),  # powered off by power saving, will boot for a job
        ("idle+cloud+powered_down", "up"),
        ("reserved", "up"),
        ("drng", "draining"),  # the %t abbreviations
        ("drain", "drained"),
        ("mixed+drain", "draining"),
        ("completing+drain", "draining"),
        ("idle+drain+maintenance", "drained"),
        ("DRAINED", "drained"),
        # Not known yet: nothing to report.
        ("unknown", None),
        ("future", None),
        ("", None),
    ],
)
def test_node_states_by_the_names_sinfo_documents(slurm, vigil):
    assert node_state_of(slurm) == vigil


def test_sinfo_rows():
    args = sinfo_args()
    assert args[:5] == ["sinfo", "--all", "--Node", "--noheader", "-O"]
    assert "StateComplete:" + SEP in args[-1] and "Reason:" + SEP in args[-1]
    vn1, vn2 = parse_sinfo(SINFO + sinfo_line("vn3", "idle"))[:2]
    assert (vn1.name, vn1.slurm_state, vn1.reason) == (
        "vn1",
        "allocated+drain",
        "drain while running",
    )
    assert vn1.reason_ts == 1796168229.0
    assert vn2.reason == "hand drain | with pipe" and vn2.slurm_state == "idle+drain"
    (*_, vn3) = parse_sinfo(SINFO + sinfo_line("vn3", "idle"))
    assert (vn3.name, vn3.reason, vn3.reason_ts) == ("vn3", "", None)  # `none`, `Unknown`
    assert [n.name for n in parse_sinfo(SINFO + sinfo_line("gpu[01-02]", "idle"))] == [
        "vn1",
        "vn2",
        "gpu01",
        "gpu02",
    ]
    assert parse_sinfo("garbage\n") == []


def separator_of(args: list[str]) -> str:
    """The field separator a `-O` listing was asked with (after its first field's name)."""
    first = args[args.index("-O") + 1].split(",")[0]
    return first.split(":", 1)[1]


class FakeSlurm:
    """Answers the watcher's commands from recorded text the test changes between polls,
    written with SEP and printed with the separator each listing asks for."""

    def __init__(self) -> None:
        self.squeue = ""
        self.sinfo = ""
        self.scontrol: dict[str, str] = {}
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(args)
        if args[0] == "squeue":
            return self.squeue.replace(SEP, separator_of(args))
        if args[0] == "sinfo":
            return self.sinfo.replace(SEP, separator_of(args))
        if args[:3] == ["scontrol", "show", "job"]:
            return self.scontrol.get(args[-1], "")
        raise AssertionError(args)


def events_of(batches):
    out = []
    for _id, text in batches:
        batch = JobEventBatch.model_validate_json(text)
        assert batch.source == "slurm" and batch.node == "ctl" and batch.cluster == "seren"
        out += batch.events
    return out


def test_watcher_reports_each_change_once_and_survives_a_restart(tmp_path):
    slurm = FakeSlurm()
    state = tmp_path / "state.json"

    def watcher():
        return SlurmWatcher("seren", "ctl", "t" * 20, state_path=state, runner=slurm)

    w = watcher()
    slurm.squeue = squeue_line("1", "PENDING", name="eval-x", comment="ckpt 7b")
    (submitted,) = events_of(w.poll(1795942860.0))
    w.commit()
    assert submitted.kind == "submitted" and submitted.ts == 1795942859.0
    assert submitted.gpus_requested == 2 and submitted.comment == "ckpt 7b"
    assert w.poll(1795942861.0) == []  # nothing new: nothing sent

    slurm.squeue = squeue_line("1", "RUNNING", name="eval-x", start="1795942862", node_list="vm")
    slurm.scontrol["1"] = SCONTROL_RUNNING
    (started,) = events_of(w.poll(1795942863.0))
    w.commit()
    assert started.kind == "started" and started.start_ts == 1795942862.0
    assert started.allocation == [JobGpus(node="vm", gpu_indices=[0, 1])]

    # A restarted watcher remembers what it sent.
    w = watcher()
    assert w.poll(1795942864.0) == []

    # Requeued: back to PENDING, seen by this poll.
    slurm.squeue = squeue_line("1", "PENDING", name="eval-x", submit="1795942870")
    (requeued,) = events_of(w.poll(1795942871.0))
    w.commit()
    assert requeued.kind == "requeued" and requeued.ts == 1795942871.0

    # Runs again, then fails with exit code 1 between two polls.
    slurm.squeue = squeue_line(
        "1",
        "FAILED",
        name="eval-x",
        submit="1795942870",
        start="1795942880",
        end="1795942890",
        node_list="vm",
        exit_code="256",
    )
    started2, ended = events_of(w.poll(1795942891.0))
    w.commit()
    assert (started2.kind, started2.ts) == ("started", 1795942880.0)
    assert started2.submit_ts == 1795942859.0  # the first submit time, not the requeue's
    assert ended.kind == "ended" and ended.state == "FAILED" and ended.exit_code == 1
    assert (ended.start_ts, ended.end_ts) == (1795942880.0, 1795942890.0)
    assert w.poll(1795942892.0) == []
    # Gone from squeue: forgotten.
    slurm.squeue = ""
    assert w.poll(1795942999.0) == []
    w.commit()
    assert json.loads(state.read_text())["jobs"] == {}


def test_a_job_that_ended_between_two_polls_has_its_exit_code_from_squeue(tmp_path):
    slurm = FakeSlurm()
    w = SlurmWatcher("seren", "ctl", "t" * 20, runner=slurm)
    slurm.squeue = squeue_line(
        "2",
        "FAILED",
        start="1795942862",
        end="1795942863",
        node_list="vm",
        per_node="gres:gpu:1",
        exit_code="256",
    )
    kinds = [(e.kind, e.state, e.exit_code) for e in events_of(w.poll(1795942870.0))]
    assert kinds == [("submitted", None, None), ("started", None, None), ("ended", "FAILED", 1)]


def test_watcher_skips_a_poll_when_squeue_fails(tmp_path):
    from collectors.watchers.slurmtext import SlurmError

    def broken(args):
        raise SlurmError("squeue: slurm_load_jobs error: Unable to contact slurm controller")

    w = SlurmWatcher("seren", "ctl", "t" * 20, runner=broken)
    assert w.poll(1795942870.0) == []


@pytest.mark.parametrize("interval", [30.0])
def test_watcher_polls_no_more_often_than_its_interval(interval):
    slurm = FakeSlurm()
    w = SlurmWatcher("seren", "ctl", "t" * 20, runner=slurm, interval_s=interval)
    w.poll(1000.0 + 1e9)
    w.poll(1010.0 + 1e9)
    w.poll(1031.0 + 1e9)
    assert sum(c[0] == "squeue" for c in slurm.calls) == 2


def states_of(batches):
    out = []
    for _id, text in batches:
        out += JobEventBatch.model_validate_json(text).node_states
    return out


def test_watcher_reports_node_states_when_they_change_and_survives_a_restart(tmp_path):
    slurm = FakeSlurm()
    state = tmp_path / "state.json"

    def watcher():
        return SlurmWatcher("seren", "ctl", "t" * 20, state_path=state,
                            runner=slurm)  # fmt: skip

    w = watcher()
    slurm.sinfo = sinfo_line("vn1", "idle") + sinfo_line("vn2", "mixed")
    # The first poll says where every node stands, in a batch with no job events.
    batches = w.poll(1795942860.0)
    w.commit()
    assert len(batches) == 1 and events_of(batches) == []
    assert [(s.node, s.state, s.reason, s.since) for s in states_of(batches)] == [
        ("vn1", "up", "", 1795942860.0),
        ("vn2", "up", "", 1795942860.0),
    ]
    slurm.sinfo = sinfo_line("vn1", "allocated") + sinfo_line("vn2", "idle")
    assert w.poll(1795942861.0) == []  # busy or not, both still up: nothing to send

    # Drained by hand while its job runs, then the job ends: each step once, since the drain.
    slurm.sinfo = sinfo_line("vn1", "idle") + sinfo_line(
        "vn2", "allocated+drain", "bad gpu, ticket 7", "1795942862"
    )
    (draining,) = states_of(w.poll(1795942863.0))
    w.commit()
    assert (draining.node, draining.state, draining.reason) == (
        "vn2",
        "draining",
        "bad gpu, ticket 7",
    )
    assert draining.since == 1795942862.0
    slurm.sinfo = sinfo_line("vn1", "idle") + sinfo_line(
        "vn2", "idle+drain", "bad gpu, ticket 7", "1795942862"
    )
    (drained,) = states_of(w.poll(1795942864.0))
    w.commit()
    assert (drained.state, drained.since) == ("drained", 1795942862.0)

    # A restarted watcher remembers; the reason changing is news.
    w = watcher()
    assert w.poll(1795942865.0) == []
    slurm.sinfo = sinfo_line("vn1", "idle") + sinfo_line(
        "vn2", "idle+drain", "RMA " + "x" * 300, "1795942866"
    )
    (again,) = states_of(w.poll(1795942867.0))
    w.commit()
    assert again.reason == ("RMA " + "x" * 300)[:256] and again.since == 1795942866.0

    # Resumed: up, stamped when the watcher saw it (sinfo gives no time for up nodes).
    slurm.sinfo = sinfo_line("vn1", "idle") + sinfo_line("vn2", "idle")
    (resumed,) = states_of(w.poll(1795942870.0))
    w.commit()
    assert (resumed.node, resumed.state, resumed.reason, resumed.since) == (
        "vn2",
        "up",
        "",
        1795942870.0,
    )
    # A node Slurm does not know yet reports nothing; one removed is forgotten.
    slurm.sinfo = sinfo_line("vn1", "unknown")
    assert w.poll(1795942871.0) == []
    w.commit()
    assert list(json.loads(state.read_text())["nodes"]) == ["vn1"]


def test_node_states_go_out_even_when_squeue_fails(tmp_path):
    from collectors.watchers.slurmtext import SlurmError

    slurm = FakeSlurm()
    slurm.sinfo = sinfo_line("vn1", "down", "Not responding", "1795942800")

    def no_squeue(args):
        if args[0] == "squeue":
            raise SlurmError("squeue: slurm_load_jobs error: Socket timed out")
        return slurm(args)

    w = SlurmWatcher("seren", "ctl", "t" * 20, runner=no_squeue)
    (down,) = states_of(w.poll(1795942870.0))
    assert (down.state, down.reason, down.since) == ("down", "Not responding", 1795942800.0)


def test_a_cluster_larger_than_a_batch_goes_in_several(monkeypatch):
    monkeypatch.setattr(slurm_watcher, "MAX_NODE_STATES_PER_BATCH", 2)
    slurm = FakeSlurm()
    slurm.sinfo = "".join(sinfo_line(f"n{i}", "idle") for i in range(5))
    slurm.squeue = squeue_line("1", "PENDING")
    w = SlurmWatcher("seren", "ctl", "t" * 20, runner=slurm)
    batches = w.poll(1795942870.0)
    assert [len(JobEventBatch.model_validate_json(t).node_states) for _, t in batches] == [2, 2, 1]
    assert len(events_of(batches)) == 1  # the job event goes once, in the first batch
    assert [s.node for s in states_of(batches)] == [f"n{i}" for i in range(5)]
