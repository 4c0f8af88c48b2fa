"""Closed families of error reports, taken from the catalogs of the platforms that print them.

A phrase list learns the lines it was shown; these tables hold what each platform can say, so
a log no one here has seen still reads as an engineer reads it. Each table is one catalog (the
errno table, ibverbs' work-completion statuses, CUDA's error enums, S3's retryable error codes,
...), with its public source beside it, and the cause the taxonomy gives its members. A rule of
rules.yaml names a table (`table: <id>`): the table's patterns join the rule's, its anchors join
the prefilter's and its examples are checked as the rule's own (tests/failures/test_rules.py),
so the order, tier, blame and confidence stay the rule's, decided in one place.

A member is written once, as its catalog spells it: its symbol (E-name, enum name) is matched as
a whole word, its text (strerror, ibv_wc_status_str, cudaGetErrorString) as written, and a
member whose text is too common to mean anything alone carries its context as a pattern.
Patterns are in the subset of regex syntax both Python and `grep -E` read (rules.yaml).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Member:
    symbol: str = ""  # E-name or enum name, matched as a whole word ("" if none)
    text: str = ""  # the catalog's text for it, matched as written ("" if none)
    # Patterns to use instead of the text where the text alone is too common (context needed).
    patterns: tuple[str, ...] = ()
    # Literals (lowercased) every line of `patterns` contains: the prefilter's anchors.
    anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Table:
    id: str
    source: str  # the catalog: a public URL, and what of it is encoded
    members: tuple[Member, ...]
    examples: tuple[str, ...] = field(default=())

    def patterns(self) -> list[str]:
        out: list[str] = []
        for m in self.members:
            if m.symbol:
                out.append(f"(^|[^A-Za-z0-9_]){re.escape(m.symbol)}([^A-Za-z0-9_]|$)")
            if m.text:
                out.append(_escape(m.text))
            out.extend(m.patterns)
        return out

    def anchors(self) -> list[str]:
        out: list[str] = []
        for m in self.members:
            out.extend(a.lower() for a in (m.symbol, m.text) if a)
            out.extend(m.anchors)
        return out


def _escape(text: str) -> str:
    """`text` as a pattern both Python's re and grep -E read literally."""
    return re.sub(r"([][.^$*+?(){}|\\/])", r"\\\1", text)


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
        Member(
            patterns=("low on resource: ephemeral-storage",),
            anchors=("low on resource: ephemeral-storage",),
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

# ibv_wc_status_str(3) (https://man7.org/linux/man-pages/man3/ibv_wc_status_str.3.html, the
# strings of libibverbs' enum ibv_wc_status): the work completion statuses. 12 and 13 are the
# fabric's: the peer's HCA never acknowledged (a link, switch or the peer node gone). The others
# are as often a program's own bug (a memory region not registered, a QP torn down), so they
# are the weaker rule ibv-wc-error.
IBV_WC_RETRY = Table(
    id="ibv-wc-retry",
    source="ibv_wc_status_str(3) https://man7.org/linux/man-pages/man3/ibv_wc_status_str.3.html: "
    "IBV_WC_RETRY_EXC_ERR (12) 'transport retry counter exceeded', IBV_WC_RNR_RETRY_EXC_ERR "
    "(13) 'RNR retry counter exceeded'; UCX's mlx5 syndromes print 'count' for 'counter'",
    members=(
        Member(symbol="IBV_WC_RETRY_EXC_ERR", text="transport retry counter exceeded"),
        Member(symbol="IBV_WC_RNR_RETRY_EXC_ERR", text="RNR retry counter exceeded"),
        Member(text="RNR retry count exceeded"),
        Member(
            # NCCL's completion error, as rules.yaml nccl-ib-completion-error reads 12 (its
            # lines carry "NCCL WARN"; NCCL's channel lines "via NET/IB/1" are not errors)
            patterns=("NET/IBP? ?: .*(status|error) ?=? ?13([^0-9]|$)",),
            anchors=("nccl warn",),
        ),
    ),
    examples=(
        'rdma_poll_completions get FAILURE: status "RNR retry counter exceeded" (13) for wr_id 0',
        "work completion error: IBV_WC_RETRY_EXC_ERR on qp 0x1a2",
        "[1516700569.600192] [gpu-3:31714:0] ib_mlx5_log.c:174 UCX ERROR Error on QP 0x61f5 "
        "wqe[0]: RNR retry count exceeded (synd 0x15 vend 0x81) opcode SEND",
    ),
)

IBV_WC_OTHER = Table(
    id="ibv-wc-other",
    source="ibv_wc_status_str(3) https://man7.org/linux/man-pages/man3/ibv_wc_status_str.3.html: "
    "the other error statuses (local length, local QP operation, local protection, WR flushed, "
    "bad response, local access, remote invalid request, remote access, remote operation, "
    "response timeout); UCX's status strings for an endpoint it lost "
    "(https://github.com/openucx/ucx/blob/master/src/ucs/type/status.c: UCS_ERR_ENDPOINT_TIMEOUT "
    "'Endpoint timeout', UCS_ERR_UNREACHABLE 'Destination is unreachable')",
    members=(
        Member(symbol="IBV_WC_LOC_LEN_ERR", text="local length error"),
        Member(symbol="IBV_WC_LOC_QP_OP_ERR", text="local QP operation error"),
        Member(symbol="IBV_WC_LOC_PROT_ERR", text="local protection error"),
        Member(symbol="IBV_WC_WR_FLUSH_ERR", text="Work Request Flushed Error"),
        Member(symbol="IBV_WC_BAD_RESP_ERR"),
        Member(symbol="IBV_WC_LOC_ACCESS_ERR"),
        Member(symbol="IBV_WC_REM_INV_REQ_ERR", text="remote invalid request error"),
        Member(symbol="IBV_WC_REM_ACCESS_ERR", text="remote access error"),
        Member(symbol="IBV_WC_REM_OP_ERR", text="remote operation error"),
        Member(symbol="IBV_WC_RESP_TIMEOUT_ERR", text="response timeout error"),
        Member(symbol="UCS_ERR_ENDPOINT_TIMEOUT"),
        Member(symbol="UCS_ERR_UNREACHABLE"),
        Member(
            patterns=("UCX +(ERROR|WARN).*(Endpoint timeout|Destination is unreachable)",),
            anchors=("endpoint timeout", "destination is unreachable"),
        ),
    ),
    examples=(
        "NCCL WARN NET/IB : Got completion with error 4, opcode 1, len 0, vendor err 81 "
        "(local protection error)",
        "[gpu-7:4431:0:4431] ib_mlx5_log.c:143 UCX ERROR Error on QP 0x2b1: remote access error",
        "[1650000000.1] [gpu-2:100:0] ucp_ep.c:1461 UCX ERROR ep 0x7f: error 'Endpoint timeout' "
        "on rc_mlx5/mlx5_0:1 will not be handled since no error callback is installed",
    ),
)

# CUDA's error enums and their strings (cudaGetErrorString / cuGetErrorString): the runtime
# API's cudaError_t (https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html)
# and the driver API's CUresult (https://docs.nvidia.com/cuda/cuda-driver-api/
# group__CUDA__TYPES.html), by the cause docs/failure-taxonomy.md gives them.
CUDA_OOM = Table(
    id="cuda-oom",
    source="cudaErrorMemoryAllocation (2, 'out of memory') / CUDA_ERROR_OUT_OF_MEMORY "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html; HIP's "
    "hipErrorOutOfMemory; the frameworks' allocators over them: TensorFlow's and XLA's "
    "RESOURCE_EXHAUSTED (https://www.tensorflow.org/api_docs/python/tf/errors/"
    "ResourceExhaustedError), cuDNN's CUDNN_STATUS_ALLOC_FAILED",
    members=(
        Member(symbol="cudaErrorMemoryAllocation"),
        Member(symbol="CUDA_ERROR_OUT_OF_MEMORY"),
        Member(symbol="hipErrorOutOfMemory"),
        Member(symbol="CUDNN_STATUS_ALLOC_FAILED"),
        Member(text="HIP out of memory"),
        Member(
            patterns=(
                "CUDA error: out of memory",
                "cuda runtime error \\(2\\) ?: out of memory",
                "RESOURCE_EXHAUSTED: (OOM|Out of memory)",
                "ResourceExhaustedError: .*OOM when allocating",
                "OOM when allocating tensor",
            ),
            anchors=("cuda error: out of memory", "out of memory", "oom when allocating"),
        ),
    ),
    examples=(
        "RuntimeError: CUDA error: out of memory",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/"
        "generic/THCStorage.cu:58",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 4294967296 bytes.",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[4096,50257] and type float on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB",
    ),
)

CUDA_FAULT = Table(
    id="cuda-fault",
    source="cudaError_t https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html "
    "and CUresult https://docs.nvidia.com/cuda/cuda-driver-api/group__CUDA__TYPES.html: the "
    "errors of a kernel that faulted (700 illegal address, 714 hardware stack error, 715 illegal "
    "instruction, 716 misaligned address, 717 invalid address space, 718 invalid PC, 719 launch "
    "failure, 702 launch timeout), after which the context is unusable; cuDNN's "
    "CUDNN_STATUS_EXECUTION_FAILED and CUDNN_STATUS_MAPPING_ERROR",
    members=(
        Member(symbol="CUDA_ERROR_ILLEGAL_ADDRESS"),
        Member(symbol="CUDA_ERROR_LAUNCH_FAILED"),
        Member(symbol="cudaErrorIllegalInstruction"),
        Member(symbol="CUDA_ERROR_ILLEGAL_INSTRUCTION"),
        Member(symbol="cudaErrorMisalignedAddress"),
        Member(symbol="CUDA_ERROR_MISALIGNED_ADDRESS"),
        Member(
            symbol="cudaErrorInvalidAddressSpace",
            text="operation not supported on global/shared address space",
        ),
        Member(symbol="CUDA_ERROR_INVALID_ADDRESS_SPACE"),
        Member(symbol="cudaErrorInvalidPc", text="invalid program counter"),
        Member(symbol="CUDA_ERROR_INVALID_PC"),
        Member(symbol="cudaErrorHardwareStackError", text="hardware stack error"),
        Member(symbol="CUDA_ERROR_HARDWARE_STACK_ERROR"),
        Member(symbol="cudaErrorLaunchTimeout", text="the launch timed out and was terminated"),
        Member(symbol="CUDA_ERROR_LAUNCH_TIMEOUT"),
        Member(symbol="CUDNN_STATUS_EXECUTION_FAILED"),
        Member(symbol="CUDNN_STATUS_MAPPING_ERROR"),
    ),
    examples=(
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA error: CUDA_ERROR_ILLEGAL_ADDRESS",
        "RuntimeError: CUDA error: the launch timed out and was terminated",
        "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
        "RuntimeError: CUDA error: hardware stack error",
    ),
)

CUDA_NO_DEVICE = Table(
    id="cuda-no-device",
    source="cudaErrorNoDevice (100, 'no CUDA-capable device is detected') / "
    "CUDA_ERROR_NO_DEVICE and cudaErrorDevicesUnavailable (46) "
    "https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html: the node shows "
    "the job no usable GPU",
    members=(
        Member(symbol="cudaErrorNoDevice", text="no CUDA-capable device is detected"),
        Member(symbol="CUDA_ERROR_NO_DEVICE"),
        Member(symbol="cudaErrorDevicesUnavailable"),
    ),
    examples=("RuntimeError: CUDA error: no CUDA-capable device is detected",),
)

CUDA_NO_KERNEL_IMAGE = Table(
    id="cuda-no-kernel-image",
    source="cudaErrorNoKernelImageForDevice (209, 'no kernel image is available for execution "
    "on the device') / CUDA_ERROR_NO_BINARY_FOR_GPU, cudaErrorUnsupportedPtxVersion (222), "
    "cudaErrorCompatNotSupportedOnDevice (804), cudaErrorInvalidDevice (101, 'invalid device "
    "ordinal') https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html: the "
    "job's build lacks the GPU's architecture or toolchain, or it asks for a GPU index the "
    "node does not have (its environment or its configuration)",
    members=(
        Member(
            symbol="cudaErrorNoKernelImageForDevice",
            text="no kernel image is available for execution on the device",
        ),
        Member(symbol="CUDA_ERROR_NO_BINARY_FOR_GPU"),
        Member(
            symbol="cudaErrorUnsupportedPtxVersion",
            text="the provided PTX was compiled with an unsupported toolchain",
        ),
        Member(symbol="CUDA_ERROR_UNSUPPORTED_PTX_VERSION"),
        Member(
            symbol="cudaErrorCompatNotSupportedOnDevice",
            text="forward compatibility was attempted on non supported HW",
        ),
        Member(symbol="cudaErrorInvalidDevice"),
        Member(
            patterns=("CUDA error: invalid device ordinal",), anchors=("invalid device ordinal",)
        ),
    ),
    examples=(
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        "RuntimeError: CUDA error: invalid device ordinal",
        "RuntimeError: CUDA error: the provided PTX was compiled with an unsupported toolchain.",
    ),
)

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
    ),
)

# Storage clients' retryable errors: S3's error codes that mean the service, not the request
# (https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html#ErrorCodeList: SlowDown,
# ServiceUnavailable, InternalError, RequestTimeout) and the throttling and transient codes
# boto3 retries (https://boto3.amazonaws.com/v1/documentation/api/latest/guide/retries.html),
# as botocore ("An error occurred (X) when calling the Y operation"), the Java SDK ("Error
# Code: X") and minio ("S3 operation failed; code: X") print them.
S3_RETRYABLE = Table(
    id="s3-retryable",
    source="S3 error codes https://docs.aws.amazon.com/AmazonS3/latest/API/ErrorResponses.html "
    "and boto3's retried codes https://boto3.amazonaws.com/v1/documentation/api/latest/guide/"
    "retries.html (RequestTimeout, Throttling, ThrottlingException, RequestLimitExceeded, "
    "BandwidthLimitExceeded, SlowDown, InternalError, ServiceUnavailable, HTTP 500/502/503/504)",
    members=(
        Member(
            patterns=(
                "\\((RequestTimeout|RequestTimeoutException|PriorRequestNotComplete|Throttling|"
                "ThrottlingException|ThrottledException|RequestThrottledException|"
                "TooManyRequestsException|RequestLimitExceeded|BandwidthLimitExceeded|"
                "RequestThrottled|InternalError|ServiceUnavailable|500|502|504)\\) when calling "
                "the [A-Za-z]+ operation",
                # ("Error Code: SlowDown" is rules.yaml object-store-endpoint's, S3's 503)
                "Error Code: (ServiceUnavailable|InternalError|RequestTimeout)",
                "S3 operation failed; code: (SlowDown|ServiceUnavailable|InternalError|"
                "RequestTimeout|XMinio[A-Za-z]+)",
            ),
            anchors=("when calling the ", "error code: ", "s3 operation failed"),
        ),
    ),
    examples=(
        "botocore.exceptions.ClientError: An error occurred (RequestTimeout) when calling the "
        "UploadPart operation: Your socket connection to the server was not read from or "
        "written to within the timeout period.",
        "minio.error.S3Error: S3 operation failed; code: XMinioServerNotInitialized, message: "
        "Server not initialized, please try again.",
        "com.amazonaws.services.s3.model.AmazonS3Exception: We encountered an internal error. "
        "(Service: Amazon S3; Status Code: 500; Error Code: InternalError; Request ID: 7B1)",
    ),
)

# HTTP's retryable statuses (RFC 9110 section 15.6, https://www.rfc-editor.org/rfc/rfc9110#
# section-15.6, and 429 of RFC 6585) as the clients name them: urllib's "HTTP Error 503",
# requests' "503 Server Error", google-api-core's exception classes
# (https://googleapis.dev/python/google-api-core/latest/exceptions.html: TooManyRequests,
# InternalServerError, BadGateway, ServiceUnavailable, GatewayTimeout), azure-core's
# HttpResponseError with the storage services' busy codes
# (https://learn.microsoft.com/en-us/rest/api/storageservices/common-rest-api-error-codes).
# The service is auxiliary unless it is a store: decide.py makes it object_storage where the
# line or the lines next to it name a storage endpoint or client.
HTTP_RETRYABLE = Table(
    id="http-retryable",
    source="RFC 9110 15.6 https://www.rfc-editor.org/rfc/rfc9110#section-15.6 and RFC 6585 (429), "
    "as urllib, requests, google-api-core "
    "(https://googleapis.dev/python/google-api-core/latest/exceptions.html) and azure-core "
    "(https://learn.microsoft.com/en-us/rest/api/storageservices/common-rest-api-error-codes: "
    "ServerBusy, OperationTimedOut, InternalError) print them",
    members=(
        Member(
            patterns=(
                "HTTP Error (429|50[0-4])",
                "429 Client Error: ",
                "50[0-4] Server Error: ",
                "429 Too Many Requests",
                "500 Internal Server Error",
                "502 Bad Gateway",
                "503 Service Unavailable",
                "504 Gateway Time-?out",
                "exceptions\\.(ServiceUnavailable|TooManyRequests|InternalServerError|BadGateway|"
                "GatewayTimeout): (429|50[0-4])",
                "(Unexpected|unexpected|bad) (response|status) code:? (429|50[0-4])",
                "HttpResponseError: .*(ServerBusy|OperationTimedOut)",
            ),
            anchors=(
                "http error ",
                " client error: ",
                " server error: ",
                "too many requests",
                "internal server error",
                "bad gateway",
                "service unavailable",
                "gateway time",
                "serviceunavailable",
                "toomanyrequests",
                "internalservererror",
                "badgateway",
                "gatewaytimeout",
                "response code",
                "status code",
                "httpresponseerror",
            ),
        ),
    ),
    examples=(
        "urllib.error.HTTPError: HTTP Error 502: Bad Gateway",
        "requests.exceptions.HTTPError: 503 Server Error: Service Unavailable for url: "
        "https://metrics.internal/api/v1/push",
        "google.api_core.exceptions.TooManyRequests: 429 GET https://example.googleapis.com/v1/x",
    ),
)

# Where a store is named: its endpoint hosts and URL schemes (S3 https://docs.aws.amazon.com/
# general/latest/gr/s3.html, GCS https://cloud.google.com/storage/docs/request-endpoints, Azure
# https://learn.microsoft.com/en-us/azure/storage/common/storage-account-overview#standard-
# endpoints) and the filesystem schemes of fsspec and Hadoop.
STORAGE_ENDPOINTS = Table(
    id="storage-endpoints",
    source="S3 endpoints https://docs.aws.amazon.com/general/latest/gr/s3.html, GCS "
    "https://cloud.google.com/storage/docs/request-endpoints, Azure Storage "
    "https://learn.microsoft.com/en-us/azure/storage/common/storage-account-overview#standard-"
    "endpoints; the URL schemes s3://, s3a://, gs://, az://, abfs(s)://, wasb(s)://",
    members=(
        Member(
            patterns=(
                "[a-z0-9.-]*s3[.-]([a-z0-9-]+\\.)*amazonaws\\.com",
                "storage\\.googleapis\\.com",
                "googleapis\\.com/(upload/)?storage/",
                "[a-z0-9-]+\\.(blob|dfs)\\.core\\.windows\\.net",
                "(^|[^a-z0-9])(s3a?|gs|az|abfss?|wasbs?)://[a-z0-9]",
            ),
            anchors=(
                "amazonaws.com",
                "storage.googleapis.com",
                "googleapis.com/upload/storage",
                "googleapis.com/storage",
                ".core.windows.net",
                "s3://",
                "s3a://",
                "gs://",
                "az://",
                "abfs://",
                "abfss://",
                "wasb://",
                "wasbs://",
            ),
        ),
    ),
    examples=(
        "Uploading checkpoint to s3://ckpt-bucket/run42/iter_0004000/",
        "Connecting to https://storage.googleapis.com/upload/storage/v1/b/my-bucket/o",
    ),
)

# The Hugging Face libraries' exception classes. datasets' (https://huggingface.co/docs/
# datasets/package_reference/main_classes, datasets/exceptions.py and utils/info_utils.py):
# the data failed to build or did not match its card. huggingface_hub's (https://huggingface.co/
# docs/huggingface_hub/package_reference/utilities#huggingface_hub.errors): a repository, file
# or revision missing or gated; a dataset's when its URL is one (rules.yaml dataset-load).
DATASETS_ERRORS = Table(
    id="datasets-errors",
    source="datasets' exception classes https://github.com/huggingface/datasets/blob/main/src/"
    "datasets/exceptions.py and src/datasets/utils/info_utils.py; huggingface_hub's errors "
    "https://huggingface.co/docs/huggingface_hub/package_reference/utilities on a dataset URL",
    members=(
        Member(symbol="DatasetGenerationCastError"),
        Member(symbol="DatasetBuildError"),
        Member(symbol="ManualDownloadError"),
        Member(symbol="DataFilesNotFoundError"),
        Member(symbol="EmptyDatasetError"),
        Member(symbol="SplitsNotFoundError"),
        Member(symbol="NonMatchingSplitsSizesError"),
        Member(symbol="NonMatchingChecksumError"),
        Member(symbol="ExpectedMoreSplits"),
        Member(symbol="ExpectedMoreSplitsError"),
        Member(symbol="UnexpectedSplitsError"),
        Member(symbol="ExpectedMoreDownloadedFiles"),
        Member(symbol="SchemaInferenceError"),
        Member(
            patterns=tuple(
                f"{name}.*(huggingface\\.co/(api/)?datasets/|[Dd]ataset)"
                for name in ("NotFoundError", "GatedRepoError", "HfHubHTTPError")
            ),
            anchors=("notfounderror", "gatedrepoerror", "hfhubhttperror"),
        ),
    ),
    examples=(
        "datasets.utils.info_utils.NonMatchingSplitsSizesError: [{'expected': "
        "SplitInfo(name='train', num_bytes=1), 'recorded': SplitInfo(name='train', num_bytes=0)}]",
        "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for "
        "url https://huggingface.co/datasets/org/private-set/resolve/main/train.jsonl.",
        "ValueError: ExpectedMoreSplits: {'validation'}",
    ),
)

HUB_MODEL_ERRORS = Table(
    id="hub-model-errors",
    source="huggingface_hub's errors https://huggingface.co/docs/huggingface_hub/package_"
    "reference/utilities (RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError, "
    "GatedRepoError, LocalEntryNotFoundError) and transformers' wording of them when a model "
    "is loaded ('is not a local folder and is not a valid model identifier', 'does not appear "
    "to have a file named')",
    members=(
        Member(symbol="RepositoryNotFoundError"),
        Member(symbol="RevisionNotFoundError"),
        Member(symbol="EntryNotFoundError"),
        Member(symbol="GatedRepoError"),
        Member(symbol="LocalEntryNotFoundError"),
        Member(text="is not a local folder and is not a valid model identifier"),
        Member(
            patterns=("does not appear to have a file named [a-z_]*(model|pytorch|config)",),
            anchors=("does not appear to have a file named",),
        ),
    ),
    examples=(
        "OSError: meta-llama/Llama-2-7b-hf is not a local folder and is not a valid model "
        "identifier listed on 'https://huggingface.co/models'",
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found "
        "for url: https://huggingface.co/api/models/org/m/revision/v2.",
        "OSError: /ckpt/run7 does not appear to have a file named pytorch_model.bin, "
        "model.safetensors, tf_model.h5, model.ckpt or flax_model.msgpack.",
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

# ibv_event_type_str(3) (https://man7.org/linux/man-pages/man3/ibv_event_type_str.3.html): the
# asynchronous events of an HCA. A port going down or the adapter failing is the fabric's or the
# node's (NCCL's "NET/IB : Got async event : port error", NVIDIA/nccl#905: a flapping link).
IBV_ASYNC_EVENTS = Table(
    id="ibv-async-events",
    source="ibv_event_type_str(3) https://man7.org/linux/man-pages/man3/ibv_event_type_str.3.html:"
    " IBV_EVENT_PORT_ERR 'port error', IBV_EVENT_DEVICE_FATAL 'local catastrophic error', "
    "IBV_EVENT_QP_FATAL 'local work queue catastrophic error', IBV_EVENT_CQ_ERR 'CQ error'",
    members=(
        Member(symbol="IBV_EVENT_PORT_ERR"),
        Member(symbol="IBV_EVENT_DEVICE_FATAL"),
        Member(symbol="IBV_EVENT_QP_FATAL"),
        Member(
            patterns=(
                "async event ?: ?(port error|local catastrophic error|"
                "local work queue catastrophic error|CQ error)",
            ),
            anchors=("async event",),
        ),
    ),
    examples=(
        "gpu-3:1234:1290 [0] NCCL WARN NET/IB : Got async event : port error",
        "gpu-3:1234:1290 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : local catastrophic "
        "error",
    ),
)

# The schedulers' and orchestrators' own words for a memory-limit kill besides Slurm's
# (rules.yaml scheduler-memory-limit): Kubernetes' kubelet evicting a pod
# (https://kubernetes.io/docs/concepts/scheduling-eviction/node-pressure-eviction/), HTCondor's
# hold reason (https://htcondor.readthedocs.io/en/latest/users-manual/managing-a-job.html),
# Grid Engine's h_vmem limit (https://gridscheduler.sourceforge.net/htmlman/htmlman5/
# queue_conf.html).
SCHEDULER_MEMORY_KILLS = Table(
    id="scheduler-memory-kills",
    source="Kubernetes node-pressure eviction https://kubernetes.io/docs/concepts/scheduling-"
    "eviction/node-pressure-eviction/ ('The node was low on resource: memory'); HTCondor's hold "
    "reason ('Job has gone over memory limit', 'over cgroup memory limit'); Grid Engine's "
    "h_vmem ('exceeds job hard limit \"h_vmem\"')",
    members=(
        Member(
            patterns=(
                "The node was low on resource: memory",
                "Job has gone over (cgroup )?memory limit",
                "exceeds job hard limit .?h_vmem",
            ),
            anchors=("low on resource: memory", "gone over", "h_vmem"),
        ),
    ),
    examples=(
        "Message: The node was low on resource: memory. Container trainer was using 61234520Ki, "
        "which exceeds its request of 0.",
        "Hold reason: Error from slot1_4@gpu-12: Job has gone over cgroup memory limit of 16384 "
        "megabytes.",
        'job 4242.1 exceeds job hard limit "h_vmem" of queue "gpu.q@gpu-07" (34.1G > limit:32G)'
        " - sending SIGKILL",
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
# (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html).
PREEMPTION_NOTICES = Table(
    id="preemption-notices",
    source="GCE preemption https://cloud.google.com/compute/docs/instances/preemptible "
    "('Instance was preempted'); EC2 spot interruption notices "
    "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html",
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
    ),
    examples=(
        "compute.instances.preempted: Instance was preempted.",
        "EC2 Spot Instance Interruption Warning received for i-0abc123",
        "RuntimeError: The TPU VM was preempted; restart the job from its last checkpoint",
    ),
)

# gRPC's status codes (https://grpc.io/docs/guides/status-codes/), which absl::Status, TensorFlow
# (tf.errors: UnavailableError, DeadlineExceededError) and the Google clients share: UNAVAILABLE
# and DEADLINE_EXCEEDED are the service's, retryable (RESOURCE_EXHAUSTED is read by cuda-oom where
# it is an allocator's). The store's where the line or its neighbours name one (decide.py).
GRPC_RETRYABLE = Table(
    id="grpc-retryable",
    source="gRPC status codes https://grpc.io/docs/guides/status-codes/ (UNAVAILABLE 14, "
    "DEADLINE_EXCEEDED 4) as grpc's StatusCode, absl's 'UNAVAILABLE: ' and TensorFlow's "
    "tf.errors https://www.tensorflow.org/api_docs/python/tf/errors (UnavailableError, "
    "DeadlineExceededError, 'Unavailable: ') print them",
    members=(
        Member(symbol="UnavailableError"),
        Member(symbol="DeadlineExceededError"),
        Member(
            patterns=(
                "StatusCode\\.(UNAVAILABLE|DEADLINE_EXCEEDED)",
                "(^|[^A-Za-z_])UNAVAILABLE: ",
                "(^|[^A-Za-z_])DEADLINE_EXCEEDED: ",
                "^Unavailable: ",
            ),
            anchors=("statuscode.", "unavailable: ", "deadline_exceeded: "),
        ),
    ),
    examples=(
        "grpc._channel._MultiThreadedRendezvous: <_MultiThreadedRendezvous of RPC that terminated "
        "with: status = StatusCode.UNAVAILABLE",
        "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed",
        "Unavailable: Error executing an HTTP request: HTTP response code 503",
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

# The JVM's network exceptions (java.net, https://docs.oracle.com/javase/8/docs/api/java/net/
# package-summary.html) and Apache HttpClient's, under which the AWS and GCS SDKs for Java and
# Hadoop's connectors report an endpoint that did not answer: a service's, the store's where the
# line or its neighbours name one (decide.py).
JVM_NETWORK_ERRORS = Table(
    id="jvm-network-errors",
    source="java.net exceptions https://docs.oracle.com/javase/8/docs/api/java/net/package-"
    "summary.html (ConnectException, SocketTimeoutException, UnknownHostException, "
    "NoRouteToHostException); Apache HttpClient's NoHttpResponseException, "
    "ConnectTimeoutException, HttpHostConnectException https://hc.apache.org/httpcomponents-"
    "client-4.5.x/current/httpclient/apidocs/",
    members=(
        Member(
            patterns=(
                "java\\.net\\.(ConnectException|SocketTimeoutException|UnknownHostException|"
                "NoRouteToHostException)",
                "NoHttpResponseException: ",
                "ConnectTimeoutException: ",
                "HttpHostConnectException: ",
            ),
            anchors=(
                "java.net.",
                "nohttpresponseexception",
                "connecttimeoutexception",
                "httphostconnectexception",
            ),
        ),
    ),
    examples=(
        "Caused by: java.net.SocketTimeoutException: Read timed out",
        "org.apache.http.NoHttpResponseException: metrics.internal:443 failed to respond",
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

# Python's built-in ConnectionError (https://docs.python.org/3/library/exceptions.html#
# ConnectionError), raised bare by clients such as datasets and huggingface_hub ("ConnectionError:
# Couldn't reach ... on the Hub"): a service the job reaches; its subclasses are rules.yaml
# aux-connection's own patterns.
PYTHON_CONNECTION_ERRORS = Table(
    id="python-connection-errors",
    source="Python's ConnectionError https://docs.python.org/3/library/exceptions.html#"
    "ConnectionError, raised bare by clients",
    members=(
        Member(
            patterns=("^([A-Za-z_][A-Za-z0-9_]*\\.)*ConnectionError: ",),
            anchors=("connectionerror: ",),
        ),
    ),
    examples=(
        "ConnectionError: Couldn't reach https://huggingface.co/datasets/c4/resolve/main/en/"
        "c4-train.00000-of-01024.json.gz (ReadTimeout)",
    ),
)

TABLES: dict[str, Table] = {
    t.id: t
    for t in (
        ERRNO_FILESYSTEM,
        ENOENT_COMMAND,
        IBV_WC_RETRY,
        IBV_WC_OTHER,
        CUDA_OOM,
        CUDA_FAULT,
        CUDA_NO_DEVICE,
        CUDA_NO_KERNEL_IMAGE,
        MEMORY_KILLERS,
        S3_RETRYABLE,
        HTTP_RETRYABLE,
        STORAGE_ENDPOINTS,
        DATASETS_ERRORS,
        HUB_MODEL_ERRORS,
        ERRNO_NETWORK,
        IBV_ASYNC_EVENTS,
        SCHEDULER_MEMORY_KILLS,
        SCHEDULER_TIME_LIMITS,
        PREEMPTION_NOTICES,
        GRPC_RETRYABLE,
        SLURM_REQUEST_ERRORS,
        JVM_NETWORK_ERRORS,
        KERNEL_STORAGE_ERRORS,
        PYTHON_CONNECTION_ERRORS,
    )
}
