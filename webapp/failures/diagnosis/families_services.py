"""Service clients' catalogs: object stores' retryable codes and endpoints, HTTP's and gRPC's
retryable statuses, the JVM's and Python's connection errors, Hugging Face's exceptions (the
registry and the tables' conventions: families.py).
"""

from __future__ import annotations

from webapp.failures.diagnosis.family_table import Member, Table

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
    "is loaded (cached_file in https://github.com/huggingface/transformers/blob/main/src/"
    "transformers/utils/hub.py: 'is not a local folder and is not a valid model identifier', "
    "'does not appear to have a file named', 'You are trying to access a gated repo', 'is not "
    "a valid git identifier', 'We couldn't connect to ... to load this file', 'Incorrect "
    "path_or_model_id'; configuration_utils' and modeling_utils' 'Can't load the configuration "
    "of' / 'Can't load the model for')",
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
        # transformers' cached_file (src/transformers/utils/hub.py) words each of
        # huggingface_hub's classes so: GatedRepoError, RevisionNotFoundError,
        # LocalEntryNotFoundError (the endpoint may be a mirror's, HF_ENDPOINT), HFValidationError.
        Member(text="You are trying to access a gated repo"),
        Member(text="is not a valid git identifier (branch name, tag name or commit id)"),
        Member(
            patterns=("We couldn't connect to '[^']+' to load this (file|model)",),
            anchors=("to load this file", "to load this model"),
        ),
        Member(text="Incorrect path_or_model_id: '"),
        # A local folder without the weights or the file a sharded index names
        # (modeling_utils' "Error no file named ... found in directory", cached_file's
        # "Could not locate ... inside ...").
        Member(
            patterns=(
                "Error no file named [A-Za-z0-9_.]+.* found in directory",
                "Could not locate [^ ]+ inside ",
            ),
            anchors=("error no file named", "could not locate "),
        ),
        # configuration_utils' and modeling_utils' generic wordings when from_pretrained fails.
        Member(
            patterns=("Can't load the (configuration of|model for) '",),
            anchors=("can't load the configuration of", "can't load the model for"),
        ),
        # The Hub refusing a model's file: 401, 403 or 404 on a model repository's URL (a
        # dataset's, huggingface.co/datasets/..., is rules.yaml dataset-load's, earlier), and
        # the gated-repository refusals of huggingface_hub's errors.py.
        Member(
            patterns=(
                "(401|403|404) Client Error[^']*huggingface\\.co/(api/models/)?[A-Za-z0-9_.-]+/"
                "[A-Za-z0-9_.-]+/resolve/",
                "(401|403|404) Client Error[^']*huggingface\\.co/api/models/",
            ),
            anchors=("client error",),
        ),
        Member(text="public gated repositories"),
        Member(
            patterns=("Access to model [^ ]+ is restricted",),
            anchors=("access to model ",),
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


# A serving or rollout engine refusing to start because the GPU memory left after the weights
# cannot hold the KV cache it needs: the GPU's memory, whatever the exception class (a ValueError
# in vLLM, a RuntimeError in SGLang) or the engine process's prefix.
ENGINE_GPU_MEMORY = Table(
    id="engine-gpu-memory",
    source="vLLM https://github.com/vllm-project/vllm/blob/main/vllm/v1/core/kv_cache_utils.py "
    "(check_enough_kv_cache_memory: 'No available memory for the cache blocks', '... KV cache "
    "is needed, which is larger than the available KV cache memory'), vllm/worker/worker.py "
    "(raise_if_cache_size_invalid: 'is larger than the maximum number of tokens that can be "
    "stored in KV cache'; the start-up check 'Free memory on device ... on startup is less than "
    "desired GPU memory utilization'); SGLang https://github.com/sgl-project/sglang/blob/main/"
    "python/sglang/srt/model_executor/model_runner.py ('Not enough memory. Please try to "
    "increase --mem-fraction-static.')",
    members=(
        Member(text="No available memory for the cache blocks"),
        Member(text="KV cache is needed, which is larger than the available KV cache memory"),
        Member(text="is larger than the maximum number of tokens that can be stored in KV cache"),
        Member(
            patterns=(
                "Free memory on device .* on startup is less than desired GPU memory utilization",
            ),
            anchors=("on startup is less than desired gpu memory utilization",),
        ),
        Member(text="Not enough memory. Please try to increase --mem-fraction-static"),
    ),
    examples=(
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.",
    ),
)


# torch.load's own errors on a checkpoint it cannot read: the weights-only unpickler refusing a
# class (the default since PyTorch 2.6), a file cut short, a storage of the wrong size. Whatever
# frame printed them, the checkpoint is the cause.
TORCH_LOAD_ERRORS = Table(
    id="torch-load-errors",
    source="https://github.com/pytorch/pytorch/blob/main/torch/serialization.py (_get_wo_message:"
    " 'Weights only load failed'), torch/csrc/serialization.cpp (doRead: 'unexpected EOF, "
    "expected N more bytes. The file might be corrupted.'), torch/csrc/generic/StorageMethods."
    "cpp ('storage has wrong byte size'); the zip reader's 'PytorchStreamReader failed ...' is "
    "rules.yaml model-state-dict's own pattern",
    members=(
        Member(text="Weights only load failed"),
        Member(
            patterns=("unexpected EOF, expected [0-9]+ more bytes\\. The file might be corrupted",),
            anchors=("the file might be corrupted",),
        ),
        Member(
            patterns=("storage has wrong byte size: expected [0-9]+ got [0-9]+",),
            anchors=("storage has wrong byte size",),
        ),
        # caffe2's zip reader (caffe2/serialize/inline_container.cc): every "failed ..." of it,
        # reading, locating or finding the archive's records.
        Member(
            patterns=("PytorchStreamReader failed (reading|locating|finding)",),
            anchors=("pytorchstreamreader failed",),
        ),
    ),
    examples=(
        "_pickle.UnpicklingError: Weights only load failed. This file can still be loaded, to do "
        "so you have two options, do those steps only if you trust the source of the checkpoint.",
        "RuntimeError: unexpected EOF, expected 3351 more bytes. The file might be corrupted.",
    ),
)


# webdataset's own errors on a shard it reads: a cached download that is not a tar file, a
# sample without the fields the pipeline asks for, no sample at all. (Its pipe's exit while
# streaming a shard from a store is rules.yaml's, beside the store's.)
WEBDATASET_ERRORS = Table(
    id="webdataset-errors",
    source="https://github.com/webdataset/webdataset/blob/main/webdataset/cache.py ('%s (%s) is "
    "not a tar archive, but a %s, contains %s'), webdataset/filters.py (getfirst/to_tuple: "
    "\"didn't find {keys} in {list(sample.keys())}\"), webdataset/compat.py (WebDataset's "
    "empty_check: 'No samples found in dataset; perhaps you have fewer shards than workers.')",
    members=(
        Member(
            patterns=("\\) is not a tar archive, but a ",),
            anchors=("is not a tar archive, but a ",),
        ),
        Member(
            patterns=("didn't find \\[.*\\] in \\['__key__'",),
            anchors=("didn't find [",),
        ),
        Member(text="No samples found in dataset; perhaps you have fewer shards than workers"),
    ),
    examples=(
        "ValueError: didn't find ['y.txt'] in ['__key__', 'x.pyd']",
        "ValueError: No samples found in dataset; perhaps you have fewer shards than workers.",
    ),
)


# hydra's and omegaconf's reports of a config the job gave, as hydra prints them without a
# traceback (HYDRA_FULL_ERROR unset): an override of a key the config does not have, a merge
# that fails, and omegaconf's detail lines under any of its errors. hydra's own hint ("Set the
# environment variable HYDRA_FULL_ERROR=1") follows any exception of the task, a CUDA OOM as
# well, and is no member.
CONFIG_OVERRIDE_ERRORS = Table(
    id="config-override-errors",
    source="https://github.com/facebookresearch/hydra/blob/main/hydra/_internal/"
    "config_loader_impl.py (_apply_overrides_to_config: \"Could not override '{key}'.\", 'To "
    "append to your config use +{override}', 'Could not append to config. An item is already "
    "at', 'Error merging override {override}'), https://github.com/omry/omegaconf/blob/master/"
    "omegaconf/_utils.py (format_and_raise's template: the message, then 'full_key: ', "
    "'reference_type=' and 'object_type=' lines; omegaconf/dictconfig.py \"Key '{key}' is not in "
    'struct")',
    members=(
        Member(
            patterns=("Could not override '[^']+'\\.", "To append to your config use \\+"),
            anchors=("could not override '", "to append to your config use +"),
        ),
        Member(text="Could not append to config. An item is already at"),
        Member(
            patterns=("Error merging override [+~]?[A-Za-z_]",),
            anchors=("error merging override ",),
        ),
        Member(
            patterns=("Key '[^']+' is not in struct",),
            anchors=("is not in struct",),
        ),
        Member(
            patterns=("^[ \t]*object_type=[A-Za-z_][A-Za-z0-9_.]*[ \t]*$",),
            anchors=("object_type=",),
        ),
    ),
    examples=(
        "Could not override 'task.data'.",
        "Key 'perferences' is not in struct",
        "    object_type=dict",
    ),
)


# Accelerator memory in the words of the frameworks other than torch (torch's and CUDA's own are
# families_gpu's cuda-oom): PaddlePaddle's allocator, MXNet's storage manager, XLA on a TPU.
FRAMEWORK_GPU_OOM = Table(
    id="framework-gpu-oom",
    source="PaddlePaddle https://github.com/PaddlePaddle/Paddle/blob/develop/paddle/phi/core/"
    "memory/allocation/allocator_facade.cc and retry_allocator ('Out of memory error on GPU %d. "
    "Cannot allocate %s memory on GPU %d'), MXNet https://github.com/apache/mxnet/blob/master/"
    "src/storage/pooled_storage_manager.h ('cudaMalloc retry failed: out of memory', "
    "'cudaMalloc failed: out of memory'), XLA's TPU compiler ('Ran out of memory in memory space "
    "hbm', https://cloud.google.com/tpu/docs/troubleshooting/troubleshoot-memory; its device "
    "allocator's 'Failed to allocate request for %s (%uB) on device ordinal %d', https://github.com/"
    "openxla/xla/tree/main/xla/stream_executor), torch's C10_CUDA_DRIVER_CHECK ('CUDA driver "
    "error: %s', https://github.com/pytorch/pytorch/blob/main/c10/cuda/driver_api.h), triton's "
    "launcher ('Triton Error [CUDA]: %s', https://github.com/triton-lang/triton/blob/main/third_"
    "party/nvidia/backend/driver.c), fairseq "
    "https://github.com/facebookresearch/fairseq/blob/main/fairseq/trainer.py ('attempting to "
    "recover from OOM in forward/backward pass', 'OOM during optimization, irrecoverable', "
    "_log_oom's 'OOM: Ran out of memory with exception')",
    members=(
        Member(
            patterns=("Out of memory error on GPU [0-9]+\\. Cannot allocate",),
            anchors=("out of memory error on gpu",),
        ),
        Member(
            patterns=("cudaMalloc (retry )?failed: out of memory",),
            anchors=("cudamalloc failed: out of memory", "cudamalloc retry failed: out of memory"),
        ),
        # HBM is the chip's memory; vmem, the core's vector memory, is a kernel's tiling (as
        # triton's shared memory) and no member.
        Member(text="Ran out of memory in memory space hbm"),
        # The driver's string for CUDA_ERROR_OUT_OF_MEMORY under wrappers other than the CUDA
        # runtime's own (cuda-oom): torch's driver-API check, triton's launcher; XLA's device
        # allocator's request it could not serve.
        Member(
            patterns=(
                "CUDA driver error: out of memory",
                "Triton Error \\[CUDA\\]: out of memory",
                "Failed to allocate request for [0-9.]+[KMGT]?i?B \\([0-9]+B\\) on device ordinal",
            ),
            anchors=(
                "cuda driver error: out of memory",
                "triton error [cuda]: out of memory",
                "failed to allocate request for",
            ),
        ),
        # fairseq's trainer on a CUDA "out of memory" it caught: recovering (dropping the batch)
        # or giving up; fairseq2's recovery line.
        Member(
            patterns=(
                "(attempting|Attempting) to recover from OOM (in forward/backward pass|on R[0-9])",
                "OOM during optimization, irrecoverable",
                "OOM: Ran out of memory with exception",
                "ran out of memory in validation step, retrying batch",
            ),
            anchors=(
                "to recover from oom",
                "oom during optimization",
                "oom: ran out of memory",
                "ran out of memory in validation step",
            ),
        ),
    ),
    examples=(
        "Out of memory error on GPU 0. Cannot allocate 1.000000GB memory on GPU 0",
        "src/storage/./pooled_storage_manager.h:157: cudaMalloc retry failed: out of memory",
    ),
)


# Command-line parsers other than argparse refusing the job's arguments, and argparse's and
# jsonargparse's refusals beyond rules.yaml argparse-error's own patterns.
CLI_ARGUMENT_ERRORS = Table(
    id="cli-argument-errors",
    source="click https://github.com/pallets/click/blob/main/src/click/exceptions.py "
    "(NoSuchOption 'No such option: ', MissingParameter 'Missing option' / 'Missing argument', "
    "BadParameter 'Invalid value for', 'Got unexpected extra argument(s)'; typer prints them in "
    "its rich box), python-fire https://github.com/google/python-fire/blob/master/fire/core.py "
    "('Could not consume arg', 'The function received no value for the required argument'), "
    "absl https://github.com/abseil/abseil-py/blob/main/absl/app.py ('FATAL Flags parsing "
    "error'), argparse https://github.com/python/cpython/blob/main/Lib/argparse.py (error(): "
    "'%(prog)s: error: %(message)s', 'ambiguous option', 'one of the arguments %s is required', "
    "'not allowed with argument'), jsonargparse's 'Parser key' (https://github.com/omni-us/"
    "jsonargparse)",
    members=(
        Member(
            patterns=(
                "(Error: |│ )(No such option: -|Missing (option|argument|parameter) '|"
                "Invalid value for '|Got unexpected extra arguments? \\()",
            ),
            anchors=(
                "no such option: -",
                "missing option '",
                "missing argument '",
                "missing parameter '",
                "invalid value for '",
                "got unexpected extra argument",
            ),
        ),
        Member(
            patterns=(
                "ERROR: (Could not consume arg: |The function received no value for the "
                "required argument: )",
            ),
            anchors=("could not consume arg: ", "received no value for the required argument"),
        ),
        Member(text="FATAL Flags parsing error: "),
        Member(
            patterns=(
                "error: (ambiguous option: |one of the arguments .* is required|argument .*: not "
                'allowed with argument |Parser key ")',
            ),
            anchors=(
                "error: ambiguous option: ",
                "error: one of the arguments ",
                ": not allowed with argument ",
                'error: parser key "',
            ),
        ),
    ),
    examples=(
        "Error: No such option: --lr-rate",
        "ERROR: Could not consume arg: --foo",
        "FATAL Flags parsing error: Unknown command line flag 'learning_rat'",
        "train.py: error: ambiguous option: --lr could match --lr-warmup, --lr-decay",
    ),
)


# The interpreter not finding what it was told to run with `python -m` (a launcher's child: the
# module path or the package is not there), as "can't open file" is for a script path.
SCRIPT_START_ERRORS = Table(
    id="script-start-errors",
    source="CPython https://github.com/python/cpython/blob/main/Lib/runpy.py (_get_module_details"
    " and _run_module_as_main's report: '%s: No module named %s', 'Error while finding module "
    "specification for %r'), printed under the interpreter's argv[0]",
    members=(
        Member(
            patterns=(
                "python[0-9.]*: (No module named [A-Za-z_]|Error while finding module spec)",
            ),
            anchors=("no module named ", "error while finding module specification"),
        ),
    ),
    examples=(
        "/usr/bin/python3: No module named torch.distributed.run",
        "/opt/conda/bin/python: Error while finding module specification for 'train.py'",
    ),
)


# A model folder its libraries cannot read as a model: transformers not knowing its
# architecture or its tokenizer's class (a config of a newer release, a folder without
# config.json), peft not finding the adapter's config.
MODEL_CONFIG_ERRORS = Table(
    id="model-config-errors",
    source="transformers https://github.com/huggingface/transformers/blob/main/src/transformers/"
    "models/auto/configuration_auto.py ('Unrecognized model in %s. Should have a `model_type` key"
    "', 'The checkpoint you are trying to load has model type `%s` but Transformers does not "
    "recognize this architecture'), models/auto/tokenization_auto.py ('Tokenizer class %s does "
    "not exist or is not currently imported.'), peft https://github.com/huggingface/peft/blob/"
    "main/src/peft/config.py (\"Can't find '%s' at '%s'\", CONFIG_NAME adapter_config.json)",
    members=(
        Member(text="Should have a `model_type` key in its config.json"),
        Member(text="but Transformers does not recognize this architecture"),
        Member(
            patterns=("Tokenizer class [A-Za-z0-9_]+ does not exist or is not currently imported",),
            anchors=("does not exist or is not currently imported",),
        ),
        Member(text="Can't find 'adapter_config.json' at '"),
    ),
    examples=(
        "ValueError: Unrecognized model in /models/x. Should have a `model_type` key in its "
        "config.json, or contain one of the following strings in its name: albert",
        "ValueError: Can't find 'adapter_config.json' at '/ckpt/lora'",
    ),
)


# Readers of a data set's files refusing a file: Pillow on an image, torchvision's dataset
# classes on their folder. (Their classes, PIL.UnidentifiedImageError and decord's DECORDError,
# are families_python's data-readers catalog.)
DATA_READER_ERRORS = Table(
    id="data-reader-errors",
    source="Pillow https://github.com/python-pillow/Pillow/blob/main/src/PIL/Image.py (open: "
    "'cannot identify image file %r') and src/PIL/ImageFile.py ('image file is truncated (%d "
    "bytes not processed)'), torchvision https://github.com/pytorch/vision/tree/main/"
    "torchvision/datasets ('Dataset not found or corrupted. You can use download=True to "
    "download it')",
    members=(
        Member(
            patterns=("cannot identify image file ['<]",),
            anchors=("cannot identify image file",),
        ),
        Member(
            patterns=("image file is truncated \\([0-9]+ bytes not processed\\)",),
            anchors=("image file is truncated",),
        ),
        Member(text="Dataset not found or corrupted. You can use download=True to download it"),
    ),
    examples=(
        "PIL.UnidentifiedImageError: cannot identify image file '/data/img/0001.jpg'",
        "OSError: image file is truncated (12 bytes not processed)",
    ),
)


# A tokenizer's file its library cannot read (the taxonomy's "tokenizer files that cannot be
# loaded", with the data): tokenizers' tokenizer.json from a newer release, which serde refuses
# by the enum it could not match, and a sentencepiece model that is not one (a git-lfs pointer,
# a truncated download).
TOKENIZER_FILE_ERRORS = Table(
    id="tokenizer-file-errors",
    source="https://github.com/huggingface/tokenizers/blob/main/tokenizers/src/tokenizer/"
    "serialization.rs and models/mod.rs (the #[serde(untagged)] ModelWrapper, "
    "PreTokenizerWrapper, NormalizerWrapper, DecoderWrapper, PostProcessorWrapper; "
    "bindings/python's Py*TypeWrapper), serde's 'data did not match any variant of untagged enum"
    " {name}'; https://github.com/google/sentencepiece/blob/master/src/sentencepiece_processor.cc"
    " (Load: CHECK_OR_RETURN(model_proto->ParseFromArray(...)))",
    members=(
        Member(
            patterns=("data did not match any variant of untagged enum [A-Za-z]*Wrapper",),
            anchors=("did not match any variant of untagged enum",),
        ),
        Member(
            patterns=("sentencepiece_processor\\.cc\\([0-9]+\\) \\[model_proto->ParseFromArray",),
            anchors=("model_proto->parsefromarray",),
        ),
    ),
    examples=(
        "Exception: data did not match any variant of untagged enum ModelWrapper at line 250373 "
        "column 3",
        "RuntimeError: Internal: src/sentencepiece_processor.cc(1101) "
        "[model_proto->ParseFromArray(serialized.data(), serialized.size())]",
    ),
)
