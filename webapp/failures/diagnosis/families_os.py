"""OS's and kernel's reports: the errnos of storage, of the network and of a command that cannot
run, and the kernel's block-layer and Lustre errors (the registry and the tables' conventions:
families.py).
"""

from __future__ import annotations

from webapp.failures.diagnosis.family_table import Member, Table


def _errno(symbol: str, number: int, text: str) -> tuple[Member, ...]:
    """An errno as C (strerror), Python ("[Errno n]"), Rust ("os error n") and Node/libuv (the
    E-name) print it."""
    return (
        Member(symbol=symbol, text=text),
        # (each with a literal of its own: the rules' prefilter skips a pattern whose literal
        # the line lacks, catalogue.required_literal)
        Member(
            patterns=(f"os error {number}\\)", f"errno[ =:]+{number}([^0-9]|$)"),
            anchors=("errno", "os error "),
        ),
    )


# errno(3) (https://man7.org/linux/man-pages/man3/errno.3.html) and glibc's strerror texts
# (https://sourceware.org/git/?p=glibc.git;a=blob;f=sysdeps/gnu/errlist.h): the errnos that
# are the storage's whatever code reports them (docs/failure-taxonomy.md filesystem: "ENOSPC,
# EIO, stale handle"). ENOTCONN is a FUSE mount (s3fs, gcsfuse, blobfuse) whose daemon died,
# only where it names a path: a socket's ENOTCONN is the network's.
ERRNO_FILESYSTEM = Table(
    id="errno-filesystem",
    source="errno(3) https://man7.org/linux/man-pages/man3/errno.3.html, glibc strerror texts "
    "https://sourceware.org/git/?p=glibc.git;a=blob;f=sysdeps/gnu/errlist.h: ENOSPC 28, "
    "EDQUOT 122, EIO 5, ESTALE 116, EROFS 30, EFBIG 27, ESHUTDOWN 108, EREMOTEIO 121, ENOTCONN "
    "107 on a path",
    members=(
        *_errno("ENOSPC", 28, "No space left on device"),
        *_errno("EDQUOT", 122, "Disk quota exceeded"),
        *_errno("EIO", 5, "Input/output error"),
        *_errno("ESTALE", 116, "Stale file handle"),
        Member(text="Stale NFS file handle"),  # glibc's text before 2.17
        *_errno("EROFS", 30, "Read-only file system"),
        *_errno("EFBIG", 27, "File too large"),
        # a Lustre client evicted by its servers returns ESHUTDOWN on every open file; NFS and
        # SMB clients return EREMOTEIO for a server-side failure
        *_errno("ESHUTDOWN", 108, "Cannot send after transport endpoint shutdown"),
        *_errno("EREMOTEIO", 121, "Remote I/O error"),
        # Kubernetes evicting a pod whose node's disk filled (node-pressure eviction,
        # https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/)
        # and its evictions of a pod over its own ephemeral-storage limits (eviction_manager.go:
        # "Pod ephemeral local storage usage exceeds the total limit of containers %s",
        # "Container %s exceeded its local ephemeral storage limit %q", "Usage of EmptyDir
        # volume %q exceeds the limit %q", and "The node had condition: [DiskPressure]"): the
        # job filled the disk it was given.
        Member(
            patterns=(
                "low on resource: ephemeral-storage",
                "ephemeral local storage usage exceeds the total limit",
                "exceeded its local ephemeral storage limit",
                "Usage of EmptyDir volume .* exceeds the limit",
                "The node had condition: \\[[A-Za-z, ]*DiskPressure",
            ),
            anchors=(
                "low on resource: ephemeral-storage",
                "ephemeral local storage usage exceeds",
                "local ephemeral storage limit",
                "usage of emptydir volume",
                "the node had condition: ",
            ),
        ),
        Member(
            symbol="",
            patterns=(
                "\\[Errno 107\\] Transport endpoint is not connected: ",
                "cannot (access|open|stat|create) .*: Transport endpoint is not connected",
            ),
            anchors=("transport endpoint is not connected",),
        ),
    ),
    examples=(
        "Error: ENOSPC: no space left on device, write",
        "thread 'main' panicked at 'failed to write shard: Os { code: 122, kind: Other, "
        'message: "Disk quota exceeded" }\'',
        "Error: failed to flush checkpoint (os error 5)",
        "OSError: [Errno 107] Transport endpoint is not connected: '/mnt/gcs/ckpt'",
        "ls: cannot access '/mnt/s3/data': Transport endpoint is not connected",
        "OSError: [Errno 27] File too large",
        "Message: Pod The node was low on resource: ephemeral-storage. Container trainer was "
        "using 212Gi, which exceeds its request of 0.",
        "Message:  Pod ephemeral local storage usage exceeds the total limit of containers 512Mi.",
    ),
)


# A shell or exec reporting ENOENT for the program it was to run: the job's command names a
# script or binary that is not there (bash(1) "COMMAND EXECUTION": "If the search is
# unsuccessful, the shell prints an error message"; env(1); execve(2) ENOENT). Slurm's staged
# batch script (slurm_script in slurmd's spool) is the node's, not the job's: rules.yaml
# slurm-script-missing reads it first.
ENOENT_COMMAND = Table(
    id="enoent-command",
    source="execve(2) ENOENT, EACCES, ENOEXEC https://man7.org/linux/man-pages/man2/execve.2.html"
    " and bash(1) "
    "COMMAND EXECUTION https://www.gnu.org/software/bash/manual/bash.html#Command-Search-and-"
    "Execution: a shell, env or exec that cannot find the program of the job's command",
    members=(
        Member(
            patterns=(
                "^[^ ]+: ((line |行 )?[0-9]+: )?[^ ]+: No such file or directory$",
                "^env: .?[^ ]+.?: No such file or directory$",
                # slurmstepd's or srun's execve of the task's program, with any of the three
                "execve\\(\\): [^ ]+: (No such file or directory|Permission denied|"
                "Exec format error)",
                # EACCES: a script without its execute bit; ENOEXEC: a binary of another
                # architecture (docker's "exec /usr/bin/python: exec format error")
                "^[^ ]+: ((line |行 )?[0-9]+: )?[^ ]+: Permission denied$",
                "exec [^ ]+: exec format error",
            ),
            anchors=("no such file or directory", "permission denied", "exec format error"),
        ),
    ),
    examples=(
        "/var/spool/slurmd/job4242/slurm_script: line 12: ./train.sh: No such file or directory",
        "bash: scripts/pretrain.sh: No such file or directory",
        "env: 'python3.11': No such file or directory",
        "srun: error: execve(): train.py: No such file or directory",
        "slurmstepd: error: execve(): run-agent.sh: Permission denied",
        "/var/spool/slurmd/job42/slurm_script: line 7: ./run_pretrain.sh: Permission denied",
        "exec /opt/conda/bin/python: exec format error",
    ),
)


# The network errnos (errno(3): ECONNREFUSED 111, ECONNRESET 104, ETIMEDOUT 110, EHOSTUNREACH
# 113, ENETUNREACH 101, ECONNABORTED 103) as Python ("[Errno 111]"), Node/libuv ("connect
# ECONNREFUSED") and Go's net package ("dial tcp 10.0.0.1:443: connect: connection refused",
# https://pkg.go.dev/syscall#Errno) print them: a service the job reaches is down or unreachable,
# the store's where the line or its neighbours name one (decide.py). Bare texts ("Connection reset
# by peer") are NCCL's and c10d's too: rules.yaml reads those earlier.
ERRNO_NETWORK = Table(
    id="errno-network",
    source="errno(3) https://man7.org/linux/man-pages/man3/errno.3.html: ECONNREFUSED 111, "
    "ECONNRESET 104, ETIMEDOUT 110, EHOSTUNREACH 113, ENETUNREACH 101, ECONNABORTED 103; Go's "
    "net errors https://pkg.go.dev/net#OpError",
    members=(
        Member(symbol="ECONNREFUSED"),
        Member(symbol="ECONNRESET"),
        Member(symbol="ETIMEDOUT"),
        Member(symbol="EHOSTUNREACH"),
        Member(symbol="ENETUNREACH"),
        Member(symbol="ECONNABORTED"),
        Member(
            patterns=(
                "\\[Errno (101|103|104|110|111|113)\\] ",
                "dial tcp [^ ]+: (connect: )?(connection refused|i/o timeout|no route to host|"
                "network is unreachable)",
            ),
            anchors=("[errno 1", "dial tcp "),
        ),
    ),
    examples=(
        "Error: connect ECONNREFUSED 10.0.0.7:9000",
        "TimeoutError: [Errno 110] Connection timed out",
        'Get "https://minio.internal:9000/ckpt/": dial tcp 10.0.0.7:9000: connect: connection '
        "refused",
    ),
)


# What the kernel says when storage under a node fails: the block layer's I/O errors
# (block/blk-core.c, https://github.com/torvalds/linux/blob/master/block/blk-core.c: "I/O error,
# dev sda, sector N"; fs/buffer.c "Buffer I/O error on dev") and the Lustre client losing or
# being evicted by its servers (Lustre Operations Manual, "Lustre Error Messages",
# https://doc.lustre.org/lustre_manual.xhtml#lustremaint.errormsgs).
KERNEL_STORAGE_ERRORS = Table(
    id="kernel-storage-errors",
    source="the block layer's I/O errors https://github.com/torvalds/linux/blob/master/block/"
    "blk-core.c and fs/buffer.c; the Lustre client's lost connections and evictions, Lustre "
    "Operations Manual https://doc.lustre.org/lustre_manual.xhtml",
    members=(
        Member(
            patterns=(
                "(blk_update_request|print_req_error): (critical )?(I/O|medium|target|space "
                "allocation|nexus) error",
                "I/O error, dev [a-z0-9]+, sector [0-9]+",
                "Buffer I/O error on dev(ice)? ",
                "Lustre: .*Connection to .* was lost",
                "This client was evicted by ",
                "LustreError: .*(evicted|rc = -(5|107|108|110))([^0-9]|$)",
            ),
            anchors=(
                "blk_update_request",
                "print_req_error",
                "i/o error, dev ",
                "buffer i/o error",
                "lustre",
                "was evicted by",
            ),
        ),
    ),
    examples=(
        "[Tue May  7 06:02:11 2024] blk_update_request: I/O error, dev nvme1n1, sector 20480 op "
        "0x1:(WRITE) flags 0x800 phys_seg 1 prio class 0",
        "node-05 kernel: Lustre: scratch-MDT0000-mdc-ffff8a: Connection to scratch-MDT0000 (at "
        "10.1.0.2@o2ib) was lost; in progress operations using this service will wait for "
        "recovery to complete",
        "node-05 kernel: LustreError: 167-0: scratch-OST0004-osc-ffff8a: This client was evicted by"
        " scratch-OST0004; in progress operations using this service will fail.",
    ),
)


# Object stores' command-line clients in their own exception classes: gsutil's
# (https://github.com/GoogleCloudPlatform/gsutil/blob/master/gslib/cloud_api.py: ServiceException
# prints "<Class>: <status> <reason>"; RetryableServiceException and its resumable-transfer
# subclasses are the failures gsutil itself deems transient) and Alibaba OSS's oss2
# (https://github.com/aliyun/aliyun-oss-python-sdk/blob/master/oss2/exceptions.py: RequestError,
# status -2, a request the store never answered; any class with a 5xx or 429 status). A 403 or
# 404 is the job's bucket, name or credentials, not the store: no member.
STORE_CLIENT_STATUSES = Table(
    id="store-client-statuses",
    source="gsutil gslib/cloud_api.py https://github.com/GoogleCloudPlatform/gsutil/blob/master/"
    "gslib/cloud_api.py (ServiceException with a retryable status, RetryableServiceException, "
    "ResumableUploadException, ResumableDownloadException, ResumableUploadStartOverException); "
    "oss2/exceptions.py https://github.com/aliyun/aliyun-oss-python-sdk/blob/master/oss2/"
    "exceptions.py (RequestError, status -2; a 429 or 5xx status)",
    members=(
        Member(
            patterns=(
                "(^|[^A-Za-z])ServiceException: (429|5[0-9][0-9]) ",
                "(RetryableServiceException|ResumableUploadException|ResumableDownloadException|"
                "ResumableUploadStartOverException): ",
            ),
            anchors=(
                "serviceexception: ",
                "resumableuploadexception",
                "resumabledownloadexception",
            ),
        ),
        Member(
            patterns=(
                "oss2\\.exceptions\\.RequestError: ",
                "oss2\\.exceptions\\.[A-Za-z]+: \\{'status': (429|5[0-9][0-9]),",
            ),
            anchors=("oss2.exceptions.",),
        ),
    ),
    examples=(
        "ServiceException: 503 None",
        "ResumableUploadException: 503 Server Error",
        "oss2.exceptions.RequestError: {'status': -2, 'x-oss-request-id': '', 'details': "
        "\"RequestError: ('Connection aborted.', RemoteDisconnected('Remote end closed connection "
        "without response'))\"}",
    ),
)
