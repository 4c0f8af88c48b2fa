"""Trainers' own guards on non-finite numbers: the errors a training framework raises, or the
line it logs before stopping, when its loss, its predictions or its loss scaler went
non-finite. Each member is the framework's own message as its source writes it (the URL in the
table's source); rules.yaml's loss-guard rule names the table.

Frameworks read for a guard and found without one (they log the numbers and go on, which the
metrics reader of divergence.py judges instead): Hugging Face Trainer (and the trainers that
print its logged dict: LLaMA-Factory, axolotl, xtuner), apex amp (its "Gradient overflow.
Skipping step" only halves the scale), ColossalAI's DynamicGradScaler (stops at min_scale
silently), torchtitan, composer, t5x/maxtext (their loss is only logged).
"""

from __future__ import annotations

from webapp.failures.diagnosis.family_table import Member, Table

TRAINER_NONFINITE_GUARDS = Table(
    id="trainer-nonfinite-guards",
    source=(
        "detectron2's SimpleTrainer ('Loss became infinite or NaN at iteration=N!', "
        "https://github.com/facebookresearch/detectron2/blob/main/detectron2/engine/"
        "train_loop.py), its RPN ('Predicted boxes or scores contain Inf/NaN. Training has "
        "diverged.', detectron2/modeling/proposal_generator/proposal_utils.py) and Boxes.clip "
        "('Box tensor contains infinite or NaN!', detectron2/structures/boxes.py); mmcv's and "
        "mmdetection's CheckInvalidLossHook ('loss become infinite or NaN!', "
        "https://github.com/open-mmlab/mmdetection/blob/main/mmdet/engine/hooks/"
        "checkloss_hook.py) and SSDHead's asserts ('classification scores become infinite or "
        "NaN!', 'bbox predications become infinite or NaN!', mmdet/models/dense_heads/"
        "ssd_head.py); Megatron-LM's check_for_nan_in_loss_and_grad ('found NaN|Inf in local "
        "forward loss calculation', 'found NaN in local grad norm', "
        "https://github.com/NVIDIA/Megatron-LM/blob/main/pretrain_gpt.py and megatron/core/"
        "distributed/param_and_grad_buffer.py); TensorFlow's NanTensorHook ('Model diverged "
        "with loss = NaN.' then NanLossDuringTrainingError 'NaN loss during training.', "
        "tensorflow/python/training/basic_session_run_hooks.py) and Keras' TerminateOnNaN "
        "('Batch N: Invalid loss, terminating training', keras/callbacks/terminate_on_nan.py); "
        "PyTorch Lightning's EarlyStopping check_finite ('Monitored metric X = nan is not "
        "finite. Previous best value was ...', lightning/pytorch/callbacks/early_stopping.py); "
        "PaddlePaddle's FLAGS_check_nan_inf ('There are NAN or INF (num_nan=...', and the older "
        "'===ERROR: in [op=X] [tensor=Y] find nan or inf===', "
        "https://github.com/PaddlePaddle/Paddle/blob/develop/paddle/fluid/framework/details/"
        "nan_inf_utils_detail.cc, https://www.paddlepaddle.org.cn/documentation/docs/en/guides/"
        "flags/check_nan_inf_en.html); JAX's jax_debug_nans ('FloatingPointError: invalid value "
        "(nan) encountered in <primitive>', jax/_src/dispatch.py); fairseq's DynamicLossScaler "
        "('Minimum loss scale reached', fairseq/optim/dynamic_loss_scaler.py) and DeepSpeed's "
        "('Current loss scale already at minimum - cannot decrease scale anymore', "
        "deepspeed/runtime/fp16/loss_scaler.py) at their floor"
    ),
    members=(
        Member(text="Loss became infinite or NaN at iteration="),
        Member(text="Predicted boxes or scores contain Inf/NaN"),
        Member(text="Box tensor contains infinite or NaN!"),
        Member(text="loss become infinite or NaN!"),
        Member(text="classification scores become infinite or NaN!"),
        Member(text="bbox predications become infinite or NaN!"),
        Member(
            patterns=("found (NaN|Inf) in local (forward loss calculation|grad norm)",),
            anchors=(" in local ",),
        ),
        Member(text="Model diverged with loss = NaN"),
        Member(text="NaN loss during training"),
        Member(text="Invalid loss, terminating training"),
        Member(
            patterns=("Monitored metric [^ ]+ = (nan|inf|-inf) is not finite",),
            anchors=("monitored metric",),
        ),
        Member(text="There are NAN or INF (num_nan="),
        Member(patterns=(r"\] find nan or inf===",), anchors=("find nan or inf",)),
        Member(
            patterns=(r"invalid value \((nan|inf)\) encountered in",),
            anchors=(") encountered in",),
        ),
        Member(text="Minimum loss scale reached"),
        Member(text="Current loss scale already at minimum"),
    ),
    examples=(
        "AssertionError: classification scores become infinite or NaN!",
        "AssertionError: bbox predications become infinite or NaN!",
        "2022-05-27 15:51:43,674 - mmdet - INFO - loss become infinite or NaN!",
        "FloatingPointError: Predicted boxes or scores contain Inf/NaN. Training has diverged.",
        "AssertionError: Box tensor contains infinite or NaN!",
        "Runtime Error: floatingPointError: Loss became infinite or NaN at iteration=166!",
        "AssertionError: Rank 3: found NaN in local forward loss calculation. Device: 3, node: n1",
        "ERROR:tensorflow:Model diverged with loss = NaN.",
        "NanLossDuringTrainingError: NaN loss during training.",
        "Monitored metric val_loss = nan is not finite. Previous best value was 0.512. "
        "Signaling Trainer to stop.",
        "RuntimeError: (PreconditionNotMet) There are NAN or INF (num_nan=12, num_inf=0, "
        "num_zero=0) in [device=gpu:0, op=matmul_v2, tensor=linear_0.tmp_0, dtype=fp32].",
        "jax._src.source_info_util.JaxStackTraceBeforeTransformation: FloatingPointError: "
        "invalid value (nan) encountered in mul",
    ),
)
