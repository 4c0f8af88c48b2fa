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

The tables are kept by domain in the sibling modules families_os (errnos, kernel storage),
families_gpu (CUDA, ibverbs, UCX), families_schedulers (schedulers, launchers, memory kills) and
families_services (storage clients, HTTP, gRPC, Hugging Face); their shape is family_table's.
This module is the one registry rules.yaml's `table:` names resolve through.
"""

from __future__ import annotations

from webapp.failures.diagnosis.families_gpu import (
    CUDA_FAULT,
    CUDA_NO_DEVICE,
    CUDA_NO_KERNEL_IMAGE,
    CUDA_OOM,
    IBV_ASYNC_EVENTS,
    IBV_WC_OTHER,
    IBV_WC_RETRY,
)
from webapp.failures.diagnosis.families_os import (
    ENOENT_COMMAND,
    ERRNO_FILESYSTEM,
    ERRNO_NETWORK,
    KERNEL_STORAGE_ERRORS,
    STORE_CLIENT_STATUSES,
)
from webapp.failures.diagnosis.families_python import PYTHON_EXCEPTION_NAMES
from webapp.failures.diagnosis.families_schedulers import (
    MEMORY_KILLERS,
    PREEMPTION_NOTICES,
    SCHEDULER_MEMORY_KILLS,
    SCHEDULER_TIME_LIMITS,
    SLURM_REQUEST_ERRORS,
)
from webapp.failures.diagnosis.families_services import (
    CLI_ARGUMENT_ERRORS,
    CONFIG_OVERRIDE_ERRORS,
    DATA_READER_ERRORS,
    DATASETS_ERRORS,
    ENGINE_GPU_MEMORY,
    FRAMEWORK_GPU_OOM,
    GRPC_RETRYABLE,
    HTTP_RETRYABLE,
    HUB_MODEL_ERRORS,
    JVM_NETWORK_ERRORS,
    MODEL_CONFIG_ERRORS,
    PYTHON_CONNECTION_ERRORS,
    S3_RETRYABLE,
    SCRIPT_START_ERRORS,
    STORAGE_ENDPOINTS,
    TOKENIZER_FILE_ERRORS,
    TORCH_LOAD_ERRORS,
    WEBDATASET_ERRORS,
)
from webapp.failures.diagnosis.families_training import TRAINER_NONFINITE_GUARDS
from webapp.failures.diagnosis.family_table import Table

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
        STORE_CLIENT_STATUSES,
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
        TRAINER_NONFINITE_GUARDS,
        PYTHON_EXCEPTION_NAMES,
        ENGINE_GPU_MEMORY,
        TORCH_LOAD_ERRORS,
        WEBDATASET_ERRORS,
        CONFIG_OVERRIDE_ERRORS,
        FRAMEWORK_GPU_OOM,
        CLI_ARGUMENT_ERRORS,
        SCRIPT_START_ERRORS,
        MODEL_CONFIG_ERRORS,
        DATA_READER_ERRORS,
        TOKENIZER_FILE_ERRORS,
    )
}
