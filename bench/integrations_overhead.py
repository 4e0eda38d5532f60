"""Benchmark of the doctor's callbacks, measured as bench/doctor_overhead.py measures the plain loop.

1. Lightning: the grid's digits MLP (harness.model.MLP, Adam 1e-3, batches of 64), a 600-step trainer.fit()
   without a callback and with DoctorCallback.
2. Hugging Face: a one-layer BERT (32 wide) on a generated 4-class token task, a 200-step Trainer.train()
   without a callback and with DoctorTrainerCallback.

Each figure is the median ratio over pairs of runs side by side in one process (a bare one and a doctored one,
in turn first), the fit timed without the report that the callback computes at its end (timed apart: it adds
the memorization probe and the evaluations), as in bench/doctor_overhead.py. Only ratios within one run are
worth quoting. About two minutes on one CPU thread.
"""

import logging
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lightning.pytorch as pl
import torch
import transformers
from hydra import compose, initialize_config_dir
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, TensorDataset

from doctor.integrations.huggingface import DoctorTrainerCallback
from doctor.integrations.lightning import DoctorCallback
from harness.data import load_splits
from harness.model import MLP

ROOT = Path(__file__).resolve().parent.parent
LIGHTNING_STEPS, LIGHTNING_REPEATS = 600, 7
HF_STEPS, HF_REPEATS = 200, 5
VOCAB, LENGTH, CLASSES = 64, 16, 4


def timed(callback_class):
    """The callback, timing the report it computes at the end of training (`report_s`)."""

    class Timed(callback_class):
        report_s = 0.0

        def _conclude(self, log: bool = True) -> None:
            start = time.perf_counter()
            super()._conclude(log)
            self.report_s = time.perf_counter() - start

    return Timed


# ----- 1. Lightning --------------------------------------------------------------------------------------------
class DigitsModule(pl.LightningModule):
    def __init__(self, features: int, classes: int):
        super().__init__()
        self.net = MLP(features, classes)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, _index):
        x, y = batch
        return self.loss(self(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)


def lightning_fit(data, with_doctor: bool) -> tuple[float, float, object]:
    """Seconds of the fit without the report, of the report (0 without the doctor), and the doctor's cost."""
    torch.manual_seed(0)
    module = DigitsModule(data.x_train.shape[1], data.n_classes)
    train = TensorDataset(data.x_train, data.y_train)
    loader = DataLoader(train, batch_size=None, sampler=BatchSampler(RandomSampler(train), 64, drop_last=True))
    callback = timed(DoctorCallback)(nn.CrossEntropyLoss(), validation=[(data.x_val, data.y_val)])
    trainer = pl.Trainer(
        max_steps=LIGHTNING_STEPS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[callback] if with_doctor else [],
    )
    start = time.perf_counter()
    trainer.fit(module, loader)
    fit = time.perf_counter() - start
    return fit - callback.report_s, callback.report_s, callback.report.cost if callback.report else None


# ----- 2. Hugging Face -------------------------------------------------------------------------------------------
class Tokens(Dataset):
    """Sequences whose class is the group half their tokens come from (tests/test_integrations.py's task)."""

    def __init__(self, n: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, CLASSES, (n,), generator=generator)
        anything = torch.randint(4, VOCAB, (n, LENGTH), generator=generator)
        own = 4 + 8 * self.labels[:, None] + torch.randint(0, 8, (n, LENGTH), generator=generator)
        self.ids = torch.where(torch.rand(n, LENGTH, generator=generator) < 0.5, own, anything)
        self.ids[:, 0] = 1

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        ids = self.ids[index]
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": self.labels[index]}


def hf_train(train: Tokens, validation: list, output_dir: str, with_doctor: bool) -> tuple[float, float, object]:
    """Seconds of Trainer.train() without the report, of the report (0 without the doctor), and the doctor's cost."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=LENGTH,
        num_labels=CLASSES,
    )
    model = transformers.BertForSequenceClassification(config)
    args = transformers.TrainingArguments(
        output_dir=output_dir,
        max_steps=HF_STEPS,
        per_device_train_batch_size=32,
        learning_rate=1e-3,
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    callback = timed(DoctorTrainerCallback)(validation=validation)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=train, callbacks=[callback] if with_doctor else []
    )
    trainer.remove_callback(transformers.PrinterCallback)  # it prints the run's metrics at the end
    start = time.perf_counter()
    trainer.train()
    fit = time.perf_counter() - start
    return fit - callback.report_s, callback.report_s, callback.report.cost if callback.report else None


def interleaved(run, repeats: int) -> tuple[float, float, float, float, list]:
    """Medians of the seconds without the doctor, with it, of the report, and of the ratio of pairs; the costs.

    The costs: the doctor's on each run (what it measured of itself, the steps its budget watched). After a warm-up,
    each pair is a bare run and a doctored one side by side, in turn first: the host's load drifts over seconds.
    """
    run(True)  # first-use imports and caches, not timed
    bare, watched, reports, costs = [], [], [], []
    for repeat in range(repeats):
        for with_doctor in (False, True) if repeat % 2 == 0 else (True, False):
            loop, report, cost = run(with_doctor)
            (watched if with_doctor else bare).append(loop)
            if with_doctor:
                reports.append(report)
                costs.append(cost)
    ratio = statistics.median(w / b for b, w in zip(bare, watched, strict=True))
    return statistics.median(bare), statistics.median(watched), statistics.median(reports), ratio, costs


GOAL = 1.05  # the doctor's cost through each integration, at most (issue 34), under its default budget


def line(number: int, what: str, bare: float, watched: float, report: float, ratio: float, costs: list, pairs: int):
    met = "met" if ratio <= GOAL else "MISSED"
    steps = costs[0].steps if costs and costs[0] else 0
    sampled = (
        f"the budget watched {statistics.median(c.watched_steps for c in costs):.0f} of {steps} steps in full, its"
        f" own measure {100 * statistics.median(c.share for c in costs):.1f}%"
        if all(costs)
        else "no cost measured"
    )
    return (
        f"{number}. {what}: {watched:.3f} s / {bare:.3f} s, {ratio:.3f}x (median of {pairs} pairs) (goal <= {GOAL}:"
        f" {met}); {sampled}; the report after it: {report:.3f} s"
    )


def main() -> None:
    torch.set_num_threads(1)
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # its start-up lines, each fit
    warnings.filterwarnings("ignore", module="lightning")  # its advice (more loader workers) and deprecations
    transformers.logging.set_verbosity_error()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    versions = f"lightning {pl.__version__}, transformers {transformers.__version__}"
    print(f"machine: torch {torch.__version__}, {versions}, 1 thread, python {sys.version.split()[0]}")
    timed = interleaved(lambda doctor: lightning_fit(data, doctor), LIGHTNING_REPEATS)
    print(
        line(1, f"DoctorCallback on a Lightning fit (digits MLP, {LIGHTNING_STEPS} steps)", *timed, LIGHTNING_REPEATS)
    )
    train = Tokens(2048, seed=0)
    held = Tokens(256, seed=99)
    validation = [{"input_ids": held.ids, "attention_mask": torch.ones_like(held.ids), "labels": held.labels}]
    with tempfile.TemporaryDirectory() as output_dir:
        timed = interleaved(lambda doctor: hf_train(train, validation, output_dir, doctor), HF_REPEATS)
    what = f"DoctorTrainerCallback on a Trainer run (1-layer BERT, {HF_STEPS} steps)"
    print(line(2, what, *timed, HF_REPEATS))


if __name__ == "__main__":
    main()
