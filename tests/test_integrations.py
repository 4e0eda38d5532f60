"""The doctor's callbacks against the real libraries: PyTorch Lightning and the Hugging Face Trainer, on the CPU.

Each gets a healthy run and a planted fault (a learning rate far too high) on a small model, and the callback
must name them as the doctor names the same runs in a plain loop (tests/test_doctor_batches.py); the loop shapes
these frameworks add (Lightning's optimizer.step(closure), gradient accumulation, a loss the framework divides
or scales) must leave the measurements right or absent. A training that raises must leave no hook of the
doctor's behind and the exception as it was; one resumed from a checkpoint must count its steps from the fit's
first and keep what only the start measured. Each library is an optional extra (`integrations` in
pyproject.toml, installed by `make setup`): where one is missing its tests skip.
"""

import json
import logging
import math
import os
import statistics
import sys
import time
from typing import ClassVar

import pytest
import torch
from conftest import ROOT
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, TensorDataset

sys.path.insert(0, str(ROOT / "examples"))
from digits_cnn import TRAIN, VAL

# The Hugging Face libraries read these when first imported: no hub, no tracker, whatever the machine has.
for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true"}.items():
    os.environ.setdefault(name, value)

# Lightning 2.6 builds torch's LeafSpec, which torch 2.13 deprecates: its warning, not the doctor's.
pytestmark = pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning")

IMAGES, LABELS = TRAIN.tensors[0].flatten(1), TRAIN.tensors[1]
VAL_IMAGES, VAL_LABELS = VAL.tensors[0].flatten(1), VAL.tensors[1]


@pytest.fixture(autouse=True)
def one_thread():
    """Models this small run fastest on one thread; two threads on two busy cores made a fit 40x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ----- PyTorch Lightning ------------------------------------------------------------------------------------------
@pytest.fixture
def pl():
    return pytest.importorskip("lightning.pytorch")


def lightning_module(pl, lr: float, outputs: int = 10, loss: nn.Module | None = None):
    """A LightningModule over the MLP of tests/test_doctor_batches.py: 64 pixels, 32 hidden units, `outputs` units.

    Its training_step computes its own loss, kept as an attribute (`self.loss`): cross-entropy unless `loss` is given.
    """

    class Digits(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, outputs))
            self.loss = nn.CrossEntropyLoss() if loss is None else loss

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, _index):
            x, y = batch
            return self.loss(self(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=lr)

    return Digits


def lightning_trainer(pl, doctor, steps: int, checkpoints=None, **trainer_kwargs):
    """A quiet CPU Trainer for `steps` optimizer steps with the doctor's callback.

    `checkpoints`: a folder to save a checkpoint to every 50 steps (else none is saved).
    """
    saving = []
    if checkpoints is not None:
        from lightning.pytorch.callbacks import ModelCheckpoint

        saving = [ModelCheckpoint(dirpath=checkpoints, every_n_train_steps=50, save_top_k=-1)]
    return pl.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=bool(saving),
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[doctor, *saving],
        **trainer_kwargs,
    )


def digit_batches():
    """The digits as whole batches of 64, shuffled.

    Whole batches indexed at once: a DataLoader over tiny tensors indexing item by item waits for data longer
    than the MLP computes, which the doctor would rightly call a starved loader.
    """
    data = TensorDataset(IMAGES, LABELS)
    return DataLoader(data, batch_size=None, sampler=BatchSampler(RandomSampler(data), 64, drop_last=True))


GIVEN = object()  # lightning_fit's default: the callback is given the loss training_step computes


def lightning_fit(pl, lr=1e-2, steps=200, batches=None, loss_fn=GIVEN, **trainer_kwargs):
    """A Lightning fit of the digits MLP under the callback; returns the callback.

    `loss_fn`: the callback's (None: none given, the loss the targets imply); by default nn.CrossEntropyLoss().
    """
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)
    module = lightning_module(pl, lr)
    doctor = DoctorCallback(
        nn.CrossEntropyLoss() if loss_fn is GIVEN else loss_fn,
        validation=[(VAL_IMAGES, VAL_LABELS)],
        model_factory=module,
        memorize_steps=100,
    )
    trainer = lightning_trainer(pl, doctor, steps, **trainer_kwargs)
    trainer.fit(module(), batches or digit_batches())
    return doctor


def test_lightning_healthy_fit_is_called_healthy_and_logged(pl, caplog):
    with caplog.at_level(logging.INFO, logger="doctor"):
        doctor = lightning_fit(pl, loss_fn=None)  # the module computes its loss: the callback needs none
    assert doctor.loss_used.checked is True  # cross-entropy reproduced training_step's loss on the first batch
    report = doctor.report
    assert report.verdict == "healthy", str(report)
    assert report.steps == 200
    m = report.measurements
    assert m["final_val_acc"] > 0.9 and m["memorize_best_loss"] < 0.1, str(report)
    # The loss as training_step computed it (ln 10 at first), one backward per step, .grad cleared by Lightning.
    assert m["first_loss"] == pytest.approx(math.log(10), rel=0.1)
    assert m["backwards_per_step"] == 1 and m["grad_carried_share"] == 0.0
    assert m["grad_kept_at_step"] == 1.0  # nothing clipped: read after the step's closure, before the update
    logged = [r for r in caplog.records if r.name == "doctor"]
    assert [r.levelno for r in logged] == [logging.INFO] and "verdict: healthy" in logged[0].getMessage()
    as_dict = doctor.report_dict()
    assert as_dict["verdict"] == "healthy" and json.loads(json.dumps(as_dict)) == as_dict


@pytest.mark.parametrize("precision", ["bf16-true", "64-true"])
def test_lightning_true_precisions_are_judged_on_batches_and_copies_converted_as_the_fit_converts_them(pl, precision):
    # Before: the doctor's first evaluation fed the float32 validation to the float64 (bfloat16) module, and its
    # RuntimeError stopped the user's fit; under bf16-true the module's own bfloat16 loss was then refused as not
    # cross-entropy (2.391 against 2.374: within bfloat16's resolution).
    doctor = lightning_fit(pl, loss_fn=None, precision=precision)
    report = doctor.report
    assert report is not None, doctor.cannot_judge
    assert report.verdict == "healthy" and report.steps == 200, str(report)
    assert report.measurements["final_val_acc"] > 0.9 and report.measurements["capacity_val_score"] > 0.9


def test_an_error_in_the_doctors_own_pass_ends_its_watch_not_the_fit(pl, caplog):
    # Validation batches the model cannot take (5 features, not 64): the doctor's own evaluation raises, in its
    # frames; the fit is the user's and goes on to its end, and the log says why there is no report, once.
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)
    module = lightning_module(pl, 1e-2)
    doctor = DoctorCallback(nn.CrossEntropyLoss(), validation=[(torch.randn(8, 5), torch.zeros(8, dtype=torch.long))])
    trainer = lightning_trainer(pl, doctor, 20)
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer.fit(module(), digit_batches())
    assert trainer.global_step == 20 and doctor.report is None
    assert doctor.cannot_judge.startswith("the doctor's own code raised RuntimeError: mat1 and mat2 shapes")
    assert [r.getMessage()[:40] for r in caplog.records if r.name == "doctor"] == [
        "doctor: cannot judge this run: the docto"
    ]


@pytest.mark.slow
def test_lightning_bf16_mixed_on_the_cpu_is_judged_as_in_fp32(pl):
    doctor = lightning_fit(pl, loss_fn=None, precision="bf16-mixed")
    report = doctor.report
    assert report is not None and report.verdict == "healthy" and report.steps == 200, str(report)
    assert report.measurements["first_loss"] == pytest.approx(math.log(10), rel=0.1)


def test_lightning_fit_with_a_rate_far_too_high_is_named_and_its_report_shown_once(pl, capsys):
    # A user's script: logging to stderr (logging.basicConfig), and the report printed. The report's text must
    # appear once: the callback logs the verdict and where to see the report, not the report.
    shown = logging.StreamHandler(sys.stderr)
    logging.getLogger("doctor").addHandler(shown)
    try:
        doctor = lightning_fit(pl, lr=0.5)
        print(doctor.report)
    finally:
        logging.getLogger("doctor").removeHandler(shown)
    assert doctor.report.verdict == "lr_too_high", str(doctor.report)
    assert doctor.report_dict()["verdict"] == "lr_too_high"
    # The advice names Lightning's own setting, after the plain loop's.
    assert doctor.report.findings[0].next_step.endswith(
        "in Lightning: the rate configure_optimizers() gives, 10x smaller (Tuner(trainer).lr_find(model) proposes one)"
    )
    out, err = capsys.readouterr()
    text = out + err
    assert text.count(str(doctor.report)) == 1 and text.count("is a bigger machine the answer?") == 1
    logged = [line for line in err.splitlines() if line.startswith("doctor: ")]
    assert logged == [
        "doctor: verdict: lr_too_high  (from 200 training steps); the findings and next steps: print(callback.report),"
        " as JSON: callback.report_dict()"
    ]


def test_lightning_a_relu_on_the_logits_in_training_step_is_read_where_the_loss_gets_them(pl):
    # Lightning's backbone example: forward() returns logits, training_step puts torch.relu on them before its
    # loss. The callback hands the doctor the loss detached; the loss's own inputs are what is judged.
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)

    class ReluInTheStep(lightning_module(pl, 1e-2)):
        def training_step(self, batch, _index):
            x, y = batch
            return nn.functional.cross_entropy(torch.relu(self(x)), y)

    doctor = DoctorCallback(nn.CrossEntropyLoss(), validation=[(VAL_IMAGES, VAL_LABELS)])
    lightning_trainer(pl, doctor, 100).fit(ReluInTheStep(), digit_batches())
    report = doctor.report
    assert report.verdict == "clamped_logits", str(report)
    assert report.measurements["loss_read"] == "cross_entropy" and report.measurements["logit_floor_share"] > 0.05


def task_module(pl, kind: str):
    """A LightningModule of one task over the digits' pixels, whose training_step computes `kind`'s loss itself."""
    outputs, targets, loss = {
        "multiclass": (10, LABELS, nn.CrossEntropyLoss()),
        "binary": (1, (LABELS >= 5).float()[:, None], nn.BCEWithLogitsLoss()),
        "multilabel": (3, torch.stack([LABELS % 2, LABELS >= 5, LABELS % 3 == 0], 1).float(), nn.BCEWithLogitsLoss()),
        "regression": (1, LABELS.float()[:, None] / 9, nn.MSELoss()),
        "label smoothing": (10, LABELS, nn.CrossEntropyLoss(label_smoothing=0.1)),
    }[kind]

    batches = DataLoader(TensorDataset(IMAGES, targets), batch_size=64, shuffle=True)
    return lightning_module(pl, 1e-2, outputs, loss)(), batches


@pytest.mark.parametrize(
    ("kind", "evaluated_with"),
    [
        ("multiclass", "cross-entropy on the logits"),
        ("binary", "binary cross-entropy on the logits"),
        ("multilabel", "binary cross-entropy on the logits"),
        ("regression", "mean squared error"),
    ],
)
def test_lightning_without_loss_fn_evaluates_with_the_loss_the_targets_imply(pl, caplog, kind, evaluated_with):
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)
    doctor = DoctorCallback()
    module, batches = task_module(pl, kind)
    with caplog.at_level(logging.INFO, logger="doctor"):
        lightning_trainer(pl, doctor, 20).fit(module, batches)
    assert doctor.report is not None, doctor.cannot_judge
    assert doctor.loss_used.checked is True and doctor.report.measurements["task"] == kind
    # The doctor's evaluation loss on the last batches is training_step's loss, on the same scale as the first.
    m = doctor.report.measurements
    assert math.isfinite(m["final_train_loss"]) and m["final_train_loss"] < m["first_loss"]
    logged = [r.getMessage() for r in caplog.records if r.name == "doctor"]
    assert (
        len(logged) == 1 and f"evaluated with {evaluated_with}, the loss the targets imply (it reproduced" in logged[0]
    )


def test_lightning_without_loss_fn_refuses_a_loss_it_cannot_reproduce_and_the_fit_goes_on(pl, caplog):
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)
    doctor = DoctorCallback()
    module, batches = task_module(pl, "label smoothing")
    trainer = lightning_trainer(pl, doctor, 10)
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer.fit(module, batches)
    assert trainer.global_step == 10 and doctor.report is None
    assert doctor.cannot_judge.startswith("no loss_fn was given, and the loss training computed on the first batch (")
    assert "is not cross-entropy on the logits (" in doctor.cannot_judge and doctor.cannot_judge.endswith("loss_fn=...")
    assert [r.getMessage() for r in caplog.records if r.name == "doctor"] == [
        f"doctor: cannot judge this run: {doctor.cannot_judge}"
    ]


def test_lightning_clipping_inside_the_closure_is_read_as_in_a_plain_loop(pl):
    # Without a GradScaler Lightning runs backward and clips inside optimizer.step(closure): the step is read after
    # the closure, so clipping to a norm of 1e-3 keeps 1e-3 / (the norm after backward), accumulating or not.
    for accumulate in (1, 2):
        clipped = lightning_fit(pl, steps=100, gradient_clip_val=1e-3, accumulate_grad_batches=accumulate)
        m = clipped.report.measurements
        assert clipped.report.verdict == "over_clipped", str(clipped.report)
        assert m["clipped_step_share"] == 1.0 and m["backwards_per_step"] == accumulate
        expected = 1e-3 / statistics.median(m["grad_norm_curve"])  # the census reads the norm after backward
        assert m["grad_kept_at_step"] == pytest.approx(expected, rel=0.5)
    m = clipped.report.measurements
    # Lightning divides the loss by accumulate_grad_batches before backward: the doctor records it as computed.
    assert m["first_loss"] == pytest.approx(math.log(10), rel=0.1)


def test_lightning_16_mixed_hands_its_grad_scaler_to_the_doctor(pl):
    # "16-mixed" as on a GPU, on the CPU: float16 autocast and a GradScaler. The closure then runs before
    # optimizer.step(), as in a plain loop, so clipping is read even while accumulating.
    from lightning.pytorch.plugins.precision import MixedPrecision

    amp = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    doctor = lightning_fit(pl, steps=100, gradient_clip_val=1e-3, accumulate_grad_batches=2, plugins=[amp])
    m = doctor.report.measurements
    assert doctor.report.verdict == "over_clipped", str(doctor.report)
    assert m["amp_scale_last"] == 65536.0 and m["amp_skipped_share"] == 0.0 and m["backwards_per_step"] == 2
    # Lightning hands on_before_backward the loss divided by 2 and times 65536: taken off both.
    assert m["first_loss"] == pytest.approx(math.log(10), rel=0.1)


def test_lightning_batches_the_doctor_cannot_read_leave_the_fit_alone(pl, caplog):
    class Unlabelled(Dataset):  # dicts with no targets key the doctor knows: it cannot tell what is predicted
        def __len__(self):
            return 256

        def __getitem__(self, index):
            return {"image": IMAGES[index], "digit": LABELS[index]}

    class DictModule(lightning_module(pl, 1e-2)):
        def training_step(self, batch, _index):
            return self.loss(self(batch["image"]), batch["digit"])

    from doctor.integrations.lightning import DoctorCallback

    doctor = DoctorCallback(nn.CrossEntropyLoss())
    trainer = lightning_trainer(pl, doctor, 20)
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer.fit(DictModule(), DataLoader(Unlabelled(), batch_size=32))
    assert trainer.global_step == 20  # the fit ran to its end without the doctor
    assert doctor.report is None and "targets key" in doctor.cannot_judge
    assert doctor.report_dict() == {"verdict": None, "cannot_judge": doctor.cannot_judge}
    assert any("cannot judge this run" in r.getMessage() for r in caplog.records)


def test_lightning_training_step_that_bypasses_the_module_is_warned_of(pl, caplog):
    class Bypassing(lightning_module(pl, 1e-2)):
        def training_step(self, batch, _index):
            x, y = batch
            return self.loss(self.net(x), y)  # not self(x): the doctor's forward hooks on the module never fire

    from doctor.integrations.lightning import DoctorCallback

    doctor = DoctorCallback(nn.CrossEntropyLoss())
    trainer = lightning_trainer(pl, doctor, 10)
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer.fit(Bypassing(), DataLoader(TensorDataset(IMAGES, LABELS), batch_size=64))
    assert any("did not call the LightningModule itself" in r.getMessage() for r in caplog.records)
    assert doctor.report is not None  # judged all the same, on what the other hooks measured


# ----- Hugging Face transformers -------------------------------------------------------------------------------------
VOCAB, LENGTH, CLASSES = 64, 16, 4


def token_task(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences whose class is the group that half of their tokens come from (a bag of words a small BERT learns).

    Token 1 opens each sequence (BERT's pooler reads the first position); the rest are drawn half from the
    class's own 8 tokens (ids 4 + 8c to 11 + 8c) and half from all 60.
    """
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (n,), generator=generator)
    anything = torch.randint(4, VOCAB, (n, LENGTH), generator=generator)
    own = 4 + 8 * labels[:, None] + torch.randint(0, 8, (n, LENGTH), generator=generator)
    ids = torch.where(torch.rand(n, LENGTH, generator=generator) < 0.5, own, anything)
    ids[:, 0] = 1
    return ids, labels


class Tokens(Dataset):
    """The token task as a Trainer dataset: one dict per example, as a tokenizer's output with its labels."""

    def __init__(self, n: int, seed: int):
        self.ids, self.labels = token_task(n, seed)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[index]}


@pytest.fixture
def hf():
    return pytest.importorskip("transformers")


def tiny_bert(hf, model_class=None):
    """A one-layer BERT classifier built from its config: 32 wide, 2 heads, nothing downloaded."""
    torch.manual_seed(0)
    model_class = model_class or hf.BertForSequenceClassification
    config = hf.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=CLASSES,
    )
    return model_class(config)


def token_validation() -> list[dict]:
    ids, labels = token_task(256, seed=99)
    return [{"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}]


def hf_trainer(hf, tmp_path, model, doctor, lr=1e-3, steps=300, train=None, **training_args):
    """A quiet CPU Trainer of `model` on the token task (or `train`) with the doctor's callback, saving nothing."""
    pytest.importorskip("accelerate")
    settings = {
        "output_dir": str(tmp_path),
        "max_steps": steps,
        "per_device_train_batch_size": 32,
        "learning_rate": lr,
        "save_strategy": "no",
        "logging_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
    }
    args = hf.TrainingArguments(**{**settings, **training_args})
    return hf.Trainer(model=model, args=args, train_dataset=train or Tokens(2048, seed=0), callbacks=[doctor])


def hf_train(hf, tmp_path, lr=1e-3, steps=300, **training_args):
    """A Trainer run of the tiny BERT on the token task under the callback; returns the callback."""
    from doctor.integrations.huggingface import DoctorTrainerCallback

    doctor = DoctorTrainerCallback(
        validation=token_validation(), model_factory=lambda: tiny_bert(hf), memorize_steps=100
    )
    hf_trainer(hf, tmp_path, tiny_bert(hf), doctor, lr, steps, **training_args).train()
    return doctor


@pytest.mark.slow
def test_hugging_face_healthy_training_is_called_healthy_and_logged(hf, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="doctor"):
        doctor = hf_train(hf, tmp_path)
    report = doctor.report
    assert report.verdict == "healthy", str(report)
    assert report.steps == 300
    m = report.measurements
    assert m["task"] == "multiclass" and m["final_val_acc"] > 0.9, str(report)
    assert m["first_loss"] == pytest.approx(math.log(CLASSES), rel=0.1)
    assert m["backwards_per_step"] == 1 and m["grad_carried_share"] == 0.0
    # The Trainer clips at max_grad_norm=1 by default: read before clipping (after backward) and at the step.
    assert 0 < m["grad_kept_at_step"] <= 1.0
    assert doctor.loss_used.checked is True  # no loss_fn: cross-entropy, and it reproduced the model's own loss
    logged = [r for r in caplog.records if r.name == "doctor"]
    assert [r.levelno for r in logged] == [logging.INFO] and "verdict: healthy" in logged[0].getMessage()
    as_dict = doctor.report_dict()
    assert as_dict["verdict"] == "healthy" and json.loads(json.dumps(as_dict)) == as_dict


@pytest.mark.slow
def test_hugging_face_bf16_training_on_the_cpu_is_judged_as_in_fp32(hf, tmp_path):
    # Before: "the doctor saw no training step". accelerate casts each output tensor to fp32 apart, so the loss the
    # Trainer back-propagates does not pass through the cast logits the callback hooked.
    doctor = hf_train(hf, tmp_path, bf16=True)
    report = doctor.report
    assert report is not None, doctor.cannot_judge
    assert report.verdict == "healthy" and report.steps == 300, str(report)
    assert report.measurements["first_loss"] == pytest.approx(math.log(CLASSES), rel=0.1)


@pytest.mark.slow
@pytest.mark.parametrize("setting", [{"fp16": True}, {"gradient_accumulation_steps": 2}])
def test_hugging_face_fp16_and_gradient_accumulation_on_the_cpu_are_judged_healthy(hf, tmp_path, setting):
    doctor = hf_train(hf, tmp_path, **setting)
    report = doctor.report
    assert report is not None, doctor.cannot_judge
    assert report.verdict == "healthy", str(report)
    assert report.measurements["backwards_per_step"] == setting.get("gradient_accumulation_steps", 1)


@pytest.mark.slow
def test_hugging_face_training_with_a_rate_far_too_high_is_named(hf, tmp_path):
    doctor = hf_train(hf, tmp_path, lr=0.5)
    assert doctor.report.verdict == "lr_too_high", str(doctor.report)
    assert "in the Trainer: TrainingArguments(learning_rate=) 10x smaller" in doctor.report.findings[0].next_step


@pytest.mark.slow
def test_hugging_face_gradient_accumulation_is_seen_as_the_loop_runs_it(hf, tmp_path):
    # Two backward passes per optimizer step; the Trainer divides the loss by 2 before backward (or passes the
    # model num_items_in_batch): the doctor records the loss as computed, ln 4 at first.
    doctor = hf_train(hf, tmp_path, steps=40, gradient_accumulation_steps=2)
    m = doctor.report.measurements
    assert m["backwards_per_step"] == 2 and m["optimizer_steps"] == 40 and doctor.report.steps == 80
    assert m["first_loss"] == pytest.approx(math.log(CLASSES), rel=0.1)
    assert m["grad_carried_share"] == 0.0  # the Trainer zeroes .grad after each optimizer step


def test_hugging_face_label_smoothing_is_refused_in_one_line_and_training_goes_on(hf, tmp_path, caplog):
    # The Trainer pops the labels before calling the model: the doctor would never see the targets.
    with caplog.at_level(logging.WARNING, logger="doctor"):
        doctor = hf_train(hf, tmp_path, steps=5, label_smoothing_factor=0.1)
    assert doctor.report is None and "label_smoothing_factor" in doctor.cannot_judge
    assert doctor.report_dict()["verdict"] is None
    assert any("cannot judge this run" in r.getMessage() for r in caplog.records)


# ----- A training that raises, and one resumed from a checkpoint -----------------------------------------------------
class Planted(RuntimeError):
    """The error a test model raises mid-training: it must reach the test as it was raised."""


class SmoothedClassifier(nn.Module):
    """A Trainer model with its own loss, cross-entropy smoothed: not the loss its integer labels imply."""

    def __init__(self):
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCAB, 16)
        self.head = nn.Linear(16, CLASSES)

    def forward(self, input_ids, attention_mask=None, labels=None):
        logits = self.head(self.embed(input_ids))
        if labels is None:  # the doctor's own forwards: the logits alone, as a Hugging Face head gives them
            return {"logits": logits}
        return {"loss": nn.functional.cross_entropy(logits, labels, label_smoothing=0.2), "logits": logits}


def test_hugging_face_without_loss_fn_refuses_a_model_loss_it_cannot_reproduce(hf, tmp_path, caplog):
    from doctor.integrations.huggingface import DoctorTrainerCallback

    torch.manual_seed(0)
    doctor = DoctorTrainerCallback()
    trainer = hf_trainer(hf, tmp_path, SmoothedClassifier(), doctor, steps=5)
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer.train()
    assert trainer.state.global_step == 5 and doctor.report is None
    assert doctor.cannot_judge.startswith("no loss_fn was given") and "is not cross-entropy" in doctor.cannot_judge
    assert any("cannot judge this run: no loss_fn was given" in r.getMessage() for r in caplog.records)


def hooks_left(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn) -> list[str]:
    """Every hook on the model, its modules and parameters, the loss module and the optimizer's steps, by place.

    The doctor's instruments hook the model's forward (harness/instruments/modes.py, outputs.py), the parameters'
    gradients (clearing.py), the loss module (loss_targets.py) and the optimizer's step (optimizer_steps.py and
    others); the callbacks hook the model's forward themselves. The models of these tests carry none of their own.
    """
    left = []
    losses = [("loss", loss_fn)] if isinstance(loss_fn, nn.Module) else []  # a callback given none has no module
    for name, module in [*model.named_modules(), *losses]:
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            left += [f"{name or 'model'}.{kind}"] * len(getattr(module, kind))
    for name, param in model.named_parameters():
        left += [f"{name}._backward_hooks"] * len(param._backward_hooks or {})
    for kind in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
        left += [f"optimizer.{kind}"] * len(getattr(optimizer, kind))
    if "forward" in vars(model):  # the Hugging Face callback's wrapper of the forward (huggingface.py, ForwardGuard)
        left.append("model.forward")
    return left


def raising_at(base, step: int, hooks=None):
    """A subclass of a model class whose training forward number `step` (from 1) raises Planted.

    Just before raising it keeps `hooks(model)` in `hooks_then`: the hooks the doctor had on, which shows that the
    check finds them. Each call makes a new class, so the class attributes are that model's alone.
    """

    class Raising(base):
        forwards: ClassVar[int] = 0
        raised: ClassVar[Planted | None] = None
        hooks_then: ClassVar[list[str]] = []

        def forward(self, *args, **kwargs):
            if self.training and torch.is_grad_enabled():
                Raising.forwards += 1
                if Raising.forwards == step:
                    Raising.hooks_then = hooks(self) if hooks is not None else []
                    Raising.raised = Planted(f"planted at training forward {step}")
                    raise Raising.raised
            return super().forward(*args, **kwargs)

    return Raising


def test_lightning_fit_that_raises_leaves_no_hook_and_the_error_unchanged(pl):
    from doctor.integrations.lightning import DoctorCallback

    loss_fn = nn.CrossEntropyLoss()
    doctor = DoctorCallback(loss_fn)
    trainer = lightning_trainer(pl, doctor, 20)
    failing = raising_at(lightning_module(pl, 1e-2), 5, lambda model: hooks_left(model, trainer.optimizers[0], loss_fn))
    with pytest.raises(Planted) as raised:
        trainer.fit(failing(), digit_batches())
    assert raised.value is failing.raised  # the very exception, not wrapped
    assert {"optimizer._optimizer_step_post_hooks", "loss._forward_pre_hooks"} <= set(failing.hooks_then)
    assert hooks_left(trainer.lightning_module, trainer.optimizers[0], loss_fn) == []
    assert doctor.report is None and doctor.doctor is None
    assert doctor.report_dict()["verdict"] is None and "before its end" in doctor.report_dict()["cannot_judge"]


def test_hugging_face_training_whose_model_raises_leaves_no_hook_and_the_error_unchanged(hf, tmp_path):
    from doctor.integrations.huggingface import DoctorTrainerCallback

    doctor = DoctorTrainerCallback()
    failing = raising_at(
        hf.BertForSequenceClassification,
        5,
        lambda model: hooks_left(model, trainer.optimizer.optimizer, doctor.loss_fn),
    )
    model = tiny_bert(hf, failing)
    # remove_unused_columns would read the batch's keys off forward's signature, (*args, **kwargs) here.
    trainer = hf_trainer(hf, tmp_path, model, doctor, steps=20, remove_unused_columns=False)
    with pytest.raises(Planted) as raised:
        trainer.train()
    assert raised.value is failing.raised
    assert {"model.forward", "model._forward_pre_hooks", "optimizer._optimizer_step_post_hooks"} <= set(
        failing.hooks_then
    )
    assert hooks_left(model, trainer.optimizer.optimizer, doctor.loss_fn) == []
    assert doctor.report is None and "before its end" in doctor.report_dict()["cannot_judge"]


class RaisingTokens(Tokens):
    """The token task whose example `at` raises Planted: a failure in the data, where no hook of the doctor is."""

    def __init__(self, n: int, seed: int, at: int):
        super().__init__(n, seed)
        self.at = at

    def __getitem__(self, index):
        if index == self.at:
            raise Planted(f"example {index} cannot be read")
        return super().__getitem__(index)


def test_hugging_face_training_that_raises_outside_the_model_is_let_go_by_close(hf, tmp_path):
    # No hook of the doctor's sees a dataset fail: `with doctor:` (close() on the way out) takes the hooks off;
    # without it, the next doctor callback to train the same model does.
    from doctor.integrations.huggingface import DoctorTrainerCallback

    model, failing_data = tiny_bert(hf), RaisingTokens(512, seed=0, at=200)
    closed = DoctorTrainerCallback()
    trainer = hf_trainer(hf, tmp_path, model, closed, steps=20, train=failing_data)
    with pytest.raises(Planted), closed:
        trainer.train()
    assert hooks_left(model, trainer.optimizer.optimizer, closed.loss_fn) == [] and closed.doctor is None

    left_on = DoctorTrainerCallback()
    trainer = hf_trainer(hf, tmp_path, model, left_on, steps=20, train=failing_data)
    with pytest.raises(Planted):
        trainer.train()
    assert hooks_left(model, trainer.optimizer.optimizer, left_on.loss_fn) != []  # watching a run that is over
    following = DoctorTrainerCallback()
    hf_trainer(hf, tmp_path, model, following, steps=3).train()
    assert hooks_left(model, trainer.optimizer.optimizer, left_on.loss_fn) == [] and left_on.doctor is None
    assert following.report is not None and following.report.steps == 3


def resuming(test):
    """Lightning's warnings on resuming mid-epoch from a plain DataLoader, into the folder the first fit saved to."""
    test = pytest.mark.filterwarnings("ignore:You're resuming from a checkpoint that ended before the epoch")(test)
    return pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")(test)


@resuming
def test_lightning_fit_resumed_from_a_checkpoint_continues_the_count(pl, tmp_path):
    # The first fit saves at steps 50 and 100, then fails at 120; the second resumes from step 100 to 200.
    from doctor.integrations.lightning import DoctorCallback

    def callback():
        return DoctorCallback(nn.CrossEntropyLoss(), validation=[(VAL_IMAGES, VAL_LABELS)])

    torch.manual_seed(0)
    first = callback()
    with pytest.raises(Planted):
        lightning_trainer(pl, first, 200, checkpoints=tmp_path).fit(
            raising_at(lightning_module(pl, 1e-2), 121)(), digit_batches()
        )
    saved = torch.load(tmp_path / "epoch=4-step=100.ckpt", weights_only=False)["callbacks"]["DoctorCallback"]
    assert saved["steps"] == 100 and saved["start"]["first_loss"] == pytest.approx(math.log(10), rel=0.1)
    resumed = callback()
    trainer = lightning_trainer(pl, resumed, 200, checkpoints=tmp_path)  # saving on as the first fit did
    trainer.fit(lightning_module(pl, 1e-2)(), digit_batches(), ckpt_path=tmp_path / "epoch=4-step=100.ckpt")
    report = resumed.report
    assert resumed.resumed_after == 100 and report.steps == 200 and "from 200 training steps" in str(report)
    m = report.measurements
    # The curves are the resumed part's; the first loss and the initial weights' measurements are the fit's start.
    assert len(m["train_loss_curve"]) == 100 and m["train_loss_curve"][0] < 0.5
    for name, value in saved["start"].items():
        assert m[name] == pytest.approx(value, nan_ok=True), name
    now = resumed.state_dict()  # what a checkpoint saved now carries: the count goes on, the start stays
    assert now["steps"] == 200 and now["val_start"] == saved["val_start"]
    assert now["start"] == pytest.approx(saved["start"], nan_ok=True)
    assert report.verdict == "healthy", str(report)


@resuming
def test_lightning_fit_resumed_from_a_checkpoint_without_the_doctor_measures_no_start(pl, tmp_path, caplog):
    from doctor.integrations.lightning import DoctorCallback

    torch.manual_seed(0)
    lightning_trainer(pl, pl.Callback(), 50, checkpoints=tmp_path).fit(lightning_module(pl, 1e-2)(), digit_batches())
    (checkpoint,) = tmp_path.glob("*step=50.ckpt")
    doctor = DoctorCallback(nn.CrossEntropyLoss())
    with caplog.at_level(logging.WARNING, logger="doctor"):
        trainer = lightning_trainer(pl, doctor, 100, checkpoints=tmp_path)
        trainer.fit(lightning_module(pl, 1e-2)(), digit_batches(), ckpt_path=checkpoint)
    assert any("holds no state of the doctor's" in r.getMessage() for r in caplog.records)
    m = doctor.report.measurements
    assert doctor.resumed_after == 0 and doctor.report.steps == 50
    # Not the loss at step 50 posing as the untrained one, nor the trained weights as the initial ones.
    assert math.isnan(m["first_loss"]) and math.isnan(m["dead_unit_share_init"])


def test_hugging_face_training_resumed_from_a_checkpoint_continues_the_count(hf, tmp_path):
    # The first training saves at steps 10 and 20 and fails at 25; the second resumes from step 20 to 40.
    from doctor.integrations.huggingface import DoctorTrainerCallback

    saving = {"save_strategy": "steps", "save_steps": 10, "remove_unused_columns": False}  # see above
    first = DoctorTrainerCallback(validation=token_validation())
    model = tiny_bert(hf, raising_at(hf.BertForSequenceClassification, 25))
    with pytest.raises(Planted):
        hf_trainer(hf, tmp_path, model, first, steps=40, **saving).train()
    state = json.loads((tmp_path / "checkpoint-20" / "trainer_state.json").read_text())
    saved = state["stateful_callbacks"]["DoctorTrainerCallback"]["attributes"]["_resumed"]
    assert saved["steps"] == 20 and saved["start"]["first_loss"] == pytest.approx(math.log(CLASSES), rel=0.1)
    resumed = DoctorTrainerCallback(validation=token_validation())
    trainer = hf_trainer(hf, tmp_path, tiny_bert(hf), resumed, steps=40, **saving)
    trainer.train(resume_from_checkpoint=str(tmp_path / "checkpoint-20"))
    report = resumed.report
    assert resumed.resumed_after == 20 and report.steps == 40
    assert len(report.measurements["train_loss_curve"]) == 20
    for name, value in saved["start"].items():
        assert report.measurements[name] == pytest.approx(value, nan_ok=True), name
    now = resumed.state()["attributes"]["_resumed"]
    assert now["steps"] == 40 and list(now["val_start"]) == saved["val_start"]
    assert now["start"] == pytest.approx(saved["start"], nan_ok=True)


def test_the_forward_guard_keeps_the_signature_follows_a_deepcopy_and_puts_back_what_was_there(hf):
    # The Trainer reads forward's signature for the batch's columns; a copy of the model (an EMA, say) is not the
    # watched run; accelerate's autocast wrapper, an instance attribute, must be there again after the run.
    import copy
    import inspect
    from types import MethodType

    from doctor.integrations.huggingface import ForwardGuard

    model = tiny_bert(hf)
    signature = inspect.signature(model.forward)
    raised = []

    class Watch:  # ForwardGuard keeps a weak reference to the method it calls
        def raised(self):
            raised.append(True)

    watch = Watch()
    for previous in (None, MethodType(type(model).forward, model)):
        if previous is not None:
            model.forward = previous  # as accelerate installs its wrapper
        guard = ForwardGuard(model, watch.raised)
        assert inspect.signature(model.forward) == signature and vars(model)["forward"] is not previous
        twin = copy.deepcopy(model)
        with pytest.raises(ValueError):  # BERT's own check: neither input_ids nor inputs_embeds
            twin(input_ids=None)
        assert raised == [] and twin.forward.__self__ is twin
        with pytest.raises(ValueError) as error:
            model(input_ids=None)
        assert raised == [True] and "input_ids" in str(error.value)
        guard.remove()
        assert vars(model).get("forward") is previous
        raised.clear()


class SlowBatches:
    """The digits' batches, each 10 ms late: a loader that keeps the loop waiting."""

    def __init__(self, batches):
        self.batches = batches

    def __iter__(self):
        for batch in self.batches:
            time.sleep(0.01)
            yield batch

    def __len__(self):
        return len(self.batches)


@pytest.mark.parametrize("slow", ["loader", "between_batches"])
def test_lightning_wait_for_data_is_its_fetch_not_its_work_between_batches(pl, slow):
    """Lightning's own work between two batches (here a callback taking 10 ms) is no wait for data; a loader's is.

    Under DDP Lightning broadcasts between batches, which made healthy two-rank fits starved_loader on a busy host.
    """
    from doctor.integrations.lightning import DoctorCallback

    class Bookkeeping(pl.Callback):
        def on_train_batch_end(self, *_args):
            if slow == "between_batches":
                time.sleep(0.01)

    torch.manual_seed(0)
    doctor = DoctorCallback(nn.CrossEntropyLoss())
    trainer = lightning_trainer(pl, doctor, 60)
    trainer.callbacks.append(Bookkeeping())  # after the doctor's: between one batch's end and the next
    batches = digit_batches()
    trainer.fit(lightning_module(pl, 1e-2)(), SlowBatches(list(batches)) if slow == "loader" else batches)
    share = doctor.report.measurements["data_wait_share"]
    if slow == "loader":
        assert share > 0.5 and doctor.report.verdict == "starved_loader", str(doctor.report)
    else:
        assert share < 0.2, str(doctor.report)
    assert not {"start", "stop"} & set(vars(trainer.profiler))  # the profiler's own methods are back
