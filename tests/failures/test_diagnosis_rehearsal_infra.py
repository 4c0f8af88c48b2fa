"""Kills, native crashes, storage and interconnect in the wordings a fresh mini-batch brought: a
managed training platform's verdict on a replica, UCX's fatal transport errors, NCCL's numbered
CUDA failure. Each is read by its family's general form (the library's or platform's own format
string), in either order with what follows from it. Plain functions over text.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text

# UCX's UD transport with no error handler installed: ucs_fatal("transport error: %s",
# ucs_status_string(status)) in ud_iface.c, with and without the "UCX" level prefix of newer
# releases, and ud_ep.c's timeout of an endpoint (openucx/ucx#6253, #2501, #6522).
UCX_FATALS = [
    "[compute-0-20:9358 :0:9358]    ud_iface.c:737  UCX Fatal: transport error: Endpoint timeout",
    "[clx-orion-095:15382:0:15382]    ud_iface.c:781  Fatal: transport error: Endpoint timeout",
    "[gpu-3:83417:0:83417]       ud_ep.c:263  Fatal: UD endpoint 0x20c1da0 to <no debug data>: "
    "unhandled timeout error",
    "[gpu-3:83417:0:83417]    ud_iface.c:737  UCX Fatal: transport error: Destination is "
    "unreachable",
]


@pytest.mark.parametrize("line", UCX_FATALS)
def test_ucx_fatal_transport_errors_are_the_fabric(line: str) -> None:
    got = diagnose_text(line + "\n==== backtrace ====\n    0  /usr/lib64/libucs.so.0(+0x1)\n")
    assert got.cause == "ib_link"


def test_a_ucx_fatal_abstains_beside_a_cause_of_its_own() -> None:
    # The fatal is a symptom: a CUDA fault the rank printed first decides.
    log = "RuntimeError: CUDA error: an illegal memory access was encountered\n" + UCX_FATALS[0]
    assert diagnose_text(log).cause == "cuda_fault"


# Vertex AI / AI Platform Training's verdict on a replica (the "common errors" of
# https://cloud.google.com/vertex-ai/docs/training/understanding-training-service):
# its own OOM reading, and the bare exit status or signal it reports otherwise.
@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "The replica master 0 ran out-of-memory and exited with a non-zero status of "
            "9(SIGKILL)",
            "host_oom",
        ),
        (
            'message: "The replica workerpool0-0 ran out-of-memory and exited with a non-zero '
            'status of 247."',
            "host_oom",
        ),
        ("The replica workerpool1-0 exited with a non-zero status of 137.", "host_oom"),
        ("The replica worker 2 exited with a non-zero status of 11(SIGSEGV)", "native_crash"),
        ("The replica workerpool0-0 exited with a non-zero status of 139.", "native_crash"),
    ],
)
def test_a_training_platforms_replica_verdict(line: str, cause: str) -> None:
    assert diagnose_text(line + "\n").cause == cause


def test_a_replica_exit_status_is_no_signal() -> None:
    # 1 is the program's own exit status, not SIGHUP: its own traceback decides, alone unknown.
    line = (
        "The replica workerpool0-0 exited with a non-zero status of 1. Termination reason: Error."
    )
    assert diagnose_text(line + "\n").cause == "unknown"


def test_the_replicas_own_oom_outranks_its_sigkill_verdict() -> None:
    log = (
        "The replica workerpool0-0 exited with a non-zero status of 9(SIGKILL)\n"
        "The replica workerpool0-0 ran out-of-memory and exited with a non-zero status of "
        "9(SIGKILL)\n"
    )
    got = diagnose_text(log)
    assert got.cause == "host_oom"
    assert got.rule_id == "scheduler-memory-limit"


# NCCL's CUCHECK since 2.19 prints the CUresult's number: WARN("Cuda failure %d '%s'", err,
# errStr) (src/include/checks.h); 2 is CUDA_ERROR_OUT_OF_MEMORY.
NCCL_OOM = (
    "nid006681:250597:251990 [0] include/alloc.h:114 NCCL WARN Cuda failure 2 'out of memory'"
)
NCCL_SEGV = (
    "[nid006681:250597:0:250597] Caught signal 11 (Segmentation fault: address not mapped to "
    "object at address (nil))\n"
    "==== backtrace (tid: 250597) ====\n"
    " 0 0x000000000004f468 pncclRedOpDestroy()  ???:0\n"
)


def test_ncclss_numbered_cuda_failure_is_read_by_its_string() -> None:
    assert diagnose_text(NCCL_OOM + "\n").cause == "gpu_oom"


@pytest.mark.parametrize("order", ["oom-first", "crash-first"])
def test_a_segfault_after_ncclss_cuda_oom_is_its_consequence(order: str) -> None:
    # cosmos-predict1#78: the allocation fails inside NCCL, the crash follows in the same rank.
    log = NCCL_OOM + "\n" + NCCL_SEGV if order == "oom-first" else NCCL_SEGV + NCCL_OOM + "\n"
    assert diagnose_text(log).cause == "gpu_oom"


# SageMaker's training toolkit reports the user's script ending non-zero as
# ExecuteUserScriptError ('%s:\nExitCode %s\nErrorMessage "%s"\nCommand "%s"',
# sagemaker_training/errors.py), the service as "AlgorithmError: <that>", the SDK as
# UnexpectedStatusException: reports naming no cause; the exit code and the script's own last
# words (ErrorMessage) decide.
def _sagemaker(code: str, message: str = "", sdk: bool = False) -> str:
    head = (
        "UnexpectedStatusException: Error for Training job hf-2024: Failed. Reason: " if sdk else ""
    )
    return (
        f"{head}AlgorithmError: ExecuteUserScriptError:\nExitCode {code}\n"
        f'ErrorMessage "{message}"\nCommand "/opt/conda/bin/python3.10 train.py --epochs 3"\n'
    )


@pytest.mark.parametrize(
    ("log", "cause"),
    [
        (_sagemaker("137"), "host_oom"),
        (_sagemaker("139", sdk=True), "native_crash"),
        (_sagemaker("-9"), "host_oom"),
        (
            _sagemaker(
                "1", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
            ),
            "gpu_oom",
        ),
        (_sagemaker("1"), "unknown"),
        (_sagemaker("1", sdk=True), "unknown"),
    ],
)
def test_sagemakers_report_of_a_script_names_no_cause_of_its_own(log: str, cause: str) -> None:
    assert diagnose_text(log).cause == cause


def test_sagemakers_exit_code_is_a_status_not_a_signal() -> None:
    # ExitCode 6 is the script's sys.exit(6), not SIGABRT.
    assert diagnose_text(_sagemaker("6")).cause == "unknown"


# The kubelet's own words for a pod it ends (https://github.com/kubernetes/kubernetes, pkg/kubelet/
# eviction: a pod or container over its ephemeral-storage limit or an emptyDir over its
# sizeLimit, the node's disk as the job filled it; pkg/kubelet/nodeshutdown: the node going down
# under it, a spot or maintenance shutdown).
@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "Message:  Pod ephemeral local storage usage exceeds the total limit of containers "
            "512Mi.",
            "filesystem",
        ),
        (
            "Warning  Evicted  pod/trainer-0  Container trainer exceeded its local ephemeral "
            'storage limit "10Gi".',
            "filesystem",
        ),
        ('Usage of EmptyDir volume "scratch" exceeds the limit "8Gi".', "filesystem"),
        ("Message:  Pod was terminated in response to imminent node shutdown.", "preempted"),
        # the eviction or refusal of a pod for its node's condition (nodeConditionMessageFmt)
        ("Warning  Evicted  pod/trainer-0  The node had condition: [MemoryPressure].", "host_oom"),
        ("Warning  Evicted  pod/trainer-0  The node had condition: [DiskPressure].", "filesystem"),
    ],
)
def test_the_kubelets_reason_for_ending_a_pod(line: str, cause: str) -> None:
    assert diagnose_text(line + "\n").cause == cause


# aws-ofi-nccl, NCCL's network plugin over libfabric (EFA): a completion the provider failed,
# NCCL_OFI_WARN("Request %p completed with error. RC: %d. Error: %d (%s). ...") in
# src/nccl_ofi_rdma.c and nccl_ofi_sendrecv.c: the fabric's completion error, as NET/IB's.
OFI_ERROR = (
    "ip-10-1-2-3:1234:5678 [0] nccl_net_ofi_rdma.c:1512 NCCL WARN NET/OFI Request 0x7f1c "
    "completed with error. RC: 21. Error: 4 (Unreachable remote). Completed length: 0, "
    "Request: {op: SEND}"
)


def test_the_ofi_plugins_completion_error_is_the_fabric() -> None:
    assert diagnose_text(OFI_ERROR + "\n").cause == "ib_link"


def test_the_ofi_plugins_completion_error_abstains_beside_a_cause() -> None:
    log = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" + OFI_ERROR
    assert diagnose_text(log + "\n").cause == "gpu_oom"


# Object-store command-line clients in their own words: gsutil's exception classes
# (gslib/cloud_api.py: ServiceException printed "Name: <status> <reason>", the
# RetryableServiceException family retryable by definition) and Alibaba OSS's oss2
# (oss2/exceptions.py: RequestError, status -2, the request never answered; a 5xx status).
@pytest.mark.parametrize(
    ("line", "cause"),
    [
        ("ServiceException: 503 None", "object_storage"),
        (
            "ServiceException: 429 The rate of change requests to the object is too high.",
            "object_storage",
        ),
        ("ResumableUploadException: 503 Server Error", "object_storage"),
        ("RetryableServiceException: Connection reset by peer", "object_storage"),
        (
            "oss2.exceptions.RequestError: {'status': -2, 'x-oss-request-id': '', 'details': "
            "\"RequestError: ('Connection aborted.', RemoteDisconnected('Remote end closed "
            "connection without response'))\"}",
            "object_storage",
        ),
        (
            "oss2.exceptions.ServerError: {'status': 503, 'x-oss-request-id': '6F1A', 'details': "
            "{'Code': 'ServiceUnavailable'}}",
            "object_storage",
        ),
        # The job's own bucket, name or credentials are not the store being down.
        (
            "AccessDeniedException: 403 Caller does not have storage.objects.create access",
            "unknown",
        ),
        ("ServiceException: 404 Not Found", "unknown"),
        (
            "oss2.exceptions.NoSuchKey: {'status': 404, 'x-oss-request-id': '6F1A', 'details': "
            "{'Code': 'NoSuchKey'}}",
            "unknown",
        ),
    ],
)
def test_object_store_clients_own_errors(line: str, cause: str) -> None:
    got = diagnose_text(line + "\n").cause
    assert got == cause or (cause == "unknown" and got != "object_storage")
