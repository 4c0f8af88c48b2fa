"""Python exceptions read as classes and frames (families_python, events.py): a library's error
is known by its class and module, a report of another failure names no cause, and the innermost
frame's package decides by its role.

Plain functions over text: no database, broker or Django models involved.
"""

from __future__ import annotations

from webapp.failures.diagnosis import diagnose_text
from webapp.failures.diagnosis.families_python import CATALOGS, CONSEQUENCE, exception_cause
from webapp.failures.taxonomy import CAUSES


def test_every_catalogued_class_maps_to_a_taxonomy_cause():
    for cat in CATALOGS:
        assert cat.source.startswith("https://"), cat.id
        for name, cause in cat.classes.items():
            assert cause == CONSEQUENCE or cause in CAUSES, (cat.id, name, cause)
        assert cat.bare <= set(cat.classes), cat.id


def test_lightning_misconfiguration_is_the_jobs_setup_whatever_frame_raised_it():
    # Zasder3/train-CLIP#36: raised in pytorch_lightning/core/hooks.py, read framework before.
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "train.py", line 20, in main\n'
        "    trainer.fit(model, dm)\n"
        '  File "/usr/local/lib/python3.7/dist-packages/pytorch_lightning/core/hooks.py", '
        "line 485, in train_dataloader\n"
        '    raise MisconfigurationException("`train_dataloader` must be implemented")\n'
        "pytorch_lightning.utilities.exceptions.MisconfigurationException: `train_dataloader` "
        "must be implemented to be used with the Lightning Trainer\n"
    )
    assert (d.cause, d.detail) == ("user_exception", "MisconfigurationException")


def test_hub_offline_mode_is_a_model_that_cannot_be_loaded():
    # huggingface/optimum-neuron#535: a class named neither *Error nor *Exception (unknown before).
    d = diagnose_text(
        '  File "/usr/local/lib/python3.10/dist-packages/huggingface_hub/utils/_http.py", line '
        "78, in send\n"
        "    raise OfflineModeIsEnabled(\n"
        "huggingface_hub.utils._http.OfflineModeIsEnabled: Cannot reach "
        "https://huggingface.co/meta-llama/Llama-2-7b-chat-hf/\n"
    )
    assert d.cause == "model_loading"


def test_ray_actor_death_alone_abstains_rather_than_blaming_a_frame():
    # hkust-nlp/simpleRL-reason#98: Ray lists three possible causes; the log shows none of them.
    d = diagnose_text(
        '  File "/tmp/ray/session_1/runtime_resources/working_dir_files/_ray_pkg_61/verl/'
        'single_controller/ray/base.py", line 42, in func\n'
        "    output = ray.get(output)\n"
        "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.\n"
        "        class_name: create_colocated_worker_cls.<locals>.WorkerDict\n"
    )
    assert d.cause == "unknown"


def test_ray_actor_death_gives_way_to_the_cause_beside_it():
    d = diagnose_text(
        "(WorkerDict pid=7710) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.\n"
        '  File "/usr/local/lib/python3.10/dist-packages/ray/_private/worker.py", line 919, in '
        "get_objects\n"
        "    raise value.as_instanceof_cause()\n"
        "ray.exceptions.RayTaskError(ActorDiedError): ray::main_task() (pid=1042684, "
        "ip=147.8.181.248)\n"
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    )
    assert d.cause == "gpu_oom"


def test_ray_task_error_is_read_by_the_class_it_wraps():
    assert exception_cause("ray.exceptions.RayTaskError(OutOfMemoryError): ray::f()").cause == (
        "host_oom"
    )
    # The task's own exception: its traceback's last line, after the wrapper's, decides.
    d = diagnose_text(
        '  File "/home/u/.venv/lib/python3.11/site-packages/ray/_private/worker.py", line 2772, '
        "in get\n"
        "    raise value.as_instanceof_cause()\n"
        "ray.exceptions.RayTaskError(KeyError): ray::train_fn() (pid=4100, ip=10.0.0.7)\n"
        '  File "/home/u/project/train.py", line 88, in train_fn\n'
        "    batch = sample['input_ids']\n"
        "KeyError: 'input_ids'\n"
    )
    assert (d.cause, d.detail) == ("user_exception", "KeyError")


def test_a_generic_class_name_is_read_only_under_its_librarys_module():
    assert exception_cause("requests.exceptions.ConnectionError: HTTPSConnectionPool").cause == (
        "aux_connection"
    )
    assert exception_cause("ConnectionError: peer closed") is None
    assert exception_cause("myproject.errors.ValidationError: bad") is None
    assert exception_cause("omegaconf.errors.ValidationError: bad").cause == "user_exception"


def test_torch_store_errors_are_the_rendezvous_store_not_the_framework():
    d = diagnose_text(
        '  File "/usr/local/lib/python3.10/dist-packages/torch/distributed/rendezvous.py", line '
        "174, in _create_c10d_store\n"
        "    return TCPStore(\n"
        "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 "
        "clients joined.\n"
    )
    assert d.cause == "aux_connection"


def test_pyarrow_cython_frames_are_the_library_not_the_users_script():
    # A ValueError in Arrow's compiled frames ("pyarrow/error.pxi") read user_exception before.
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "pyarrow/_parquet.pyx", line 1587, in pyarrow._parquet.ParquetReader.open\n'
        '  File "pyarrow/error.pxi", line 91, in pyarrow.lib.check_status\n'
        "pyarrow.lib.ArrowNotImplementedError: Unsupported encoding in column 'text'\n"
    )
    assert d.cause == "dataset_loading"


def test_windows_standard_library_frames_are_looked_through():
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "C:\\Users\\u\\miniconda3\\Lib\\site-packages\\deepspeed\\runtime\\engine.py", '
        "line 300, in __init__\n"
        '  File "C:\\Users\\u\\miniconda3\\Lib\\json\\decoder.py", line 355, in raw_decode\n'
        "AttributeError: 'NoneType' object has no attribute 'shape'\n"
    )
    assert d.cause == "framework_exception"


def test_a_weights_reader_frame_is_model_loading():
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py", line '
        "3912, in from_pretrained\n"
        "    raise ValueError(\n"
        "ValueError: You are trying to load a checkpoint saved in a format the model cannot read\n"
    )
    assert d.cause == "model_loading"
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/datasets/load.py", line 1429, in '
        "dataset_module_factory\n"
        '    raise ValueError(f"Couldn\'t cast the data files of {path}")\n'
        "ValueError: Couldn't cast the data files of /data/sft\n"
    )
    assert d.cause == "dataset_loading"


def test_a_checked_out_framework_raising_is_the_framework():
    # fairseq run from its git checkout: its frames are the framework's, not the user's script.
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/fairseq/fairseq_cli/train.py", line 557, in cli_main\n'
        '  File "/home/u/fairseq/fairseq/trainer.py", line 1001, in train_step\n'
        "AssertionError: Fatal error: gradients are inconsistent between workers\n"
    )
    assert d.cause == "framework_exception"


def test_a_chained_exception_is_decided_by_its_innermost_catalogued_cause():
    # The store client's timeout is the root; the framework's RuntimeError raised from it is
    # the frame that reported it.
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/urllib3/connectionpool.py", line 536, '
        "in _make_request\n"
        "urllib3.exceptions.ReadTimeoutError: HTTPSConnectionPool(host='hub.internal', "
        "port=443): Read timed out. (read timeout=10)\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/composer/trainer/trainer.py", line '
        "1204, in fit\n"
        "RuntimeError: could not fetch the run's remote config\n"
    )
    assert d.cause == "aux_connection"


def test_an_uncatalogued_cause_under_a_chain_leaves_the_frames_to_decide():
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/project/prep.py", line 12, in gen\n'
        "KeyError: 'text'\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/datasets/builder.py", line 1997, in '
        "_prepare_split_single\n"
        "datasets.exceptions.DatasetGenerationError: An error occurred while generating the "
        "dataset\n"
    )
    assert d.cause == "dataset_loading"


def test_a_debuggers_exception_header_is_read_as_the_exception():
    # ChenhongyiYang/QueryDet-PyTorch#46: VS Code's "Exception has occurred: X", the message on
    # the next line and the frames after it (unknown before).
    d = diagnose_text(
        "Exception has occurred: ScannerError\n"
        "mapping values are not allowed here\n"
        '  in "/home/u/QueryDet/models/config.py", line 5, column 29\n'
        '  File "/home/u/QueryDet/train_tools/coco_train.py", line 135, in setup\n'
        "    cfg.merge_from_file(args.config_file)\n"
    )
    assert (d.cause, d.detail) == ("user_exception", "ScannerError")


def test_a_debuggers_header_of_an_uncatalogued_class_leaves_the_traceback_to_decide():
    # open-mmlab's mcnc thread shape: the header names RuntimeError alone; the traceback's own
    # last line says torch.load could not read the checkpoint.
    d = diagnose_text(
        "Exception has occurred: RuntimeError\n"
        "PytorchStreamReader failed reading zip archive: failed finding central directory\n"
        '  File "/home/u/code/main_align.py", line 343, in <module>\n'
        "    checkpoint = torch.load(args.checkpoint)\n"
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory\n"
    )
    assert d.cause == "model_loading"


def test_transformers_hub_wordings_are_model_loading_not_the_frame_that_raised_them():
    # transformers/utils/hub.py cached_file's EnvironmentError wordings of huggingface_hub's
    # classes, and configuration_utils' and modeling_utils' own: each read framework before.
    for text in (
        "OSError: We couldn't connect to 'https://huggingface.co' to load this file, couldn't "
        "find it in the cached files and it looks like bert-base-uncased is not the path to a "
        "directory containing a file named config.json.",
        "OSError: You are trying to access a gated repo.",
        "OSError: v2 is not a valid git identifier (branch name, tag name or commit id) that "
        "exists for this model name.",
        "OSError: Can't load the configuration of 'Qwen/Qwen3-Embedding-0.6B'. If you were "
        "trying to load it from 'https://huggingface.co/models', make sure you don't have a "
        "local directory with the same name.",
        "OSError: Can't load the model for 'openai/whisper-large'. If you were trying to load "
        "it from 'https://huggingface.co/models', make sure you don't have a local directory "
        "with the same name.",
        "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
        "https://huggingface.co/meta-llama/Llama-2-7b-hf/resolve/main/config.json",
        "huggingface_hub.errors.HfHubHTTPError: 403 Forbidden: Please enable access to public "
        "gated repositories in your fine-grained token settings to view this repository.",
    ):
        d = diagnose_text(
            '  File "/opt/conda/lib/python3.10/site-packages/transformers/utils/hub.py", line '
            "398, in cached_file\n"
            "    raise EnvironmentError(\n" + text + "\n"
        )
        assert d.cause == "model_loading", text


_DATALOADER_RERAISE = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 88, in <module>\n'
    "    for batch in loader:\n"
    '  File "/opt/conda/lib/python3.10/site-packages/torch/_utils.py", line 694, in reraise\n'
    "    raise exception\n"
    "KeyError: Caught KeyError in DataLoader worker process 0.\n"
    "Original Traceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/_utils/fetch.py", line 51, '
    "in fetch\n"
    "    data = [self.dataset[idx] for idx in possibly_batched_index]\n"
)


def test_a_reraised_worker_exception_is_decided_by_the_original_traceback():
    # torch/_utils.py ExceptionWrapper: "Caught X in DataLoader worker process N." then the
    # worker's own traceback; its frames decide (docs/failure-taxonomy.md), not reraise's.
    d = diagnose_text(
        _DATALOADER_RERAISE + '  File "/home/u/project/data.py", line 40, in __getitem__\n'
        "    label = self.labels[name]\n"
        "KeyError: 'img_0042'\n"
    )
    assert (d.cause, d.detail) == ("user_exception", "KeyError")
    d = diagnose_text(
        _DATALOADER_RERAISE
        + '  File "/opt/conda/lib/python3.10/site-packages/torchvision/io/image.py", line 80, '
        "in decode_jpeg\n"
        "RuntimeError: Invalid data passed to decode_jpeg\n"
    )
    assert (d.cause, d.detail) == ("framework_exception", "RuntimeError")


def test_gcs_resumable_media_and_fsspec_timeouts_are_the_stores():
    frame = (
        "Traceback (most recent call last):\n"
        '  File "/opt/conda/lib/python3.10/site-packages/torch/serialization.py", line 850, in '
        "save\n"
    )
    d = diagnose_text(
        frame + "google.resumable_media.common.InvalidResponse: ('Request failed with status "
        "code', 503, 'Expected one of', <HTTPStatus.OK: 200>)\n"
    )
    assert d.cause == "object_storage"
    # A refusal (403) is not the store being down: no catalogued cause.
    assert (
        exception_cause(
            "google.resumable_media.common.InvalidResponse: ('Request failed with status code', "
            "403, 'Expected one of', <HTTPStatus.OK: 200>)"
        )
        is None
    )
    d = diagnose_text(
        frame.replace("torch/serialization.py", "gcsfs/core.py")
        + "fsspec.exceptions.FSTimeoutError\n"
    )
    assert d.cause == "object_storage"


_LAUNCHER_CHILD_FAILED = (
    '  File "/opt/conda/lib/python3.10/site-packages/accelerate/commands/launch.py", line 637, '
    "in simple_launcher\n"
    "    raise subprocess.CalledProcessError(returncode=process.returncode, cmd=cmd)\n"
    "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', 'train.py']' returned "
    "non-zero exit status 1.\n"
)


def test_a_launchers_called_process_error_reports_its_child_and_names_no_cause():
    # accelerate's, torch.distributed.launch's and DeepSpeed's launchers raise it when the
    # training process exits non-zero: the child's own error is the cause.
    assert diagnose_text(_LAUNCHER_CHILD_FAILED).cause == "unknown"
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/train.py", line 12, in <module>\n'
        "    import wandb\n"
        "ModuleNotFoundError: No module named 'wandb'\n" + _LAUNCHER_CHILD_FAILED
    )
    assert (d.cause, d.detail) == ("user_exception", "ModuleNotFoundError")
    # The script's own subprocess call failing stays the script's.
    d = diagnose_text(
        '  File "/home/u/prepare.py", line 30, in main\n'
        "    subprocess.run(cmd, check=True)\n"
        "subprocess.CalledProcessError: Command '['git', 'rev-parse', 'HEAD']' returned "
        "non-zero exit status 128.\n"
    )
    assert d.cause == "user_exception"


def test_a_model_folder_without_its_weights_is_model_loading_with_no_frame_to_read():
    for text in (
        "OSError: Error no file named pytorch_model.bin, model.safetensors, tf_model.h5, "
        "model.ckpt.index or flax_model.msgpack found in directory /ckpt/run7.",
        "OSError: Could not locate model-00002-of-00004.safetensors inside "
        "meta-llama/Llama-2-7b-hf.",
    ):
        assert diagnose_text(text + "\n").cause == "model_loading", text


def test_a_role_package_run_from_its_source_checkout_keeps_its_role():
    # datasets installed editable from its checkout (PyPA's src layout), as from site-packages.
    d = diagnose_text(
        "Traceback (most recent call last):\n"
        '  File "/home/u/datasets/src/datasets/builder.py", line 1997, in _prepare_split_single\n'
        "ValueError: Couldn't cast the data files of /data/sft\n"
    )
    assert d.cause == "dataset_loading"


def test_an_exception_under_docker_composes_service_prefix_is_read():
    # docker compose prefixes each line with the service's container ("algo-1-cf199_1  | ",
    # v1's project_service_index; v2 joins with "-"), as a SageMaker-style container prints.
    for prefix in ("algo-1-cf199_1  | ", "trainer-worker-2      | "):
        d = diagnose_text(
            prefix + "pytorch_lightning.utilities.exceptions.MisconfigurationException: No "
            "`train_dataloader()` method defined.\n"
        )
        assert d.cause == "user_exception", prefix


def test_tensorflows_path_errors_are_the_jobs_path_not_the_framework():
    # tf.errors' NotFoundError and PermissionDeniedError are ENOENT and EACCES on a path the
    # job names (FileNotFoundError and PermissionError's counterparts): read framework before.
    frame = (
        "Traceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.10/dist-packages/tensorflow/python/eager/execute.py", '
        "line 53, in quick_execute\n"
    )
    for text in (
        "tensorflow.python.framework.errors_impl.NotFoundError: /data/train-00000.tfrecord; No "
        "such file or directory",
        "tensorflow.python.framework.errors_impl.PermissionDeniedError: /ckpt/model.ckpt-100; "
        "Permission denied",
    ):
        assert diagnose_text(frame + text + "\n").cause == "user_exception", text


def test_a_local_model_path_taken_for_a_repo_id_is_model_loading():
    # microsoft/LMOps#71's shape: the folder is not there, so the Hub validates it as a repo id
    # (read user_exception before: the catalog had HFValidationError as the job's argument).
    d = diagnose_text(
        "huggingface_hub.utils._validators.HFValidationError: Repo id must be in the form "
        "'repo_name' or 'namespace/repo_name': '/ckpt/opt-1.3B'. Use `repo_type` argument if "
        "needed.\n"
    )
    assert d.cause == "model_loading"


def test_jupyter_tracebacks_are_read_by_their_frames():
    # IPython 8 ("File ~/...py:3200, in Class.func(...)") and 7 ("/path.py in func(...)")
    # frames, and a notebook cell's own frame ("Cell In[12], line 5", "<ipython-input-...>"):
    # the innermost decides as a plain traceback's does.
    d = diagnose_text(
        "OSError                                   Traceback (most recent call last)\n"
        "Cell In[12], line 5\n"
        "----> 5 model = AutoModel.from_pretrained(path)\n"
        "File ~/miniconda3/envs/x/lib/python3.10/site-packages/transformers/modeling_utils.py"
        ":3200, in PreTrainedModel.from_pretrained(cls, pretrained_model_name_or_path)\n"
        "   3199 else:\n"
        "-> 3200     raise EnvironmentError(msg)\n"
        "OSError: /ckpt/run7 is not a checkpoint this version can read\n"
    )
    assert d.cause == "model_loading"
    d = diagnose_text(
        "ValueError                                Traceback (most recent call last)\n"
        "<ipython-input-48-6a7b3e847019> in <cell line: 7>()\n"
        "----> 7 out = model(batch)\n"
        "/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py in _call_impl(self, "
        "*input, **kwargs)\n"
        "-> 1501         return forward_call(*args, **kwargs)\n"
        "ValueError: Expected input batch_size (32) to match target batch_size (16).\n"
    )
    assert d.cause == "framework_exception"
    d = diagnose_text(
        "KeyError                                  Traceback (most recent call last)\n"
        "<ipython-input-5-1f2e3d4c5b6a> in <module>\n"
        "----> 3 label = labels[name]\n"
        "KeyError: 'img_0042'\n"
    )
    assert d.cause == "user_exception"


def test_mosaicml_streamings_download_failures_are_the_stores():
    # streaming/base/storage/download.py: a shard from azure:// that failed every retry, and a
    # rank that waited out another worker's download of its shard (read framework before).
    for text in (
        "RuntimeError: Failed to download azure://container/mds/shard.00017.mds -> "
        "/tmp/mds/shard.00017.mds. Got errors:",
        "TimeoutError: Waited longer than 60s for other worker to download "
        "/tmp/mds/shard.00017.mds.",
    ):
        d = diagnose_text(
            '  File "/usr/lib/python3/dist-packages/streaming/base/storage/download.py", line '
            "412, in download_or_wait\n" + text + "\n"
        )
        assert d.cause == "object_storage", text


def test_lightnings_deadlock_report_gives_way_to_the_ranks_own_error():
    # lightning/pytorch/strategies/ddp.py reconciliate_processes: "DeadLock detected from rank:
    # N" followed by the rank's own traceback, whose last line decides.
    d = diagnose_text(
        "pytorch_lightning.utilities.exceptions.DeadlockDetectedException: DeadLock detected "
        "from rank: 1\n"
        " Traceback (most recent call last):\n"
        '  File "/home/u/project/model.py", line 88, in training_step\n'
        "    y = batch['labels']\n"
        "KeyError: 'labels'\n"
    )
    assert (d.cause, d.detail) == ("user_exception", "KeyError")
    assert (
        diagnose_text(
            "pytorch_lightning.utilities.exceptions.DeadlockDetectedException: DeadLock "
            "detected from rank: 1\n"
        ).cause
        == "unknown"
    )
