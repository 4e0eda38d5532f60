"""Two-process runs of the doctor's callbacks for tests/test_integrations_distributed.py: what torchrun starts.

    python -m torch.distributed.run --nproc_per_node 2 --master_port PORT tests/ddp_integration_runs.py OUT CASE ...

Each rank runs the named cases one after the other (the same on every rank: each report's gather meets its
partner's), each a framework's own training with the doctor's callback on every rank, healthy or with one
distributed fault planted where the framework lets a user make it, never told to the doctor; and writes
OUT/CASE.rank<R>.json: the report's JSON and text, and what the callback logged under "doctor" on that rank.

- `hf_healthy`: the Hugging Face Trainer (the tiny BERT of tests/test_integrations.py on its token task), which
  reads torchrun's variables, wraps the model in DistributedDataParallel and gives the loader a
  DistributedSampler itself.
- `hf_out_of_sync`: the same, with a callback of the user's that changes the classifier's weights after a step
  on the main process only (guarded by `state.is_world_process_zero`, as one guards saving or logging): the
  replicas never meet again.
- `hf_gpt2_healthy`: the one-layer GPT-2 of tests/test_integrations_sequence.py on Python's own source, padded
  batches labelled -100 under the mask: a causal language model, whose loss divides its sum by the Trainer's
  num_items_in_batch (counted over both ranks), where BERT's classifier leaves it unused.
- `lightning_healthy`: a Lightning fit of the digits MLP, `Trainer(accelerator="cpu", devices=2,
  strategy="ddp")`, launched by torchrun (Lightning reads its variables and launches nothing of its own), with
  Lightning's DistributedSampler.
- `lightning_no_sampler`: `use_distributed_sampler=False` with a plain shuffling loader, every rank seeded alike
  (seed_everything, as a script seeds every process): every rank trains on the same batches.
- `lightning_gave_up`: healthy, but rank 1's loader gives dicts under keys the doctor does not know as the targets:
  rank 1's doctor gives up at its first batch, and rank 0's report must not wait for it.

The Lightning cases join a process group made here with a short timeout (Lightning then makes none): a gather
that one rank never meets fails in two minutes, not the default thirty.
"""

import json
import logging
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true"}.items():
    os.environ.setdefault(name, value)

from test_integrations import (  # noqa: E402 (the variables above are read when transformers is first imported)
    IMAGES,
    LABELS,
    VAL_IMAGES,
    VAL_LABELS,
    Tokens,
    lightning_module,
    tiny_bert,
    token_validation,
)

HF_STEPS, LIGHTNING_STEPS = 100, 100
CHANGED_AT = 10  # the step after which the user's callback changes rank 0's weights


class Logged(logging.Handler):
    """What the logger "doctor" logs on this rank, as (level, message)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((record.levelname, record.getMessage()))


def hf_run(case: str, out: Path):
    import transformers

    from doctor.integrations.huggingface import DoctorTrainerCallback

    if case == "hf_gpt2_healthy":
        from test_integrations_sequence import BATCH, gpt2, language_data

        train, validation = language_data(HF_STEPS * 2 * BATCH)
        model, batch, rate = gpt2(transformers), BATCH, 3e-3
    else:
        train, validation = Tokens(2048, seed=0), token_validation()
        model, batch, rate = tiny_bert(transformers), 32, 1e-3

    class ChangedOnTheMainProcess(transformers.TrainerCallback):
        """A user's callback that rescales the classifier after a step, on the main process only."""

        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == CHANGED_AT and state.is_world_process_zero:
                with torch.no_grad():
                    model.classifier.weight.mul_(0.5)

    doctor = DoctorTrainerCallback(validation=validation)
    callbacks = [doctor] + ([ChangedOnTheMainProcess()] if case == "hf_out_of_sync" else [])
    args = transformers.TrainingArguments(
        output_dir=str(out / case),
        max_steps=HF_STEPS,
        per_device_train_batch_size=batch,
        learning_rate=rate,
        lr_scheduler_type="constant",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        disable_tqdm=True,
        seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train)
    for callback in callbacks:
        trainer.add_callback(callback)
    trainer.train()
    return doctor


class Unlabelled(Dataset):
    """The digits as dicts whose keys the doctor does not know as inputs and targets: it cannot read the batch."""

    def __len__(self):
        return len(LABELS)

    def __getitem__(self, index):
        return {"image": IMAGES[index], "digit": LABELS[index]}


def lightning_run(case: str, out: Path):
    import lightning.pytorch as pl

    from doctor.integrations.lightning import DoctorCallback

    pl.seed_everything(0, verbose=False)  # every rank alike, as a script seeds every process
    digits = lightning_module(pl, 1e-2)

    class Digits(digits):  # also takes the dicts of `lightning_gave_up`'s rank 1
        def training_step(self, batch, index):
            return super().training_step((batch["image"], batch["digit"]) if isinstance(batch, dict) else batch, index)

    doctor = DoctorCallback(nn.CrossEntropyLoss(), validation=[(VAL_IMAGES, VAL_LABELS)])
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_steps=LIGHTNING_STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[doctor],
        use_distributed_sampler=case != "lightning_no_sampler",
    )
    data = Unlabelled() if case == "lightning_gave_up" and dist.get_rank() == 1 else TensorDataset(IMAGES, LABELS)
    loader = DataLoader(data, batch_size=64, shuffle=True, drop_last=True)
    trainer.fit(Digits(), loader)
    return doctor


def main(out: Path, cases: list[str]) -> None:
    torch.set_num_threads(1)
    logged = Logged()
    logging.getLogger("doctor").addHandler(logged)
    logging.getLogger("doctor").setLevel(logging.INFO)
    if any(case.startswith("lightning_") for case in cases):
        dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    for case in cases:
        logged.records = []
        doctor = (hf_run if case.startswith("hf_") else lightning_run)(case, out)
        rank = dist.get_rank()
        result = {"report": doctor.report_dict(), "text": str(doctor.report), "logged": logged.records}
        if doctor.report is not None:
            result["measured"] = {name: doctor.report.measurements.get(name) for name in ("task", "target_shift")}
        (out / f"{case}.rank{rank}.json").write_text(json.dumps(result))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
    # Every case is written and the group destroyed. Past here, the interpreter's own teardown after several
    # Lightning fits sometimes aborted a rank ("terminate called without an active exception", in a few launches
    # of several under pytest, none outside it): nothing of the cases', so it is skipped.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
