"""Python libraries' exception classes, read by class and module whatever their message says
(the registry and the tables' conventions: families.py).

A library's error is known by its class: `safetensors_rust.SafetensorError` is a model file
that cannot be read whether its message says "HeaderTooLarge" or "InvalidHeaderDeserialization",
`lightning_fabric.utilities.exceptions.MisconfigurationException` is the job's setup whatever
hook it names. Each catalog below is one library's exceptions module, enumerated from its
source (the URL beside it), with the taxonomy cause (docs/failure-taxonomy.md) of each class,
or CONSEQUENCE where the class reports that something else failed (a Ray actor whose process
died, a torchrun child that failed): such a class names no cause of its own, and the diagnosis
reads the log's other events for it (abstaining, unknown, where there are none), never the
framework frame that printed it. A wrapper that names the class it wraps in its own name
(Ray's `RayTaskError(ValueError)`) is read by the wrapped class; torch's re-raise of a worker's
exception ("KeyError: Caught KeyError in DataLoader worker process 0.") is a report too, the
original traceback printed after it deciding.

events.py looks the exception of every python-exception line up here (`exception_cause`) before
the frames decide; the PYTHON_EXCEPTION_NAMES table lets rules.yaml's python-exception rule read
the classes whose names end in neither Error nor Exception.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from webapp.failures.diagnosis.family_table import Member, Table

# The class reports another failure (a process or node that died, a wrapper's child): no cause
# of its own.
CONSEQUENCE = "consequence"


@dataclass(frozen=True)
class ExceptionCatalog:
    id: str
    source: str  # the library's exceptions module: a public URL
    # The modules its classes are printed under ("botocore.exceptions."); a class name that
    # other libraries share (ConnectionError, ReadTimeout, HTTPError) is read only under them.
    modules: tuple[str, ...]
    classes: dict[str, str]  # class name -> taxonomy cause or CONSEQUENCE
    # Class names distinctive enough to read with no module (printed bare by a trainer's
    # logger, or under a private module path that moves between releases).
    bare: frozenset[str] = frozenset()


def _causes(cause: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, cause)


CATALOGS: tuple[ExceptionCatalog, ...] = (
    ExceptionCatalog(
        id="huggingface-hub",
        source="https://github.com/huggingface/huggingface_hub/blob/main/src/huggingface_hub/"
        "errors.py (printed under huggingface_hub.errors, huggingface_hub.utils._errors and "
        "huggingface_hub.utils._http in older releases): a repository, revision or file the "
        "job asks for that is missing, gated, disabled or not cached while offline",
        modules=("huggingface_hub.",),
        classes={
            **_causes(
                "model_loading",
                "RepositoryNotFoundError",
                "RevisionNotFoundError",
                "EntryNotFoundError",
                "RemoteEntryNotFoundError",
                "LocalEntryNotFoundError",
                "GatedRepoError",
                "DisabledRepoError",
                "OfflineModeIsEnabled",
                # "Repo id must be in the form 'repo_name' or 'namespace/repo_name':
                # '/path/to/model'": a local model folder that is not there, taken for a repo
                # id (transformers words it "Incorrect path_or_model_id", hub-model-errors).
                "HFValidationError",
            ),
            # A token the job's environment does not give.
            "LocalTokenNotFoundError": "user_exception",
        },
        bare=frozenset(
            {
                "RepositoryNotFoundError",
                "RevisionNotFoundError",
                "RemoteEntryNotFoundError",
                "LocalEntryNotFoundError",
                "GatedRepoError",
                "DisabledRepoError",
                "OfflineModeIsEnabled",
                "HFValidationError",
                "LocalTokenNotFoundError",
            }
        ),
    ),
    ExceptionCatalog(
        id="datasets",
        source="https://github.com/huggingface/datasets/blob/main/src/datasets/exceptions.py, "
        "src/datasets/utils/info_utils.py, src/datasets/table.py (CastError), "
        "src/datasets/builder.py (DatasetBuildError, ManualDownloadError)",
        modules=("datasets.",),
        classes=_causes(
            "dataset_loading",
            "DatasetsError",
            "DatasetNotFoundError",
            "DatasetBuildError",
            "ManualDownloadError",
            "FileNotFoundDatasetsError",
            "DataFilesNotFoundError",
            "EmptyDatasetError",
            "DatasetGenerationError",
            "DatasetGenerationCastError",
            "SplitsNotFoundError",
            "ChecksumVerificationError",
            "UnexpectedDownloadedFileError",
            "ExpectedMoreDownloadedFilesError",
            "NonMatchingChecksumError",
            "SplitsVerificationError",
            "UnexpectedSplitsError",
            "ExpectedMoreSplitsError",
            "NonMatchingSplitsSizesError",
            "UnexpectedDownloadedFile",
            "ExpectedMoreDownloadedFiles",
            "ExpectedMoreSplits",
            "UnexpectedSplits",
            "SchemaInferenceError",
            "CastError",
            "DatasetTransformationNotAllowedError",
        ),
        bare=frozenset(
            {
                "DatasetNotFoundError",
                "DataFilesNotFoundError",
                "DatasetGenerationError",
                "DatasetGenerationCastError",
                "NonMatchingSplitsSizesError",
                "NonMatchingChecksumError",
                "ExpectedMoreSplits",
                "ExpectedMoreSplitsError",
                "ExpectedMoreDownloadedFiles",
                "SchemaInferenceError",
            }
        ),
    ),
    ExceptionCatalog(
        id="pyarrow",
        source="https://github.com/apache/arrow/blob/main/python/pyarrow/error.pxi (ArrowInvalid, "
        "ArrowTypeError, ArrowIOError, ArrowKeyError, ArrowIndexError, ArrowNotImplementedError, "
        "ArrowCapacityError, ArrowSerializationError, ArrowMemoryError): the data's bytes, "
        "schema or size as Arrow reads them",
        modules=("pyarrow.",),
        classes=_causes(
            "dataset_loading",
            "ArrowInvalid",
            "ArrowTypeError",
            "ArrowIOError",
            "ArrowKeyError",
            "ArrowIndexError",
            "ArrowNotImplementedError",
            "ArrowCapacityError",
            "ArrowSerializationError",
        ),
        bare=frozenset({"ArrowInvalid", "ArrowTypeError", "ArrowCapacityError"}),
    ),
    ExceptionCatalog(
        id="safetensors",
        source="https://github.com/huggingface/safetensors/blob/main/bindings/python/src/lib.rs "
        "(SafetensorError, printed as safetensors_rust.SafetensorError; its messages carry "
        "safetensors/src/tensor.rs' SafeTensorError variants: HeaderTooLarge, "
        "InvalidHeaderDeserialization, MetadataIncompleteBuffer, ...): a weights file that "
        "cannot be read (truncated, a git-lfs pointer, another format)",
        modules=("safetensors_rust.", "safetensors."),
        classes=_causes("model_loading", "SafetensorError"),
        bare=frozenset({"SafetensorError"}),
    ),
    ExceptionCatalog(
        id="torch",
        source="https://github.com/pytorch/pytorch/blob/main/torch/distributed/__init__.py "
        "(DistError, DistBackendError, DistNetworkError, DistStoreError), torch/__init__.py "
        "(OutOfMemoryError, torch.cuda.OutOfMemoryError), torch/distributed/elastic/"
        "multiprocessing/errors/__init__.py (ChildFailedError), torch/multiprocessing/spawn.py "
        "(ProcessRaisedException, ProcessExitedException)",
        modules=("torch.",),
        classes={
            "OutOfMemoryError": "gpu_oom",
            # The c10d store the ranks meet at did not answer or not every rank joined it
            # (rules.yaml c10d-store-connection's cause).
            "DistStoreError": "aux_connection",
            "DistNetworkError": "aux_connection",
            # torchrun's and mp.spawn's report that a child failed: the child's own traceback
            # and the launcher's record decide.
            "ChildFailedError": CONSEQUENCE,
            "ProcessRaisedException": CONSEQUENCE,
            "ProcessExitedException": CONSEQUENCE,
        },
        bare=frozenset({"DistStoreError", "ChildFailedError"}),
    ),
    ExceptionCatalog(
        id="ray",
        source="https://github.com/ray-project/ray/blob/master/python/ray/exceptions.py: "
        "RayTaskError wraps a task's exception (RayTaskError(X), read by X); an actor or "
        "worker that died, an object lost with its node or owner, a system error, report "
        "another failure; OutOfMemoryError is Ray's memory monitor killing a task on its node",
        modules=("ray.exceptions.", "ray."),
        classes={
            **_causes(
                CONSEQUENCE,
                "RayTaskError",
                "RayActorError",
                "ActorDiedError",
                "ActorUnavailableError",
                "ActorUnschedulableError",
                "WorkerCrashedError",
                "LocalRayletDiedError",
                "RaySystemError",
                "NodeDiedError",
                "ObjectLostError",
                "ObjectFetchTimedOutError",
                "OwnerDiedError",
                "ObjectReconstructionFailedError",
                "ObjectReconstructionFailedMaxAttemptsExceededError",
                "ObjectReconstructionFailedLineageEvictedError",
                "ReferenceCountingAssertionError",
                "TaskUnschedulableError",
                "GetTimeoutError",
            ),
            "OutOfMemoryError": "host_oom",
            "OutOfDiskError": "filesystem",
            "RuntimeEnvSetupError": "user_exception",
        },
        bare=frozenset(
            {
                "RayTaskError",
                "RayActorError",
                "ActorDiedError",
                "WorkerCrashedError",
                "LocalRayletDiedError",
                "RaySystemError",
                "OwnerDiedError",
                "ObjectReconstructionFailedError",
                "RuntimeEnvSetupError",
            }
        ),
    ),
    ExceptionCatalog(
        id="tensorflow",
        source="https://github.com/tensorflow/tensorflow/blob/master/tensorflow/python/framework/"
        "errors_impl.py (tf.errors, https://www.tensorflow.org/api_docs/python/tf/errors): "
        "NotFoundError and PermissionDeniedError are a path the job names that is not there or "
        "not its own (FileNotFoundError's and PermissionError's counterparts, events.py "
        "ENVIRONMENT_EXCEPTIONS), UnauthenticatedError credentials it lacks; UnavailableError "
        "and DeadlineExceededError are the grpc-retryable table's",
        modules=("tensorflow.", "tf.errors."),
        classes=_causes(
            "user_exception",
            "NotFoundError",
            "PermissionDeniedError",
            "UnauthenticatedError",
        ),
    ),
    ExceptionCatalog(
        id="triton",
        source="https://github.com/triton-lang/triton/blob/main/python/triton/runtime/errors.py "
        "(OutOfResources: 'out of resource: {name}, Required: {required}, Hardware limit: "
        "{limit}', re-exported by triton.runtime.autotuner; triton.code_gen in 1.x): a kernel's "
        "tile that does not fit the SM's shared memory or registers, the kernel's configuration "
        "on this GPU, not the GPU's memory (no smaller batch frees it)",
        modules=("triton.",),
        classes={"OutOfResources": "framework_exception"},
        bare=frozenset({"OutOfResources"}),
    ),
    ExceptionCatalog(
        id="data-readers",
        source="https://github.com/python-pillow/Pillow/blob/main/src/PIL/Image.py "
        "(UnidentifiedImageError, an image file Pillow cannot identify), "
        "https://github.com/dmlc/decord/blob/master/python/decord/_ffi/base.py (DECORDError, a "
        "video decord's reader cannot open or decode): a file of the data set",
        modules=("PIL.", "decord."),
        classes=_causes("dataset_loading", "UnidentifiedImageError", "DECORDError"),
        bare=frozenset({"UnidentifiedImageError", "DECORDError"}),
    ),
    ExceptionCatalog(
        id="lightning",
        source="https://github.com/Lightning-AI/pytorch-lightning/blob/master/src/lightning/"
        "fabric/utilities/exceptions.py (MisconfigurationException, re-exported by "
        "pytorch_lightning.utilities.exceptions and lightning.pytorch.utilities.exceptions): "
        "the Trainer refusing the job's module, hooks or arguments; src/lightning/pytorch/"
        "utilities/exceptions.py DeadlockDetectedException, the Trainer killing the processes "
        "after another rank's failure (a report of it)",
        modules=("lightning_fabric.", "pytorch_lightning.", "lightning."),
        classes={
            "MisconfigurationException": "user_exception",
            "DeadlockDetectedException": CONSEQUENCE,
        },
        bare=frozenset({"MisconfigurationException"}),
    ),
    ExceptionCatalog(
        id="config",
        source="https://github.com/omry/omegaconf/blob/master/omegaconf/errors.py, "
        "https://github.com/facebookresearch/hydra/blob/main/hydra/errors.py, "
        "https://github.com/yaml/pyyaml/blob/main/lib/yaml/error.py (MarkedYAMLError and "
        "its scanner, parser, composer and constructor errors): the config the job gave",
        modules=("omegaconf.", "hydra.", "yaml."),
        classes=_causes(
            "user_exception",
            "OmegaConfBaseException",
            "MissingMandatoryValue",
            "KeyValidationError",
            "ValidationError",
            "UnsupportedValueType",
            "ReadonlyConfigError",
            "ConfigKeyError",
            "ConfigAttributeError",
            "ConfigTypeError",
            "ConfigIndexError",
            "ConfigValueError",
            "InterpolationKeyError",
            "InterpolationResolutionError",
            "InterpolationToMissingValueError",
            "InterpolationValidationError",
            "UnsupportedInterpolationType",
            "GrammarParseError",
            "ConfigCycleDetectedException",
            "MissingConfigException",
            "ConfigCompositionException",
            "OverrideParseException",
            "HydraException",
            "SearchPathException",
            "YAMLError",
            "MarkedYAMLError",
            "ScannerError",
            "ParserError",
            "ComposerError",
            "ConstructorError",
            "ReaderError",
        ),
        bare=frozenset(
            {
                "MissingMandatoryValue",
                "ConfigKeyError",
                "ConfigAttributeError",
                "InterpolationKeyError",
                "InterpolationResolutionError",
                "MissingConfigException",
                "ConfigCompositionException",
                "OverrideParseException",
                "ScannerError",
                "MarkedYAMLError",
            }
        ),
    ),
    ExceptionCatalog(
        id="http-clients",
        source="https://github.com/psf/requests/blob/main/src/requests/exceptions.py, "
        "https://github.com/urllib3/urllib3/blob/main/src/urllib3/exceptions.py, "
        "https://github.com/encode/httpx/blob/master/httpx/_exceptions.py, "
        "https://github.com/aio-libs/aiohttp/blob/master/aiohttp/client_exceptions.py: the "
        "connection-level errors (a service that did not answer); an object store's where "
        "the store is named next to it or its client's frames raised it (decide.py)",
        modules=("requests.", "urllib3.", "httpx.", "httpcore.", "aiohttp."),
        classes=_causes(
            "aux_connection",
            # requests
            "ConnectionError",
            "ConnectTimeout",
            "ReadTimeout",
            "Timeout",
            "SSLError",
            "ProxyError",
            "ChunkedEncodingError",
            "RetryError",
            # urllib3
            "MaxRetryError",
            "NewConnectionError",
            "NameResolutionError",
            "ConnectTimeoutError",
            "ReadTimeoutError",
            "ProtocolError",
            "IncompleteRead",
            # httpx / httpcore
            "ConnectError",
            "ReadError",
            "WriteError",
            "PoolTimeout",
            "WriteTimeout",
            "RemoteProtocolError",
            "NetworkError",
            "TransportError",
            # aiohttp
            "ClientConnectorError",
            "ClientConnectionError",
            "ClientOSError",
            "ServerDisconnectedError",
            "ServerTimeoutError",
            "ServerConnectionError",
            "ClientPayloadError",
            "ConnectionTimeoutError",
            "SocketTimeoutError",
        ),
        bare=frozenset(
            {
                "MaxRetryError",
                "NewConnectionError",
                "ClientConnectorError",
                "ServerDisconnectedError",
            }
        ),
    ),
    ExceptionCatalog(
        id="object-store-clients",
        source="https://github.com/boto/botocore/blob/develop/botocore/exceptions.py, "
        "https://github.com/boto/boto3/blob/develop/boto3/exceptions.py, "
        "https://github.com/boto/s3transfer/blob/develop/s3transfer/exceptions.py, "
        "https://github.com/minio/minio-py/blob/master/minio/error.py, "
        "https://github.com/fsspec/gcsfs/blob/main/gcsfs/retry.py: the store's endpoint that "
        "did not answer or failed the transfer; the credentials the job did not provide",
        modules=("botocore.", "boto3.", "s3transfer.", "minio.", "gcsfs.", "s3fs.", "adlfs."),
        classes={
            **_causes(
                "object_storage",
                "EndpointConnectionError",
                "ConnectionClosedError",
                "ConnectTimeoutError",
                "ReadTimeoutError",
                "ResponseStreamingError",
                "IncompleteReadError",
                "S3UploadFailedError",
                "RetriesExceededError",
                "ServerError",
                "InvalidResponseError",
                "HttpError",
            ),
            # A credential or region the job's environment does not give.
            **_causes(
                "user_exception",
                "NoCredentialsError",
                "PartialCredentialsError",
                "NoRegionError",
                "ProfileNotFound",
            ),
        },
        bare=frozenset({"EndpointConnectionError", "S3UploadFailedError", "NoCredentialsError"}),
    ),
    ExceptionCatalog(
        id="fsspec",
        source="https://github.com/fsspec/filesystem_spec/blob/master/fsspec/exceptions.py: an "
        "async filesystem operation (an object store's or HTTP's) that timed out; the store's "
        "where its client's frames raised it or its URL is named (decide.py)",
        modules=("fsspec.",),
        classes={"FSTimeoutError": "aux_connection"},
    ),
    ExceptionCatalog(
        id="google-resumable-media",
        source="https://github.com/googleapis/google-resumable-media-python/blob/main/google/"
        "resumable_media/common.py: GCS's upload and download library; InvalidResponse with a "
        "retryable status (429, 500-504) is the store's, with another (403, 404) no cause of "
        "its own (exception_cause reads the status); DataCorruption, a checksum mismatch",
        modules=("google.resumable_media.",),
        classes={"InvalidResponse": "object_storage", "DataCorruption": "object_storage"},
    ),
    ExceptionCatalog(
        id="google-cloud",
        source="https://github.com/googleapis/python-api-core/blob/main/google/api_core/"
        "exceptions.py, https://github.com/googleapis/google-auth-library-python/blob/main/"
        "google/auth/exceptions.py: a service that did not answer (an object store's where "
        "the store is named, decide.py); credentials the job's environment lacks",
        modules=("google.api_core.", "google.auth.", "google.cloud."),
        classes={
            **_causes(
                "aux_connection",
                "ServiceUnavailable",
                "InternalServerError",
                "BadGateway",
                "GatewayTimeout",
                "TooManyRequests",
                "DeadlineExceeded",
                "RetryError",
                "TransportError",
            ),
            "DefaultCredentialsError": "user_exception",
        },
        bare=frozenset({"DefaultCredentialsError"}),
    ),
    ExceptionCatalog(
        id="azure",
        source="https://github.com/Azure/azure-sdk-for-python/blob/main/sdk/core/azure-core/"
        "azure/core/exceptions.py: the service request or response that failed in transport "
        "(an object store's where the store is named, decide.py); credentials refused",
        modules=("azure.",),
        classes={
            **_causes(
                "aux_connection",
                "ServiceRequestError",
                "ServiceResponseError",
                "ServiceRequestTimeoutError",
                "ServiceResponseTimeoutError",
                "IncompleteReadError",
            ),
            "ClientAuthenticationError": "user_exception",
        },
    ),
    ExceptionCatalog(
        id="horovod",
        source="https://github.com/horovod/horovod/blob/master/horovod/common/exceptions.py: "
        "HorovodInternalError is raised in every rank's collective once Horovod shut down "
        "after a rank failed ('you should see the exception in the log before the first "
        "shutdown message'); HostsUpdatedInterrupt is elastic Horovod resetting for new hosts",
        modules=("horovod.",),
        classes=_causes(
            CONSEQUENCE, "HorovodInternalError", "HostsUpdatedInterrupt", "HostsUpdatedException"
        ),
    ),
    ExceptionCatalog(
        id="sagemaker",
        source="https://github.com/aws/sagemaker-training-toolkit/blob/master/src/"
        "sagemaker_training/errors.py: ExecuteUserScriptError reports the user's script exiting "
        "non-zero ('ExitCode %s', 'ErrorMessage \"%s\"': its status and last words decide); the "
        "service's 'AlgorithmError: <that>' and the SDK's UnexpectedStatusException "
        "(https://github.com/aws/sagemaker-python-sdk/blob/master/src/sagemaker/exceptions.py) "
        "report the job's end",
        modules=("sagemaker_training.", "sagemaker_containers.", "sagemaker."),
        classes=_causes(
            CONSEQUENCE, "ExecuteUserScriptError", "AlgorithmError", "UnexpectedStatusException"
        ),
        bare=frozenset({"ExecuteUserScriptError", "AlgorithmError", "UnexpectedStatusException"}),
    ),
)


@dataclass(frozen=True)
class ClassVerdict:
    cause: str  # a taxonomy cause, or CONSEQUENCE
    catalog: str  # the catalog's id
    name: str  # the class the verdict is for (the wrapped one for a wrapper)


# "RayTaskError(ValueError)": the wrapper's name carries the wrapped class (ray's
# as_instanceof_cause names the class so).
_WRAPPED = re.compile(r"^((?:[A-Za-z_][A-Za-z0-9_]*\.)*)RayTaskError\(([A-Za-z_][A-Za-z0-9_.]*)\)")
_QUALIFIED = re.compile(r"^((?:[A-Za-z_][A-Za-z0-9_]*\.)*)([A-Za-z_][A-Za-z0-9_]*)")


# torch's ExceptionWrapper re-raising a worker's exception in the parent
# (https://github.com/pytorch/pytorch/blob/main/torch/_utils.py, reraise: "Caught {type} in
# {where}." then "Original Traceback ..."): the original traceback, printed after it, decides.
_RERAISED = re.compile(
    r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*([A-Za-z_][A-Za-z0-9_]*): Caught [A-Za-z_][A-Za-z0-9_.]* in "
    r"(?:DataLoader worker process \d+|replica \d+ on device \d+|pin memory thread)"
)


def exception_cause(message: str) -> ClassVerdict | None:
    """The catalogued verdict for the exception a traceback's last line names ("mod.Class:
    message"), or None where no catalog holds its class under its module."""
    rm = _RERAISED.match(message)
    if rm:
        return ClassVerdict(CONSEQUENCE, "torch", rm.group(1))
    wm = _WRAPPED.match(message)
    if wm:
        module, inner = _split(wm.group(2))
        # Ray names the wrapped class bare (cause_cls.__name__): its own classes are read
        # under its module.
        verdict = _lookup(module, inner) or _lookup(module or wm.group(1), inner)
        # A wrapped class no catalog holds (the task's own ValueError): its traceback follows
        # the wrapper's line and its own last line decides; the wrapper reports it.
        return verdict or ClassVerdict(CONSEQUENCE, "ray", "RayTaskError")
    qm = _QUALIFIED.match(message)
    if qm is None:
        return None
    verdict = _lookup(qm.group(1), qm.group(2))
    if verdict is not None and (verdict.catalog, verdict.name) in _STATUS_DECIDES:
        # The class carries an HTTP status: only a retryable one is the service's.
        sm = _STATUS.search(message, qm.end())
        if sm is None or sm.group(1) not in _RETRYABLE_STATUSES:
            return None
    return verdict


# Catalogs whose class is the service's only with a retryable status in its message (RFC 9110
# section 15.6, https://www.rfc-editor.org/rfc/rfc9110#section-15.6, and 429 of RFC 6585).
_STATUS_DECIDES = frozenset({("google-resumable-media", "InvalidResponse")})
_STATUS = re.compile(r"[(, ]([1-5][0-9]{2})[,) ]")
_RETRYABLE_STATUSES = frozenset({"429", "500", "502", "503", "504"})


def _split(qualified: str) -> tuple[str, str]:
    module, _, name = qualified.rpartition(".")
    return (module + "." if module else ""), name


def _lookup(module: str, name: str) -> ClassVerdict | None:
    for cat in CATALOGS:
        cause = cat.classes.get(name)
        if cause is None:
            continue
        if module.startswith(cat.modules) or (not module and name in cat.bare):
            return ClassVerdict(cause, cat.id, name)
    return None


# The classes of the catalogs above whose names end in neither Error nor Exception, which the
# python-exception rule's own pattern does not read: they join it through this table.
PYTHON_EXCEPTION_NAMES = Table(
    id="python-exception-names",
    source="the classes of families_python.CATALOGS named otherwise than *Error / *Exception: "
    "huggingface_hub's OfflineModeIsEnabled (https://github.com/huggingface/huggingface_hub/"
    "blob/main/src/huggingface_hub/errors.py), datasets' ExpectedMoreSplits, requests' and "
    "httpx's Timeout classes, google-resumable-media's InvalidResponse, triton's "
    "OutOfResources (https://github.com/triton-lang/triton/blob/main/python/triton/runtime/"
    "errors.py), ray's RayTaskError(X) "
    "wrapper (https://github.com/ray-project/ray/blob/master/python/ray/exceptions.py); and VS "
    "Code's 'Exception has occurred: X' header (https://code.visualstudio.com/docs/python/"
    "debugging)",
    members=(
        Member(
            patterns=(
                "([A-Za-z_][A-Za-z0-9_]*\\.)*(OfflineModeIsEnabled|ExpectedMoreSplits|"
                "ExpectedMoreDownloadedFiles|UnexpectedDownloadedFile|UnexpectedSplits|"
                "MissingMandatoryValue|ProfileNotFound|ServiceUnavailable|BadGateway|"
                "GatewayTimeout|TooManyRequests|DeadlineExceeded|IncompleteRead|InvalidResponse|"
                "DataCorruption|OutOfResources)(:|$)",
                "(requests|httpx|httpcore)(\\.[A-Za-z_]+)*\\.(Timeout|ConnectTimeout|ReadTimeout|"
                "WriteTimeout|PoolTimeout)(:|$)",
                "([A-Za-z_][A-Za-z0-9_]*\\.)*RayTaskError\\([A-Za-z_][A-Za-z0-9_.]*\\)(:|$)",
                # A debugger's header (VS Code's "Exception has occurred: ScannerError"), the
                # message on the next line.
                "Exception has occurred: ([A-Za-z_][A-Za-z0-9_]*\\.)*[A-Za-z_][A-Za-z0-9_]*$",
            ),
            anchors=(
                "offlinemodeisenabled",
                "expectedmore",
                "unexpecteddownloadedfile",
                "unexpectedsplits",
                "missingmandatoryvalue",
                "profilenotfound",
                "serviceunavailable",
                "badgateway",
                "gatewaytimeout",
                "toomanyrequests",
                "deadlineexceeded",
                "incompleteread",
                "invalidresponse",
                "datacorruption",
                "outofresources",
                "exceptions.timeout",
                "exceptions.connecttimeout",
                "exceptions.readtimeout",
                "httpx.",
                "httpcore.",
                "raytaskerror(",
                "exception has occurred: ",
            ),
        ),
    ),
    examples=(
        "huggingface_hub.utils._http.OfflineModeIsEnabled: Cannot reach https://huggingface.co/"
        "meta-llama/Llama-2-7b-chat-hf/",
        "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=1042684, "
        "ip=147.8.181.248)",
        "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: model.path",
        "httpx.PoolTimeout",
        "Exception has occurred: ScannerError",
    ),
)
