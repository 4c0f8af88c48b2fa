"""Script, model, data and GPU-memory failures in each library's own words: the serving engines'
refusal to start for want of GPU memory, triton's kernel resource error, torch.load's checkpoint
errors, webdataset's shard errors, hydra's and omegaconf's report of a config override. Each
form is taken from the library's source (the tables in families_services.py and
families_python.py cite it). Plain functions over text: no database or broker.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text


@pytest.mark.parametrize(
    "text",
    [
        # vLLM v1 (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory) under its
        # engine process's prefix.
        "(EngineCore_DP0 pid=2231) ERROR 10-01 04:29:49 [core.py:708] ValueError: To serve at "
        "least one request with the model's max seq len (131072), (16.00 GiB KV cache is "
        "needed, which is larger than the available KV cache memory (4.21 GiB). Based on the "
        "available memory, the estimated maximum model length is 34480. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n",
        # vLLM v0 (vllm/worker/worker.py raise_if_cache_size_invalid), both of its wordings.
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.\n",
        "ValueError: The model's max seq len (32768) is larger than the maximum number of tokens "
        "that can be stored in KV cache (21216). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.\n",
        # vLLM's start-up check (vllm/worker/worker.py determine_available_memory's request).
        "ValueError: Free memory on device (11.2/79.11 GiB) on startup is less than desired GPU "
        "memory utilization (0.9, 71.2 GiB). Decrease GPU memory utilization or reduce GPU "
        "memory used by other processes.\n",
        # SGLang (python/sglang/srt/model_executor/model_runner.py init_memory_pool).
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
    ],
    ids=["vllm-v1-kv", "vllm-no-blocks", "vllm-v0-seq-len", "vllm-startup", "sglang"],
)
def test_a_serving_engine_refusing_for_gpu_memory_is_gpu_oom(text: str) -> None:
    assert diagnose_text(text).cause == "gpu_oom"


@pytest.mark.parametrize(
    "text",
    [
        '  File "/usr/lib/python3/dist-packages/triton/compiler/compiler.py", line 374, in '
        "_init_handles\n"
        '    raise OutOfResources(self.metadata.shared, max_shared, "shared memory")\n'
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: "
        "131072, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.\n",
        "triton.runtime.autotuner.OutOfResources: out of resource: shared memory, Required: "
        "663808, Hardware limit: 101376. Reducing block sizes or `num_stages` may help.\n",
    ],
    ids=["runtime-errors", "autotuner"],
)
def test_triton_out_of_resources_is_the_kernel_not_the_gpu_memory(text: str) -> None:
    # A kernel's tile does not fit the SM's shared memory: no batch size frees it.
    assert diagnose_text(text).cause == "framework_exception"


@pytest.mark.parametrize(
    "text",
    [
        "_pickle.UnpicklingError: Weights only load failed. Re-running `torch.load` with "
        "`weights_only` set to `False` will likely succeed, but it can result in arbitrary code "
        "execution. WeightsUnpickler error: Unsupported global: GLOBAL argparse.Namespace\n",
        "RuntimeError: unexpected EOF, expected 3351 more bytes. The file might be corrupted.\n",
        "RuntimeError: storage has wrong byte size: expected 1 got 0\n",
    ],
    ids=["weights-only", "unexpected-eof", "storage-size"],
)
def test_torch_load_errors_are_model_loading(text: str) -> None:
    assert diagnose_text(text).cause == "model_loading"


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: ('/cache/shard-000003.tar (s3://bucket/shard-000003.tar) is not a tar "
        "archive, but a HTML document, text, contains b\"<html>\"', 's3://bucket/shard.tar')\n",
        "ValueError: didn't find ['jpg;png'] in ['__key__', '__url__', 'json']\n",
        "ValueError: No samples found in dataset; perhaps you have fewer shards than workers.\n",
    ],
    ids=["not-a-tar", "missing-field", "no-samples"],
)
def test_webdataset_errors_are_dataset_loading(text: str) -> None:
    assert diagnose_text(text).cause == "dataset_loading"


@pytest.mark.parametrize(
    "text",
    [
        "Could not override 'trainer.devices'.\n"
        "To append to your config use +trainer.devices=8\n"
        "Key 'devices' is not in struct\n"
        "    full_key: trainer.devices\n"
        "    object_type=dict\n",
        "Error merging override +model.heads=16\n"
        "Key 'heads' not in 'ModelConfig'\n"
        "\tfull_key: model.heads\n"
        "\treference_type=ModelConfig\n"
        "\tobject_type=ModelConfig\n",
    ],
    ids=["override-not-in-struct", "merge-structured"],
)
def test_hydra_and_omegaconf_reports_are_the_jobs_config(text: str) -> None:
    assert diagnose_text(text).cause == "user_exception"


def test_hydra_own_hint_does_not_make_a_gpu_oom_a_config_error() -> None:
    # hydra's run_and_report prints any exception of the task this way, a CUDA OOM included.
    text = (
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)\n"
        "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    )
    assert diagnose_text(text).cause == "gpu_oom"


@pytest.mark.parametrize(
    "text",
    [
        # PaddlePaddle's allocator (paddle/phi/core/memory/allocation/).
        "  Out of memory error on GPU 0. Cannot allocate 256.000244MB memory on GPU 0, "
        "15.719788GB memory has been allocated and available memory is only 35.375000MB.\n",
        # MXNet's pooled storage manager.
        "mxnet.base.MXNetError: [10:44:35] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
        "retry failed: out of memory\n",
        # XLA on TPU: the program does not fit the chip's HBM.
        "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. "
        "Ran out of memory in memory space hbm. Used 17.5G of 15.48G hbm.\n",
    ],
    ids=["paddle", "mxnet", "xla-tpu-hbm"],
)
def test_other_frameworks_words_for_accelerator_memory_are_gpu_oom(text: str) -> None:
    assert diagnose_text(text).cause == "gpu_oom"


@pytest.mark.parametrize(
    "text",
    [
        # click (src/click/exceptions.py), typer printing the same messages in its box.
        "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\n"
        "Error: No such option: --lr-rate\n",
        "Error: Missing option '--config'.\n",
        "Error: Invalid value for '--epochs': 'ten' is not a valid integer.\n",
        "│ Got unexpected extra argument (data/)                                     │\n",
        # python-fire (fire/core.py).
        "ERROR: Could not consume arg: --foo\nUsage: train.py <flags>\n",
        # absl (absl/app.py).
        "FATAL Flags parsing error: Unknown command line flag 'learning_rat'\n"
        "Pass --helpshort or --helpfull to see help on flags.\n",
        # argparse's other refusals (Lib/argparse.py), and jsonargparse's under LightningCLI.
        "train.py: error: ambiguous option: --lr could match --lr-warmup, --lr-decay\n",
        'main.py: error: Parser key "trainer.max_epoch":\n',
    ],
    ids=[
        "click-option",
        "click-missing",
        "click-invalid",
        "typer-box",
        "fire",
        "absl",
        "argparse-ambiguous",
        "jsonargparse",
    ],
)
def test_command_line_parsers_refusing_the_jobs_arguments_are_user_exception(text: str) -> None:
    assert diagnose_text(text).cause == "user_exception"


@pytest.mark.parametrize(
    "text",
    [
        # CPython's runpy for `python -m` (Lib/runpy.py), as a launcher's child prints it.
        "/usr/bin/python3: No module named torch.distributed.run\n",
        "/opt/conda/bin/python: Error while finding module specification for 'train.py' "
        "(ModuleNotFoundError: __path__ attribute not found on 'train' while trying to find "
        "'train.py')\n",
    ],
    ids=["no-module", "module-spec"],
)
def test_the_interpreter_not_finding_the_module_to_run_is_user_exception(text: str) -> None:
    assert diagnose_text(text).cause == "user_exception"


@pytest.mark.parametrize(
    "text",
    [
        "ValueError: Unrecognized model in /models/x. Should have a `model_type` key in its "
        "config.json, or contain one of the following strings in its name: albert, bart\n",
        "ValueError: The checkpoint you are trying to load has model type `qwen3` but "
        "Transformers does not recognize this architecture.\n",
        "ValueError: Tokenizer class LlamaTokenizer does not exist or is not currently imported.\n",
        "ValueError: Can't find 'adapter_config.json' at '/ckpt/lora'\n",
        "RuntimeError: PytorchStreamReader failed locating file constants.pkl: file not found\n",
    ],
    ids=["unrecognized", "architecture", "tokenizer-class", "peft-adapter", "stream-locating"],
)
def test_a_model_its_libraries_cannot_load_is_model_loading(text: str) -> None:
    assert diagnose_text(text).cause == "model_loading"


@pytest.mark.parametrize(
    "text",
    [
        "PIL.UnidentifiedImageError: cannot identify image file '/data/img/0001.jpg'\n",
        "OSError: image file is truncated (12 bytes not processed)\n",
        "decord._ffi.base.DECORDError: [10:22:11] /github/workspace/src/video/video_reader.cc:151:"
        " ERROR cannot find video stream with wanted index: -1\n",
        "RuntimeError: Dataset not found or corrupted. You can use download=True to download it\n",
        # An exception raised in webdataset's own frames, whatever its class.
        "Traceback (most recent call last):\n"
        '  File "/w/train.py", line 40, in <module>\n'
        "    for batch in loader:\n"
        '  File "/opt/conda/lib/python3.10/site-packages/webdataset/tariterators.py", line 75, '
        "in tar_file_iterator\n"
        "    raise exn\n"
        "tarfile.ReadError: empty file\n",
    ],
    ids=["pil-unidentified", "pil-truncated", "decord", "torchvision", "webdataset-frame"],
)
def test_a_data_reader_refusing_the_data_is_dataset_loading(text: str) -> None:
    assert diagnose_text(text).cause == "dataset_loading"


@pytest.mark.parametrize(
    "text",
    [
        # tokenizers reading a tokenizer.json written by a newer release (serde's own words).
        "Exception: data did not match any variant of untagged enum ModelWrapper at line 250373 "
        "column 3\n",
        "Exception: data did not match any variant of untagged enum PyPreTokenizerTypeWrapper at "
        "line 40 column 3\n",
        # sentencepiece parsing a tokenizer.model that is not one (a git-lfs pointer).
        "RuntimeError: Internal: src/sentencepiece_processor.cc(1101) "
        "[model_proto->ParseFromArray(serialized.data(), serialized.size())]\n",
    ],
    ids=["tokenizers-model", "tokenizers-pretokenizer", "sentencepiece"],
)
def test_a_tokenizer_file_its_library_cannot_read_is_dataset_loading(text: str) -> None:
    # The taxonomy puts tokenizer files that cannot be loaded with the data (dataset_loading).
    assert diagnose_text(text).cause == "dataset_loading"


@pytest.mark.parametrize(
    "text",
    [
        # The driver's string for CUDA_ERROR_OUT_OF_MEMORY under its wrappers' prefixes: torch's
        # driver-API check (c10/cuda/driver_api), triton's launcher (driver.c).
        "RuntimeError: CUDA driver error: out of memory\n",
        "RuntimeError: Triton Error [CUDA]: out of memory\n",
        # XLA's device allocator (xla/stream_executor: 'Failed to allocate request for %s (%uB)
        # on device ordinal %d').
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Failed to allocate request for "
        "4.00GiB (4294967296B) on device ordinal 0\n",
    ],
    ids=["torch-driver", "triton-driver", "xla-device-allocator"],
)
def test_the_drivers_out_of_memory_under_any_wrapper_is_gpu_oom(text: str) -> None:
    assert diagnose_text(text).cause == "gpu_oom"


@pytest.mark.parametrize("argv0", ["python3", "python3.10", "/usr/bin/python3", "pypy3"])
def test_the_interpreters_name_is_not_a_host(argv0: str) -> None:
    # CPython prints its own argv[0] before "can't open file": no host's prefix to blame.
    d = diagnose_text(
        f"{argv0}: can't open file 'launch.py': [Errno 2] No such file or directory\n"
    )
    assert d.cause == "user_exception"
    assert d.blamed_node is None
