"""GPU and interconnect catalogs: CUDA's error enums, ibverbs' work-completion statuses and async
events, UCX's endpoint errors, as NCCL and the frameworks print them (the registry and the
tables' conventions: families.py).
"""

from __future__ import annotations

from webapp.failures.diagnosis.family_table import Member, Table

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
    "'Endpoint timeout', UCS_ERR_UNREACHABLE 'Destination is unreachable'); the UD "
    "transport's fatal on a lost endpoint (https://github.com/openucx/ucx/blob/master/src/uct/"
    "ib/ud/base/ud_iface.c 'transport error: %s', ud_ep.c 'unhandled timeout error'); "
    "aws-ofi-nccl's failed completion https://github.com/aws/aws-ofi-nccl ('Request %p completed "
    "with error. RC: %d. Error: %d (%s)')",
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
        # The UD transport with no error handler to hand a lost endpoint to gives up the process:
        # ucs_fatal("transport error: %s", ucs_status_string(status)) in ud_iface.c, whatever the
        # status, printed "Fatal: ..." or "UCX Fatal: ..." by release; and ud_ep.c's fatal
        # "UD endpoint %p to %s: unhandled timeout error" for a peer that stopped answering.
        Member(
            patterns=("Fatal: transport error: ", "Fatal: UD endpoint .*: unhandled timeout error"),
            anchors=("fatal: transport error: ", "unhandled timeout error"),
        ),
        # aws-ofi-nccl, NCCL's plugin over libfabric (EFA): a completion the provider failed,
        # NCCL_OFI_WARN("Request %p completed with error. RC: %d. Error: %d (%s). ...")
        # (https://github.com/aws/aws-ofi-nccl, src/nccl_ofi_rdma.c, nccl_ofi_sendrecv.c)
        Member(
            patterns=("NET/OFI .*[Rr]equest .*completed with error\\. RC: ",),
            anchors=("completed with error. rc: ",),
        ),
    ),
    examples=(
        "NCCL WARN NET/IB : Got completion with error 4, opcode 1, len 0, vendor err 81 "
        "(local protection error)",
        "[gpu-7:4431:0:4431] ib_mlx5_log.c:143 UCX ERROR Error on QP 0x2b1: remote access error",
        "[1650000000.1] [gpu-2:100:0] ucp_ep.c:1461 UCX ERROR ep 0x7f: error 'Endpoint timeout' "
        "on rc_mlx5/mlx5_0:1 will not be handled since no error callback is installed",
        "[compute-0-20:9358 :0:9358]    ud_iface.c:737  UCX Fatal: transport error: Endpoint "
        "timeout",
        "[x1000c5s2b1n0:83417:0:83417]       ud_ep.c:263  Fatal: UD endpoint 0x20c1da0 to "
        "<no debug data>: unhandled timeout error",
        "ip-10-1-2-3:1234:5678 [0] nccl_net_ofi_rdma.c:1512 NCCL WARN NET/OFI Request 0x7f1c "
        "completed with error. RC: 21. Error: 4 (Unreachable remote). Completed length: 0",
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
        # A C++ exception's what() from a CUDA allocator that ends in cudaGetErrorString's "out of
        # memory" for cudaErrorMemoryAllocation: MXNet's "cudaMalloc failed: out of memory"
        # (TuSimple/mx-maskrcnn#98), mallocMC's "SimpleCudaMalloc_impl.hpp(42): error: out of
        # memory" (ComputationalRadiationPhysics/picongpu#3064); a what() wrapped onto a second
        # line is read joined to it (scan.py).
        Member(patterns=("what\\(\\): .*cuda.*out of memory",), anchors=("out of memory",)),
        # Caffe's CUDA_CHECK, a glog CHECK on the cudaError_t: "Check failed: error == cudaSuccess
        # (2 vs. 0)  out of memory" (2 is cudaErrorMemoryAllocation).
        Member(patterns=("== cudaSuccess \\(2 vs\\. 0\\)",), anchors=("cudasuccess (2 vs. 0)",)),
        # NCCL's CUDA checks print the error's string, since 2.19 after its number:
        # WARN("Cuda failure %d '%s'", err, errStr) (https://github.com/NVIDIA/nccl/blob/master/
        # src/include/checks.h), "Cuda failure 2 'out of memory'" for CUDA_ERROR_OUT_OF_MEMORY.
        Member(patterns=("Cuda failure [0-9]+ 'out of memory'",), anchors=("out of memory",)),
    ),
    examples=(
        "RuntimeError: CUDA error: out of memory",
        "nid006681:250597:251990 [0] include/alloc.h:114 NCCL WARN Cuda failure 2 'out of memory'",
        "RuntimeError: cuda runtime error (2) : out of memory at /pytorch/aten/src/THC/"
        "generic/THCStorage.cu:58",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying "
        "to allocate 4294967296 bytes.",
        "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating "
        "tensor with shape[4096,50257] and type float on /job:localhost/replica:0/task:0/"
        "device:GPU:0 by allocator GPU_0_bfc",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB",
        "  what():  [10:44:35] src/storage/./pooled_storage_manager.h:107: cudaMalloc failed: out of "
        "memory",
        "F0101 00:00:00.000000  1234 syncedmem.cpp:56] Check failed: error == cudaSuccess (2 vs. 0)  "
        "out of memory",
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
