"""One cell of the grid: data, model, the fault's change, one training loop observed by the instruments.

`run_cell(cfg)` is a plain function from a resolved config to a record (a dict with one value per column of
`harness.records.SCHEMA`). It never raises for a problem of the cell itself: an exception, a non-finite
required measurement or the time limit give `status="failed"` with the error, and a device that is not
present gives `status="skipped"` with the reason. It sets its own seeds, threads and device, because joblib
reuses worker processes from one cell to the next.

`measure` reads top to bottom: `build_training` (the data, the model, its optimizer with the fault's change to the
rate), `train` (the loop, observed by the instruments), `end_of_run` (the reference fit and the two probes).
"""

import math
import os
import platform
import random
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

import numpy as np
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from torch import nn

from harness.after_training import SCORE_COLUMNS, Probes, assemble, run_record
from harness.after_training import end_of_run as end_of_run_columns
from harness.checks import LOSS_NAMES, TARGET_ENCODINGS
from harness.column import F64, I64, NOT_ALONG_THE_RUN, STR, TIMESTAMP, Column, list_of
from harness.data import RelativeStall, Splits, load_splits, training_batches
from harness.evaluation import evaluate
from harness.instruments import Instruments, NoInstruments
from harness.model import build_model
from harness.recipe import cell_id, planted, recipe_yaml, severity
from harness.records import SCHEMA_ID, empty_record
from harness.text import NOT_TEXT, PAD, lm_references
from harness.timing import DeviceClock, NoClock

# The columns `run_cell` and `measure` set themselves: what was run, on what, and how big the data was.
COLUMNS = (
    Column(
        "cell_id",
        STR,
        "readable key plus a hash of the recipe's group options and its difference from their healthy defaults",
    ),
    Column("fault", STR, "the condition planted, as a label: its conf/fault/ option name (names joined by + for two)"),
    Column("faults", list_of(STR), "the conf/fault/ options planted: one, or two at once", along=NOT_ALONG_THE_RUN),
    Column(
        "diagnosis",
        STR,
        "the verdict the rules should give when one fault is planted (null for two); scoring only",
    ),
    Column(
        "verdicts",
        list_of(STR),
        "the verdicts that should name the planted faults, one per fault; scoring only",
        along=NOT_ALONG_THE_RUN,
    ),
    Column("severity", STR, "size of the planted fault: mild, planted or extreme (none for the healthy controls)"),
    Column("dataset", STR, "conf/dataset/ option name"),
    Column("model", STR, "conf/model/ option name"),
    Column("seed", I64, "seed of the split, initialization, batch order and probes"),
    Column("device", STR, "cpu or cuda"),
    Column("status", STR, "ok, failed or skipped"),
    Column("error", STR, "why the cell failed or was skipped; null when ok"),
    Column(
        "schema_id",
        STR,
        "fingerprint of the declared columns the record was written with (harness/records.py: SCHEMA_ID)",
    ),
    Column("started_at", TIMESTAMP, "when the cell started"),
    Column("wall_s", F64, "seconds the whole cell took"),
    Column("torch_version", STR, "torch.__version__"),
    Column("python_version", STR, "platform.python_version()"),
    Column("host", STR, "machine that ran the cell"),
    Column("device_name", STR, "GPU name, or the CPU architecture"),
    Column("threads", I64, "torch threads the cell ran with"),
    Column("config_yaml", STR, "the resolved recipe (config without run.*) as YAML"),
    Column("n_train", I64, "training examples"),
    Column("n_val", I64, "validation examples"),
)

# Measurements that must be finite numbers in an ok record: if one is not, the harness itself misbehaved.
REQUIRED_FINITE = ("first_loss", "ln_classes", "data_wait_share", "final_train_acc", "final_val_acc")


class CellTimeout(RuntimeError):
    """The cell ran past `run.time_limit_s`."""


class DeviceUnavailable(RuntimeError):
    """The cell asks for a device this machine does not have."""


def resolve_device(name: str) -> torch.device:
    if name == "cuda":
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise DeviceUnavailable(f"device=cuda asked for, but {why} (torch {torch.__version__})")
        return torch.device("cuda")
    if name == "cpu":
        return torch.device("cpu")
    raise ValueError(f"unknown device {name!r}: choose cpu or cuda")


def encode_targets(labels: torch.Tensor, n_classes: int, encoding: str) -> torch.Tensor:
    """The class labels as the loop hands them to the loss: indices, one-hot rows, or one-hot rows in -1/+1."""
    if encoding == "index":
        return labels
    if encoding not in TARGET_ENCODINGS:
        raise ValueError(f"unknown data.targets {encoding!r}: choose {', '.join(TARGET_ENCODINGS)}")
    onehot = nn.functional.one_hot(labels, n_classes).float()
    return onehot if encoding == "onehot" else 2 * onehot - 1  # pm_one: the -1/+1 coding of margin losses


def loss_function(name: str) -> nn.Module:
    """The grid's loss by name: cross_entropy, mse, bce or nll.

    cross_entropy takes logits with class indices or probability rows, mse compares the output with the targets,
    bce is binary cross-entropy on the logits, a yes/no per output unit (it needs target rows: data.targets=onehot),
    nll the negative log-likelihood of class indices on log-probabilities (model.output=log_softmax).
    """
    if name not in LOSS_NAMES:
        raise ValueError(f"unknown loop.loss {name!r}: choose {', '.join(LOSS_NAMES)}")
    losses = {"cross_entropy": nn.CrossEntropyLoss, "mse": nn.MSELoss, "bce": nn.BCEWithLogitsLoss, "nll": nn.NLLLoss}
    return losses[name]()


class PositionCrossEntropy(nn.CrossEntropyLoss):
    """Cross-entropy over the positions of (B, T, V) logits against (B, T) targets: a language model's loss.

    The loop calls it on the model's output as it is; it computes `nn.CrossEntropyLoss` of the flattened positions,
    as language-model loops do, leaving out targets of -100 (padding). On rows of positions, (n, V) and (n,), it is
    that same loss.
    """

    def forward(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return super().forward(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


def budgets(loop_cfg) -> list[int]:
    """The steps at which a snapshot of the measurements is taken: the budgets below the run's length, and its end."""
    return sorted({b for b in loop_cfg.budgets if 0 < b < loop_cfg.steps} | {loop_cfg.steps})


def measure(cfg: DictConfig, device: torch.device, instrumented: bool = True, deadline: float = math.inf) -> dict:
    """Train the configured model once and return the measurements.

    With `instrumented=False` the loop runs without instruments: the bare loop the benchmarks compare against.
    """
    check = deadline_check(deadline, cfg.run.time_limit_s)
    run = build_training(cfg, device)
    instruments = NoInstruments()
    if instrumented:
        # A text's windows are padded with the pad byte: its positions are the mask the padding count reads.
        pad_id = PAD if run.data.text is not None else None
        instruments = Instruments(
            run.model, run.optimizer, run.loss_fn, cfg.loop.census_every, scaler=run.scaler, pad_id=pad_id
        )
    clock = DeviceClock(device, cfg.loop.timing_warmup) if instrumented else NoClock(device)
    stall = RelativeStall(cfg.data.batch_latency) if cfg.data.batch_latency > 0 else None
    batches = instruments.watch(encoded_batches(cfg, run.data, stall))
    snapshot_at = budgets(cfg.loop) if instrumented else []
    snapshots = train(cfg.loop, run, instruments, clock, batches, stall, snapshot_at, check)
    ended = instruments.finish()
    # The last snapshot is taken at the run's last step: its scores are the trained model's, and its other columns
    # are the record's (harness/columns.py), read before the scores' own evaluations added to the forwards counted.
    last = snapshots[-1] if instrumented else final_scores(run)
    scores = {name: last[name] for name in SCORE_COLUMNS}
    at_end = {name: value for name, value in last.items() if name not in scores}
    measured = assemble({k: v for k, v in ended.items() if k not in at_end}, at_end, clock.finish())
    kept = instruments.kept_examples() if instrumented else None
    after = end_of_run(cfg, run, kept, check)
    data = run.data
    record = run_record(measured, scores, after, n_classes=data.n_classes, uninformed_loss=math.log(data.n_classes))
    text = lm_references(data.text) if data.text is not None else dict(NOT_TEXT)
    return assemble(record, text, {"checkpoints": snapshots, "n_train": len(data.y_train), "n_val": len(data.y_val)})


def deadline_check(deadline: float, limit_s: float) -> Callable[[], None]:
    """A check to call now and then: raises CellTimeout once `time.perf_counter()` is past `deadline`."""

    def check() -> None:
        if time.perf_counter() > deadline:
            raise CellTimeout(f"cell exceeded its time limit of {limit_s} s (run.time_limit_s)")

    return check


@dataclass
class Training:
    """What one cell trains, built from its config: the splits, the model, its optimizer, loss and mixed precision."""

    device: torch.device
    data: Splits  # as loaded: labels are class indices, on the CPU
    train: tuple[torch.Tensor, torch.Tensor]  # the whole training split on the device, targets encoded for the loss
    val: tuple[torch.Tensor, torch.Tensor]  # the validation split, likewise
    make_model: Callable[[], nn.Module]  # a fresh model of the same recipe (the probes train one each)
    model: nn.Module
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LambdaLR | None
    loss_fn: nn.Module
    scaler: torch.amp.GradScaler  # disabled without amp: it then hands the loss and the step through unchanged
    amp_dtype: torch.dtype


def build_training(cfg: DictConfig, device: torch.device) -> Training:
    """The data, model, optimizer and loss of a cell, with the fault's changes to the optimizer applied."""
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    encoding = cfg.data.targets
    val = data.x_val.to(device), encode_targets(data.y_val, data.n_classes, encoding).to(device)
    train = data.x_train.to(device), encode_targets(data.y_train, data.n_classes, encoding).to(device)
    make_model = partial(build_model, cfg.model, n_inputs=data.x_train.shape[1], n_classes=data.n_classes)

    torch.manual_seed(cfg.seed)
    model = make_model().to(device)
    optimizer = instantiate(cfg.optimizer)(optimized_params(model, make_model, cfg.loop.optimizer_copies, device))
    if cfg.loop.untie_after_optimizer:  # the fault "tied weights broken": the head copied after the optimizer was made
        if not getattr(model, "tied", False):
            raise ValueError(
                f"loop.untie_after_optimizer needs a model whose output map is tied to its input embedding "
                f"(model=causal_lm with tied=true), not model={cfg.model.name}"
            )
        model.copy_head()
    for group in optimizer.param_groups:
        group["lr"] *= cfg.loop.lr_scale  # the learning-rate faults: the optimizer's own rate off by a factor
        if cfg.loop.weight_decay_share:  # the fault "weight decay that dominates", the same shrink at any rate
            group["weight_decay"] = cfg.loop.weight_decay_share / group["lr"]
    factor = rate_factor(
        cfg.loop.warmup_steps, cfg.loop.lr_halflife, cfg.loop.cosine, cfg.loop.steps // cfg.loop.accumulate
    )
    return Training(
        device=device,
        data=data,
        train=train,
        val=val,
        make_model=make_model,
        model=model,
        optimizer=optimizer,
        schedule=torch.optim.lr_scheduler.LambdaLR(optimizer, factor) if factor is not None else None,
        # A text dataset's targets are per position: the loop's cross-entropy is over the positions.
        loss_fn=PositionCrossEntropy()
        if data.text is not None and cfg.loop.loss == "cross_entropy"
        else loss_function(cfg.loop.loss),
        # bfloat16 on the CPU needs no scaling, but the GradScaler runs the same either way
        scaler=torch.amp.GradScaler(device.type, enabled=cfg.loop.amp),
        amp_dtype=torch.float16 if device.type == "cuda" else torch.bfloat16,
    )


def encoded_batches(cfg: DictConfig, data: Splits, stall: RelativeStall | None) -> Iterator:
    """The training batches as the loop receives them: `(inputs, targets)` on the CPU, targets encoded for the loss."""
    encoding = cfg.data.targets  # read once: an OmegaConf access per batch would count as time waited for data
    for x, y in training_batches(
        data.x_train,
        data.y_train,
        min(cfg.data.batch_size, len(data.y_train)),
        cfg.seed,
        stall=stall,
        bad_batch_every=cfg.data.bad_batch_every,
        n_classes=data.n_classes,
        kind=cfg.data.batches,
        order=cfg.data.order,
    ):
        yield x, encode_targets(y, data.n_classes, encoding)


def train(
    loop_cfg: DictConfig,
    run: Training,
    instruments: Instruments | NoInstruments,
    clock: DeviceClock | NoClock,
    batches: Iterator,
    stall: RelativeStall | None,
    snapshot_at: list[int],
    check: Callable[[], None],
) -> list[dict]:
    """The training loop: the one a practitioner writes, with the instruments' calls. Returns the snapshots.

    A snapshot is taken at each step of `snapshot_at`: the measurements as if the run stopped there.
    """
    model, optimizer, scaler, loss_fn = run.model, run.optimizer, run.scaler, run.loss_fn
    # Plain values, not config lookups, inside the loop: an OmegaConf access costs about 30 us.
    steps, eval_every, zero_every = loop_cfg.steps, loop_cfg.eval_every, loop_cfg.zero_grad_every
    accumulate = loop_cfg.accumulate  # batches (backward passes) per optimizer step
    permute_rows, amp = loop_cfg.permute_targets, loop_cfg.amp
    broadcast = loop_cfg.broadcast_targets
    set_to_none, restore_train = loop_cfg.set_to_none, loop_cfg.restore_train_mode
    clip_norm, clip_scaled = loop_cfg.clip_norm, loop_cfg.clip_before_unscale
    validate = partial(evaluate, model, loss_fn, [run.val], eval_mode=loop_cfg.eval_mode)
    snapshots = []

    model.train(loop_cfg.train_mode)  # the fault "training in eval mode" is this call missing
    instruments.log_validation(0, *validate())
    for step in range(1, steps + 1):
        clock.begin_step()
        x, y = clock.copy(*next(batches))  # the host-to-device copy, timed
        began = time.perf_counter()
        if permute_rows:  # the fault "targets changed inside the loop": after the batch was handed over
            y = permuted_rows(y, permute_rows)
        if broadcast:  # the fault "loss broadcast": the targets given an axis the output lacks, (B, C) -> (B, 1, C)
            y = y.unsqueeze(1)
        with torch.autocast(run.device.type, dtype=run.amp_dtype, enabled=amp):
            loss = loss_fn(model(x), y)
        # Zeroed before the first batch of an optimizer step: the fault "forgotten zero_grad" is this line missing.
        if zero_every and (step - 1) % (zero_every * accumulate) == 0:
            optimizer.zero_grad(set_to_none=set_to_none)
        # k batches' mean: one batch of k times the size. Without amp the scaler hands the loss back unchanged.
        scaler.scale(loss / accumulate if accumulate > 1 else loss).backward()
        instruments.after_backward(loss)
        if step % accumulate == 0:
            optimizer_step(run, clip_norm, clip_scaled)
        clock.end_step()
        if stall is not None:
            stall.record(time.perf_counter() - began)  # the slow loader's stall is a multiple of this
        if step % eval_every == 0 or step == steps:
            instruments.log_validation(step, *validate())
            if not restore_train:
                model.eval()  # the fault "left in eval mode": a validation that switches and never switches back
        if step in snapshot_at:  # the measurements as if the run stopped here (a shorter run is this prefix)
            snapshots.append({**instruments.snapshot(), **final_scores(run)})
        check()
    return snapshots


def optimizer_step(run: Training, clip_norm: float, clip_scaled: bool) -> None:
    """One optimizer step as a mixed-precision loop takes it: unscale, clip, step, update, then the schedule."""
    if clip_norm:
        if not clip_scaled:
            run.scaler.unscale_(run.optimizer)  # the fault "clipped before unscale_" is this line after the next
        nn.utils.clip_grad_norm_(run.model.parameters(), clip_norm)
    run.scaler.step(run.optimizer)  # unscales (unless done above) and steps, or skips a step with inf/NaN gradients
    run.scaler.update()
    if run.schedule is not None:
        run.schedule.step()


def end_of_run(cfg: DictConfig, run: Training, kept: tuple | None, check: Callable[[], None]) -> dict:
    """The measurements after training: the reference fit on the examples the instruments kept, and two probes.

    `kept`: the training examples the instruments kept (`Instruments.kept_examples`), None for a bare loop.
    The probes train fresh models from the same factory: can one memorize a handful of training examples
    (`memorize`), and how much of many of them can one fit in a clean loop (`fit_capacity`)?
    """
    data, encoding = run.data, cfg.data.targets
    probes = Probes(
        memorize_rates=tuple(cfg.memorize.rates),
        memorize_steps=cfg.memorize.steps,
        capacity_rates=tuple(cfg.capacity.rates),
        capacity_steps=cfg.capacity.steps,
        seed=cfg.seed,
        check=check,
    )
    n, x_train, y_train = cfg.memorize.examples, *run.train
    memorize_on = (
        data.x_train[:n].to(run.device),
        encode_targets(data.y_train[:n], data.n_classes, encoding).to(run.device),
    )
    capacity_on = [(x_train[: cfg.capacity.examples], y_train[: cfg.capacity.examples])]
    # The fitted copy is scored on as many validation examples as it fitted, encoded as the loss takes them.
    x_val, y_val = run.val
    capacity_held_out = [(x_val[: cfg.capacity.examples], y_val[: cfg.capacity.examples])]
    held_out = (data.x_val, data.y_val)
    if data.text is not None:
        kept = None  # the quick references fit one class per example; a text has its own (harness/text.py)
    return end_of_run_columns(
        run.make_model, run.loss_fn, probes, memorize_on, capacity_on, kept or None, held_out, capacity_held_out
    )


def optimized_params(model: nn.Module, make_model, copies: float, device: torch.device) -> list[nn.Parameter]:
    """The parameters the optimizer is given: the model's own, or copies for a share of them (from the input side).

    The copies are the parameters of a second model built from the same factory (the fault "the model rebuilt
    after its optimizer was made"): backward fills the trained model's .grad, and the optimizer steps tensors
    nothing reads.
    """
    params = list(model.parameters())
    left_out = round(copies * len(params))
    if not left_out:
        return params
    others = list(make_model().to(device).parameters())
    return others[:left_out] + params[left_out:]


def rate_factor(warmup: int, halflife: int, cosine: bool, optimizer_steps: int):
    """The LambdaLR factor of optimizer step s: a linear warmup, an exponential decay, a cosine to 0; None: none.

    The decay is a per-epoch schedule stepped per batch when its half-life is a few dozen steps (the fault
    "a schedule that kills the rate early"); the cosine over the whole run is its healthy twin.
    """
    if not (warmup or halflife or cosine):
        return None

    def factor(s: int) -> float:
        rate = min(1.0, (s + 1) / warmup) if warmup else 1.0
        if halflife:
            rate *= 0.5 ** (s / halflife)
        if cosine:
            rate *= 0.5 * (1 + math.cos(math.pi * min(s, optimizer_steps) / optimizer_steps))
        return rate

    return factor


def permuted_rows(targets: torch.Tensor, share: float) -> torch.Tensor:
    """The targets with the first `share` of the batch's rows permuted among themselves.

    The permutation is a rotation by one row, so that every permuted row gets another row's target whatever the seed.
    """
    rows = round(share * len(targets))
    if rows < 2:
        return targets
    order = torch.arange(len(targets), device=targets.device)
    order[:rows] = torch.roll(order[:rows], 1)
    return targets[order]


def final_scores(run: Training) -> dict:
    """Loss and score (accuracy; R² for targets that are not classes) on the whole training split and validation."""
    train_loss, train_acc = evaluate(run.model, run.loss_fn, [run.train])
    val_loss, val_acc = evaluate(run.model, run.loss_fn, [run.val])
    return {
        "final_train_loss": train_loss,
        "final_train_acc": train_acc,
        "final_val_loss": val_loss,
        "final_val_acc": val_acc,
    }


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_cell(cfg: DictConfig) -> dict:
    """Run one cell and return its record; problems of the cell end up in `status` and `error`."""
    started = time.perf_counter()
    record = empty_record()
    faults, verdicts = planted(cfg)
    record.update(
        cell_id=cell_id(cfg),
        fault="+".join(faults),
        faults=faults,
        diagnosis=verdicts[0] if len(verdicts) == 1 else None,  # two at once are scored by `verdicts`
        verdicts=verdicts,
        severity=severity(cfg),
        dataset=cfg.dataset.name,
        model=cfg.model.name,
        seed=int(cfg.seed),
        device=cfg.device.name,
        schema_id=SCHEMA_ID,
        started_at=datetime.now(UTC),
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        host=socket.gethostname(),
        config_yaml=recipe_yaml(cfg),
    )
    try:
        device = resolve_device(cfg.device.name)
        record["device_name"] = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.machine()
        torch.set_num_threads(cfg.run.threads or len(os.sched_getaffinity(0)))  # 0: every core this process may use
        record["threads"] = torch.get_num_threads()
        # Dead units and vanishing updates leave denormal floats in Adam's moments, which run up to ten
        # times slower on CPUs; flushing them to zero changes nothing a measurement can see.
        torch.set_flush_denormal(True)
        seed_everything(cfg.seed)
        record.update(measure(cfg, device, deadline=started + cfg.run.time_limit_s))
        bad = [k for k in REQUIRED_FINITE if not math.isfinite(record[k])]
        if bad:
            raise FloatingPointError(f"non-finite required measurement: {', '.join(bad)}")
        record["status"] = "ok"
    except DeviceUnavailable as unavailable:
        record.update(status="skipped", error=str(unavailable))
    except Exception as error:  # noqa: BLE001 - a cell must never take the sweep down
        record.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000])
        print(f"cell {record['cell_id']} failed: {record['error']}", file=sys.stderr)
    record["wall_s"] = time.perf_counter() - started
    return record
