"""How lines are framed: a line's message is read whatever logger, launcher or collector wraps
it (webapp/failures/diagnosis/lines.py). Each test diagnoses a whole log, as a user would.
"""

from __future__ import annotations

import pytest

from webapp.failures.diagnosis import diagnose_text

# A user's own bug: no phrase rule names it, only the structure does (the exception line
# starts the message and its innermost frame is the user's script).
USER_TRACEBACK = """Traceback (most recent call last):
  File "/home/u/train.py", line 10, in main
    lr = cfg["lr"]
KeyError: 'lr'
"""

# Each framing as its source prints it, before every line of the traceback.
FRAMINGS = {
    # Python logging: the cookbook's "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
    "logging_dash": "2024-01-01 12:00:00,123 - __main__ - ERROR - ",
    # transformers' example scripts: "%(asctime)s - %(levelname)s - %(name)s - ", US date
    "hf_examples": "01/01/2024 12:00:00 - ERROR - __main__ - ",
    # basicConfig's default "%(levelname)s:%(name)s:%(message)s"
    "basic_config": "ERROR:root:",
    # DeepSpeed's logger
    "deepspeed": "[2024-01-01 12:00:00,123] [ERROR] [engine.py:12:step] ",
    # loguru's default format
    "loguru": "2024-01-01 12:00:00.123 | ERROR    | train:main:12 - ",
    # fairseq's
    "fairseq": "2024-01-01 12:00:00 | ERROR | fairseq.trainer | ",
    # hydra's job logging
    "hydra": "[2024-01-01 12:00:00,123][__main__][ERROR] - ",
    # transformers' "[%(levelname)s|%(filename)s:%(lineno)s] %(asctime)s >> "
    "hf_levelfile": "[ERROR|trainer.py:123] 2024-01-01 12:00:00,123 >> ",
    # a stamp, then a tab-separated level
    "tabbed": "2024-01-01 12:00:00,123\tERROR\t",
    # a stamp and a bracketed level; a time of day and a level
    "stamp_bracket": "2024-01-01 12:00:00.123 [ERROR] ",
    "clock": "[12:00:00] ERROR ",
    # vLLM's logger and NeMo's
    "vllm": "ERROR 01-01 12:00:00 engine.py:12] ",
    "nemo": "[NeMo E 2024-01-01 12:00:00 exp_manager:123] ",
    # kubectl logs --prefix, with and without --timestamps; the kubelet's CRI log file
    "kubectl": "[pod/trainer-0/pytorch] ",
    "kubectl_ts": "[pod/trainer-0/pytorch] 2024-01-01T12:00:00.123456789Z ",
    "cri": "2024-01-01T12:00:00.123456789Z stderr F ",
    # Ray's worker prefix without an actor name, and its daemon's
    "ray_pid": "(pid=123, ip=10.0.0.1) ",
    "raylet": "(raylet, ip=10.0.0.1) ",
    # Ray's Python logger, and its C++ logger as a daemon prints it
    "ray_python": "2024-01-01 12:00:00,123\tERROR worker.py:1829 -- ",
    "ray_daemon": "[2024-01-01 12:00:00,123 E 9751 9751] (raylet) node_manager.cc:3084: ",
    # Lightning's rank_zero prefix
    "lightning_rank": "[rank: 0] ",
    # a launcher over a logger: torchrun's rank, then Python logging
    "torchrun_logging": "[rank0]: 2024-01-01 12:00:00,123 - __main__ - ERROR - ",
}


@pytest.mark.parametrize("framing", sorted(FRAMINGS))
def test_user_exception_read_under_every_framing(framing: str) -> None:
    prefix = FRAMINGS[framing]
    log = "".join(prefix + line + "\n" for line in USER_TRACEBACK.splitlines())
    assert diagnose_text(USER_TRACEBACK).cause == "user_exception"  # the bare log, for reference
    assert diagnose_text(log).cause == "user_exception"


def test_lightning_rank_prefix_names_the_rank() -> None:
    log = "".join("[rank: 3] " + line + "\n" for line in USER_TRACEBACK.splitlines())
    d = diagnose_text(log)
    assert (d.cause, d.blamed_rank) == ("user_exception", 3)


def test_deepspeed_launcher_tag_still_read_where_no_exception_follows() -> None:
    # The launcher's function tag stays in the message: the silent-kill reading rests on it.
    log = "[2023-04-07 13:09:33,201] [INFO] [launch.py:318:sigkill_handler] Killing subprocess 80\n"
    assert diagnose_text(log).cause == "host_oom"


def test_level_word_without_a_stamp_is_the_message() -> None:
    # "wandb: ERROR ..." and "ERROR ..." with no stamp before are a program's own words: the
    # phrase that names W&B's connection failure is still read.
    log = "wandb: ERROR Run initialization has timed out after 90.0 sec.\n"
    assert diagnose_text(log).cause == "aux_connection"


def test_exception_group_sub_exception_read_behind_its_margin() -> None:
    # Python 3.11's exception groups print each sub-exception's traceback behind "| " (a
    # TaskGroup's failed task): the user's KeyError is the cause.
    log = """  + Exception Group Traceback (most recent call last):
  |   File "/home/u/train.py", line 20, in <module>
  |     asyncio.run(main())
  | ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "/home/u/train.py", line 10, in worker
    |     lr = cfg["lr"]
    | KeyError: 'lr'
    +------------------------------------
"""
    assert diagnose_text(log).cause == "user_exception"


# A log cut at its end ------------------------------------------------------------------------

CUT_HEAD = """Traceback (most recent call last):
  File "/home/u/train.py", line 10, in main
    loss.backward()
"""


@pytest.mark.parametrize(
    ("last_line", "cause"),
    [
        # cut inside CUDA's words for an illegal access: only the CUDA-fault rule's messages
        # begin so (the class alone read it as the user's own bug)
        ("RuntimeError: CUDA error: an illegal memory acc", "cuda_fault"),
        # the same words raised as another class, and printed without one (a C++ what())
        ("torch.AcceleratorError: CUDA error: an illegal memory a", "cuda_fault"),
        ("CUDA error: an illegal memory acc", "cuda_fault"),
    ],
)
def test_last_line_cut_inside_one_catalogued_message(last_line: str, cause: str) -> None:
    d = diagnose_text(CUT_HEAD + last_line)
    assert d.cause == cause
    assert any("last line is cut" in note for note in d.notes)


@pytest.mark.parametrize(
    "last_line",
    [
        # "CUDA error: " begins the messages of several rules (faults, ECC, launch failures)
        "RuntimeError: CUDA error: ",
        # too few of the message's own words after its class to tell which message it began
        "RuntimeError: CUDA out of mem",
    ],
)
def test_last_line_cut_where_several_messages_or_too_little_stays_unread(last_line: str) -> None:
    d = diagnose_text(CUT_HEAD + last_line)
    assert d.cause not in ("cuda_fault", "gpu_oom")
    assert not any("last line is cut" in note for note in d.notes)


def test_traceback_cut_before_its_exception_stays_unknown() -> None:
    # Only the user's frames, no exception line: nothing in the log names a cause.
    assert diagnose_text(CUT_HEAD).cause == "unknown"


def test_fairseq_oom_recovery_under_its_logger_is_gpu_oom() -> None:
    # fairseq's trainer words a caught CUDA OOM its own way, under its pipe-framed logger; the
    # run then dies in spawn's join with a bare Exception.
    log = (
        "2020-11-05 19:30:05 | WARNING | fairseq.trainer | attempting to recover from OOM in "
        "forward/backward pass\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 8, in main\n'
        "    cli_main()\n"
        "Exception: \n"
    )
    assert diagnose_text(log).cause == "gpu_oom"


def test_docker_json_file_records_read_as_the_lines_they_hold() -> None:
    # A node's /var/log/containers file under Docker's json-file driver: one JSON record per
    # printed line, the line escaped in "log" (here behind torchrun's rank tag).
    lines = [
        '{"log":"[rank3]: ' + line.replace("\\", "\\\\").replace('"', '\\"') + '\\n",'
        '"stream":"stderr","time":"2024-01-01T12:00:00.123456789Z"}'
        for line in USER_TRACEBACK.splitlines()
    ]
    d = diagnose_text("\n".join(lines) + "\n")
    assert (d.cause, d.blamed_rank) == ("user_exception", 3)


def test_json_record_holding_a_whole_traceback_still_read() -> None:
    # A structured logger's record whose message is the whole traceback: read as one-line
    # tracebacks are, not as one line.
    escaped = USER_TRACEBACK.replace('"', '\\"').replace("\n", "\\n")
    log = '{"severity": "ERROR", "message": "' + escaped + '"}\n'
    assert diagnose_text(log).cause == "user_exception"
