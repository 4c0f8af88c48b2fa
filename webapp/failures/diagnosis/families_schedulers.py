"""Schedulers', launchers' and memory watchers' catalogs: memory kills outside the kernel, run-time
limits, preemption notices and Slurm's refused requests (the registry and the tables'
conventions: families.py).
"""

from __future__ import annotations

from webapp.failures.diagnosis.family_table import Member, Table

# Kills for memory that no kernel line reports: the process managers that watch memory and
# kill before the kernel does.
MEMORY_KILLERS = Table(
    id="memory-killers",
    source="Ray's memory monitor, ray.exceptions.OutOfMemoryError 'Task was killed due to the "
    "node running low on memory' (https://docs.ray.io/en/latest/ray-core/scheduling/"
    "ray-oom-prevention.html); systemd-oomd 'Killed ... due to memory pressure' "
    "(https://www.freedesktop.org/software/systemd/man/latest/systemd-oomd.service.html); "
    "earlyoom 'sending SIGTERM/SIGKILL to process' (https://github.com/rfjakob/earlyoom)",
    members=(
        Member(
            patterns=(
                "ray\\.exceptions\\.OutOfMemoryError",
                "killed due to the node running low on memory",
                "Worker exit type: NODE_OUT_OF_MEMORY",
                # the journal's "host systemd-oomd[pid]: " is stripped before the rules read it
                "^Killed /[^ ]+ due to (memory|swap)",
                "earlyoom.*(sending SIG(TERM|KILL)|low memory)",
            ),
            anchors=("outofmemoryerror", "running low on memory", "due to memory", "earlyoom"),
        ),
        # Ray's memory monitor before 2.0 raised RayOutOfMemoryError in the task: "More than 95%
        # of the memory on node eric-ThinkPad is used (11.8 / 12.3 GB)" (ray-project/ray#3323,
        # python/ray/memory_monitor.py); its class name holds "OutOfMemoryError", which the
        # CUDA rule would read as the GPU's.
        Member(
            patterns=(
                "RayOutOfMemoryError",
                "More than [0-9]+% of the memory on node [^ ]+ is used",
            ),
            anchors=("rayoutofmemoryerror", "of the memory on node"),
        ),
        # The same kill's other lines: the task error's "Memory on the node (IP: ..., ID: ...)
        # where the task ... was running", and the raylet's summary "N Workers (tasks / actors)
        # killed due to memory pressure (OOM)" with N above 0 (a summary of crashes only says
        # nothing of memory); where a terminal wraps the summary before its "node (ID: ...,
        # IP: ...) over the last time period", that line's own end is read as it (the count
        # then unseen: the raylet prints the summary after kills, mostly for memory).
        Member(
            patterns=(
                "^Memory on the node \\(IP: [0-9.]+, ID: [0-9a-f]+\\) where the task",
                "[1-9][0-9]* Workers \\(tasks / actors\\) killed due to memory pressure \\(OOM\\)",
                "^node \\(ID: [0-9a-f]+, IP: [0-9.]+\\) over the last time period",
            ),
            anchors=("memory on the node", "killed due to memory pressure", "last time period"),
        ),
    ),
    examples=(
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
        "memory. Memory on the node (IP: 10.0.0.4, ID: 7f) where the task was running was "
        "61.2GB / 64.0GB (0.956)",
        "(raylet) node_manager.cc:3097: 10 Workers (tasks / actors) killed due to memory "
        "pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 2c8262, IP: "
        "172.31.183.172) over the last time period.",
        "Jan 03 10:12:44 gpu-4 systemd-oomd[812]: Killed /user.slice/user-1000.slice/"
        "session-3.scope due to memory pressure for /user.slice being 82.10% > 50.00%",
        'earlyoom: sending SIGTERM to process 4242 uid 1000 "python": badness 900',
        "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node "
        "eric-ThinkPad is used (11.8 / 12.3 GB). The top 5 memory consumers are:",
    ),
)


# The schedulers' and orchestrators' own words for a memory-limit kill besides Slurm's
# (rules.yaml scheduler-memory-limit): Kubernetes' kubelet evicting a pod
# (https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/), HTCondor's
# hold reason (https://htcondor.readthedocs.io/en/latest/users-manual/managing-a-job.html),
# Grid Engine's h_vmem limit (https://gridscheduler.sourceforge.net/htmlman/htmlman5/
# queue_conf.html); the managed training platforms' verdict on a replica: Vertex AI's and AI
# Platform Training's "The replica <name> ran out-of-memory and exited with a non-zero status of
# <code>" (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service,
# common errors; the code is a signal "9(SIGKILL)" or a status, exits.py).
SCHEDULER_MEMORY_KILLS = Table(
    id="scheduler-memory-kills",
    source="Kubernetes node-pressure eviction https://kubernetes.io/docs/concepts/scheduling-"
    "eviction/node-pressure-eviction/ ('The node was low on resource: memory'); HTCondor's hold "
    "reason ('Job has gone over memory limit', 'over cgroup memory limit'); Grid Engine's "
    "h_vmem ('exceeds job hard limit \"h_vmem\"'); Vertex AI / AI Platform Training's replica "
    "verdict https://cloud.google.com/vertex-ai/docs/training/understanding-training-service "
    "('The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of ...')",
    members=(
        Member(
            patterns=(
                "The node was low on resource: memory",
                "Job has gone over (cgroup )?memory limit",
                "exceeds job hard limit .?h_vmem",
                "[Rr]eplica .* ran out-of-memory",
                # the kubelet evicting or refusing a pod for its node's condition
                # (nodeConditionMessageFmt "The node had condition: %v. ")
                "The node had condition: \\[[A-Za-z, ]*MemoryPressure",
            ),
            anchors=(
                "low on resource: memory",
                "gone over",
                "h_vmem",
                "ran out-of-memory",
                "the node had condition: ",
            ),
        ),
    ),
    examples=(
        "Message: The node was low on resource: memory. Container trainer was using 61234520Ki, "
        "which exceeds its request of 0.",
        "Hold reason: Error from slot1_4@gpu-12: Job has gone over cgroup memory limit of 16384 "
        "megabytes.",
        'job 4242.1 exceeds job hard limit "h_vmem" of queue "gpu.q@gpu-07" (34.1G > limit:32G)'
        " - sending SIGKILL",
        "The replica master 0 ran out-of-memory and exited with a non-zero status of 9(SIGKILL)",
    ),
)


# The schedulers' wordings of a job killed at its run-time limit besides Slurm's "DUE TO TIME
# LIMIT": PBS (https://www.openpbs.org: "=>> PBS: job killed: walltime 3605 exceeded limit
# 3600"), LSF's termination reason TERM_RUNLIMIT (https://www.ibm.com/docs/en/spectrum-lsf/
# 10.1.0?topic=jobs-termination-reasons), Kubernetes' Job DeadlineExceeded
# (https://kubernetes.io/docs/concepts/workloads/controllers/job/#job-termination-and-cleanup).
SCHEDULER_TIME_LIMITS = Table(
    id="scheduler-time-limits",
    source="PBS 'job killed: walltime N exceeded limit M' https://www.openpbs.org; LSF "
    "TERM_RUNLIMIT https://www.ibm.com/docs/en/spectrum-lsf/10.1.0?topic=jobs-termination-"
    "reasons; Kubernetes Job 'DeadlineExceeded' https://kubernetes.io/docs/concepts/workloads/"
    "controllers/job/#job-termination-and-cleanup",
    members=(
        Member(
            patterns=(
                "job killed: walltime [0-9]+ exceeded limit",
                "TERM_RUNLIMIT: job killed",
                "Job was active longer than specified deadline",
            ),
            anchors=("walltime", "term_runlimit", "specified deadline"),
        ),
    ),
    examples=(
        "=>> PBS: job killed: walltime 86415 exceeded limit 86400",
        "TERM_RUNLIMIT: job killed after reaching LSF run time limit.",
        "Warning  DeadlineExceeded  job-controller  Job was active longer than specified deadline",
    ),
)


# Cloud providers' notices that a preemptible (spot) instance is being taken back: GCE
# (https://cloud.google.com/compute/docs/instances/preemptible), AWS's spot interruption notice
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html);
# the kubelet's graceful node shutdown ending the pods of a node going down (a spot reclaim or
# maintenance): "Pod was terminated in response to imminent node shutdown." (pkg/kubelet/
# nodeshutdown/nodeshutdown_manager_linux.go, https://kubernetes.io/docs/concepts/architecture/
# nodes/#graceful-node-shutdown).
PREEMPTION_NOTICES = Table(
    id="preemption-notices",
    source="GCE preemption https://cloud.google.com/compute/docs/instances/preemptible "
    "('Instance was preempted'); EC2 spot interruption notices "
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html; "
    "the kubelet's graceful node shutdown https://kubernetes.io/docs/concepts/architecture/nodes/"
    "#graceful-node-shutdown ('Pod was terminated in response to imminent node shutdown.')",
    members=(
        Member(
            patterns=(
                "[Ii]nstance (was|has been) preempted",
                "[Ss]pot [Ii]nstance [Ii]nterruption",
                "(TPU|VM|node|pod|worker)s? (was|were|has been|have been|may have been|got) "
                "preempted",
            ),
            anchors=("preempted", "instance interruption"),
        ),
        Member(text="terminated in response to imminent node shutdown"),
    ),
    examples=(
        "compute.instances.preempted: Instance was preempted.",
        "EC2 Spot Instance Interruption Warning received for i-0abc123",
        "RuntimeError: The TPU VM was preempted; restart the job from its last checkpoint",
        "Message:  Pod was terminated in response to imminent node shutdown.",
    ),
)


# Slurm's error strings for a request it refuses (slurm_errno.c,
# https://github.com/SchedMD/slurm/blob/master/src/common/slurm_errno.c), as srun, sbatch and
# salloc print them before the job runs: the job's own request (its account, partition, nodes,
# memory or time), never a node's fault.
SLURM_REQUEST_ERRORS = Table(
    id="slurm-request-errors",
    source="Slurm's error strings https://github.com/SchedMD/slurm/blob/master/src/common/"
    "slurm_errno.c: ESLURM_INVALID_ACCOUNT, ESLURM_INVALID_PARTITION_NAME, "
    "ESLURM_REQUESTED_NODE_CONFIG_UNAVAILABLE, ESLURM_ACCOUNTING_POLICY, ESLURM_INVALID_TIME_LIMIT,"
    " ESLURM_INVALID_GRES, memory required by task not available",
    members=(
        Member(
            patterns=tuple(
                f"{what}: (Invalid account|Invalid partition|Requested node configuration is not "
                "available|Job violates accounting/QOS policy|Requested time limit is invalid|"
                "Invalid generic resource|Memory required by task is not available|Node count "
                "specification invalid|Requested partition configuration not available)"
                for what in (
                    "Unable to allocate resources",
                    "Batch job submission failed",
                    "Unable to create step for job [0-9]+",
                )
            ),
            anchors=(
                "unable to allocate resources",
                "batch job submission failed",
                "unable to create step",
            ),
        ),
    ),
    examples=(
        "srun: error: Unable to allocate resources: Requested node configuration is not available",
        "sbatch: error: Batch job submission failed: Invalid account or account/partition "
        "combination specified",
    ),
)
