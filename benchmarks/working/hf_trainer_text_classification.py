"""Hugging Face run_glue: the Trainer fine-tunes a BERT sequence classifier on a two-class sentence task.

Design kept (examples/pytorch/text-classification/run_glue.py): a BertForSequenceClassification (what
AutoModelForSequenceClassification builds for a BERT config) with num_labels 2, its own cross-entropy loss on the
[CLS] pooled output; every sentence tokenized as [CLS] tokens [SEP], truncated and padded to max_seq_length
(pad_to_max_length, the default) with an attention mask and token type ids, batched by default_data_collator
("label" becomes "labels"); the Trainer with TrainingArguments' defaults, which run_glue keeps unless told
otherwise: AdamW (torch, fused) at 5e-5, betas (0.9, 0.999), eps 1e-8, no weight decay, a linear decay to 0 with
no warmup, gradient clipping at norm 1.0, batch 8, 3 epochs, the training set shuffled each epoch; do_eval
scores the validation set (batch 8) after training: it is the doctor's validation. The doctor's Hugging Face
callback, DoctorTrainerCallback, in its quick-start form (docs/doctor.md): the default loss (cross entropy on
the logits) and validation=.
Changed: the model's weights, the tokenizer and the data. No pretrained checkpoint (nothing may be downloaded):
a BERT built from a BertConfig with random weights, 2 layers, hidden size 64, 2 attention heads, intermediate
size 256 (BERT's 4x), 128 positions, and a byte-level vocabulary of 260 (0 [PAD], 1 [CLS], 2 [SEP], 3 unused,
4..259 the bytes). The task, in place of a GLUE single-sentence task such as SST-2: is a line of Python source a
comment or code? Lines of the standard library's own source (common.stdlib_bytes, split by file, so validation
lines come from files never trained on), blank lines dropped, trailing spaces stripped; label 1 when the line's
first non-blank character is "#", else 0; equal numbers of each class drawn (comments are a tenth of the lines;
SST-2 is near balanced). For CPU time: max_seq_length 128 -> 32 (30 bytes of a line; the median line has 37;
under 1% of lines are indented so deep that the first character is cut), 3600 training lines (a GLUE set has
2.5k to 400k; 1350 steps) and 400 validation lines. With 1200 training lines (450 steps) the random weights had
not left chance before the linear schedule ran out (seen in a plain loop by the model's own accuracy: at 5e-5 it
sits at chance for 300 to 400 steps, then reaches 99%). No model_factory is handed to the callback: with one, the
doctor's capacity fit (200 full-batch passes over 1024 examples) and memorization (900 steps) would take several
times the run's budget of about 60 s on one thread. The Trainer's seed (run_glue's --seed, default 42) is the
benchmark's seed. Left out: saving the model, metrics and model card after training, and the Trainer's logging
and progress bar (they change no step).
"""

import random
import tempfile

import torch
from common import epochs, stdlib_bytes
from torch import nn
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

SOURCE = (
    "huggingface/transformers examples/pytorch/text-classification/run_glue.py"
    " @ 242e7fc66cfcb271496bf5a6d207db90c9b96817"
)
MAX_SEQ_LENGTH, BATCH_SIZE, EVAL_BATCH_SIZE, EPOCHS = 32, 8, 8, 3
TRAIN_LINES, VALIDATION_LINES = 3600, 400
PAD, CLS, SEP, FIRST_BYTE = 0, 1, 2, 4
CONFIG = dict(
    vocab_size=FIRST_BYTE + 256,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=256,
    max_position_embeddings=128,
    num_labels=2,
)
loss = nn.CrossEntropyLoss()  # what BertForSequenceClassification computes for integer labels


def labelled_lines(split: str, count: int) -> list[tuple[bytes, int]]:
    """`count` non-blank source lines of one split, half comments (label 1) and half code (label 0), shuffled."""
    source = bytes(stdlib_bytes(split, 10**9).tolist())
    lines = [line.rstrip() for line in source.split(b"\n") if line.strip()]
    comments = [line for line in lines if line.lstrip().startswith(b"#")]
    code = [line for line in lines if not line.lstrip().startswith(b"#")]
    draw = random.Random(f"{split}-{torch.initial_seed()}")  # the benchmark's seed
    chosen = [(line, 1) for line in draw.sample(comments, count // 2)] + [
        (line, 0) for line in draw.sample(code, count - count // 2)
    ]
    draw.shuffle(chosen)
    return chosen


def encode(line: bytes, label: int) -> dict[str, torch.Tensor]:
    """One example as run_glue's tokenizer call makes it: [CLS] bytes [SEP], truncated and padded to max length."""
    ids = [CLS, *(FIRST_BYTE + b for b in line[: MAX_SEQ_LENGTH - 2]), SEP]
    padding = MAX_SEQ_LENGTH - len(ids)
    return {
        "input_ids": torch.tensor(ids + [PAD] * padding),
        "token_type_ids": torch.zeros(MAX_SEQ_LENGTH, dtype=torch.int64),
        "attention_mask": torch.tensor([1] * len(ids) + [0] * padding),
        "label": torch.tensor(label),
    }


def dataset(split: str, count: int) -> list[dict[str, torch.Tensor]]:
    return [encode(line, label) for line, label in labelled_lines(split, count)]


def model() -> nn.Module:
    return BertForSequenceClassification(BertConfig(**CONFIG))


def batches():
    train_set = dataset("train", TRAIN_LINES)
    return [default_data_collator(train_set[i : i + BATCH_SIZE]) for i in range(0, len(train_set), BATCH_SIZE)]


def validation():
    held_out = dataset("validation", VALIDATION_LINES)
    return [default_data_collator(held_out[i : i + EVAL_BATCH_SIZE]) for i in range(0, len(held_out), EVAL_BATCH_SIZE)]


def optimizer(params):
    return torch.optim.AdamW(params, lr=5e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)


class KeepDoctor(TrainerCallback):
    """Keeps the Doctor the doctor's callback builds when training begins, to hand it back to the benchmark."""

    def __init__(self, watching):
        self.watching, self.doctor = watching, None

    def on_train_begin(self, args, state, control, **kwargs):
        self.doctor = self.watching.doctor


def train(Doctor):
    from doctor.integrations.huggingface import DoctorTrainerCallback
    from doctor.refusals import CannotJudge

    # The quick start's callback with the held-out lines as validation; no model_factory (see the docstring).
    watching = DoctorTrainerCallback(validation=getattr(Doctor, "keywords", {}).get("validation"))
    keep = KeepDoctor(watching)
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            per_device_train_batch_size=BATCH_SIZE,
            per_device_eval_batch_size=EVAL_BATCH_SIZE,
            num_train_epochs=epochs(EPOCHS),
            seed=torch.initial_seed() % 2**32,
            use_cpu=True,
            save_strategy="no",
            logging_strategy="no",
            report_to="none",
            disable_tqdm=True,
        )
        trainer = Trainer(
            model=model(),
            args=args,
            train_dataset=dataset("train", TRAIN_LINES),
            eval_dataset=dataset("validation", VALIDATION_LINES),
            data_collator=default_data_collator,
            callbacks=[watching, keep],
        )
        trainer.train()
        trainer.evaluate()
    if watching.report is None:
        raise CannotJudge(watching.cannot_judge or "the doctor's callback made no report")
    return keep.doctor
