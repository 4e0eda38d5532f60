"""The doctor where users already train: a PyTorch Lightning Callback and a Hugging Face TrainerCallback.

    from doctor.integrations.lightning import DoctorCallback             # imports lightning
    from doctor.integrations.huggingface import DoctorTrainerCallback    # imports transformers

Each callback builds a Doctor (doctor/watch.py) when training starts, feeds it each training batch and each
backward pass through the framework's hooks, and at the end of training computes the report, keeps it and logs
one line under the logger "doctor": the verdict and how to see the report (print(callback.report)), so that a
user who prints it sees it once. This module holds what the two share and imports neither library, so that the
doctor itself needs neither (they are the optional extra `integrations` of pyproject.toml): the end of a run, and
the loss a callback given none evaluates with (`ImpliedLoss`: the one the targets imply, checked against the
training loss of the first batch).

Two ways a fit stops short are shared too. A fit that raises gets no report, and the doctor's hooks come off the
model, its parameters, the loss and the optimizer (`let_go`), so that they are left as they were. A fit saved to a
checkpoint and resumed from it is one run: the checkpoint carries `Carried` (the steps watched so far and what
only the run's start could measure), and the resumed part's report counts from the fit's first step.

Under torch.distributed (DDP under torchrun) each rank's callback makes its report at the end of training, where
every rank's evidence is gathered (doctor/distributed.py); a rank whose doctor gave up during training still
meets that gather (`distributed.absent`), so that the others' reports do not wait for it.
"""

import contextlib
import dataclasses
import logging
import math
import weakref
from collections.abc import Callable, Mapping
from types import MappingProxyType

import torch
import torch.nn.functional as F
from torch import nn

from analysis.checks import CHECKS
from doctor import distributed
from doctor.diagnosis import diagnose
from doctor.observed import Observed
from doctor.refusals import CannotJudge
from doctor.report import Report
from doctor.task_reading import only_shifted_reproduces
from doctor.watch import Doctor
from harness.targets import INDEX_TASKS, in_classes, task_of

LOG = logging.getLogger("doctor")

# The columns only a run's first steps can measure: the first loss (against ln C, and what the final loss is
# compared with) and the activations and gradients on the initial weights (harness/instruments/losses.py,
# activations.py, census.py). A part resumed from a checkpoint starts on trained weights, which must not be read
# as the initialization (a rate too high that killed ReLU units would read as units dead at initialization).
START_COLUMNS = (
    "first_loss",
    "dead_unit_share_init",
    "saturated_share_init",
    "activation_growth_init",
    "grad_depth_ratio_init",
)

# The model each callback's doctor is watching: a callback starting on a model that another one still watches
# (whose training raised where no hook of the doctor saw it) takes that one's hooks off first.
WATCHING: "weakref.WeakKeyDictionary[nn.Module, Outcome]" = weakref.WeakKeyDictionary()


def knobs(integration: str, advice: Mapping[str, str]) -> Mapping[str, str]:
    """An integration's own knob for each check's advice, keyed by the check's verdict, validated at import.

    A key that is no check's verdict raises, naming the valid ones: advice for a verdict no check gives is never seen.
    """
    verdicts = {check.verdict for check in CHECKS}
    unknown = sorted(set(advice) - verdicts)
    if unknown:
        raise ValueError(
            f"{integration} knobs for {', '.join(unknown)}: not a check's verdict ({', '.join(sorted(verdicts))})"
        )
    return MappingProxyType(dict(advice))


def with_knobs(report: Report, advice: Mapping[str, str]) -> Report:
    """The report with each finding's next step followed by the integration's own knob for it, where there is one.

    The checks' advice speaks of a plain loop (optimizer.zero_grad(), DataLoader(num_workers=)); a Trainer's user
    sets those through the integration (TrainingArguments, the Lightning Trainer), and is told which setting.
    """
    findings = tuple(
        dataclasses.replace(f, next_step=f"{f.next_step}; {advice[f.verdict]}") if f.verdict in advice else f
        for f in report.findings
    )
    return dataclasses.replace(report, findings=findings)


@dataclasses.dataclass(frozen=True)
class Carried:
    """What a checkpoint carries of the doctor's watch, so that a fit resumed from it is reported as one run.

    `steps`: backward passes watched from the fit's first step to the checkpoint. `start`: the START_COLUMNS as the
    fit's first part measured them (empty where it had not: a checkpoint before the first step, or one saved by a
    fit the doctor did not watch). `val_start`: the validation (loss, score) before the first step, if any. Only
    plain numbers: Lightning pickles them into its checkpoint, the Trainer writes them to trainer_state.json.
    """

    steps: int = 0
    start: Mapping[str, float] = dataclasses.field(default_factory=dict)
    val_start: tuple[float, float] | None = None

    def to_dict(self) -> dict:
        return {"steps": self.steps, "start": dict(self.start), "val_start": self.val_start}

    @classmethod
    def from_dict(cls, saved: Mapping) -> "Carried":
        val_start = saved.get("val_start")
        return cls(int(saved["steps"]), dict(saved.get("start") or {}), tuple(val_start) if val_start else None)

    def onto(self, observed: Observed) -> Observed:
        """The resumed part's observation as the whole fit's: steps counted from the fit's first step, and the start.

        The curves and the other measurements stay the resumed part's own (the doctor watched only it); the
        start-of-run columns are the first part's, NaN where none was carried, never the resume point's.
        """
        start = {name: float(self.start.get(name, math.nan)) for name in START_COLUMNS}
        return dataclasses.replace(
            observed,
            measurements=MappingProxyType({**observed.measurements, **start}),
            steps=self.steps + observed.steps,
            val_start=self.val_start,
        )


def _cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs.float(), targets if not targets.is_floating_point() else targets.float())


def _cross_entropy_per_position(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(outputs.float().reshape(-1, outputs.shape[-1]), targets.reshape(-1))  # ignores -100


def _bce_with_logits(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(outputs.float(), targets.float().reshape(outputs.shape))


def _mse(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(outputs.float(), targets.float().reshape(outputs.shape))


# The loss each task (harness/targets.py) implies, as a framework's own heads compute it: what a callback given no
# loss_fn evaluates with, by name and function.
IMPLIED_LOSSES: dict[str, tuple[str, Callable]] = {
    "multiclass": ("cross-entropy on the logits", _cross_entropy),
    "onehot": ("cross-entropy on the logits", _cross_entropy),
    "binary": ("binary cross-entropy on the logits", _bce_with_logits),
    "multilabel": ("binary cross-entropy on the logits", _bce_with_logits),
    "regression": ("mean squared error", _mse),
    "sequence": ("cross-entropy on the logits of each position", _cross_entropy_per_position),
}


class ImpliedLoss:
    """The loss a callback given no `loss_fn` uses: the one the task read from the first batch implies.

    Cross-entropy for class indices and one-hot rows, binary cross-entropy on the logits for binary and multi-label
    targets, mean squared error for regression (IMPLIED_LOSSES). The doctor computes its evaluation losses (on the
    last training batches and on `validation`), memorization and the capacity fit with it, and compares them with
    the loss training computed (the share of the first loss left): so it must be that loss. The callback checks it
    (`check`) on the first batch whose training loss it sees, against that loss on the same output; where they
    differ (label smoothing, class weights, a loss of several terms) the doctor gives up on the run, in one line
    that says to pass the loss. Not an nn.Module: the doctor's check of the targets the loss receives
    (targets_changed_in_loop) hooks the loss module the loop calls, and the loop never calls this one.
    """

    def __init__(self):
        self.doctor: Doctor | None = None  # whose task it reads (set once the doctor is built)
        self.checked: bool | None = None  # None until checked; False where no training loss could be compared

    @property
    def task(self) -> str | None:
        task = self.doctor.task if self.doctor is not None else None
        return task.kind if task is not None else None

    def __call__(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        task = self.task or task_of(targets, outputs)  # read by the doctor at the first batch, before any call
        return IMPLIED_LOSSES[task][1](outputs, targets)

    def described(self) -> str:
        """What the doctor evaluated with, and whether it matched the training loss: for the log and the docs."""
        name = IMPLIED_LOSSES[self.task][0] if self.task is not None else "the loss the task implies"
        if self.checked:
            return f"{name}, the loss the targets imply (it reproduced the training loss of the first batch)"
        return f"{name}, the loss the targets imply (not checked against the training loss)"

    def check(
        self, outputs: torch.Tensor, targets: torch.Tensor, loss: torch.Tensor, strict: bool = True, items=None
    ) -> None:
        """Check it against the training `loss` computed from `outputs` and `targets`: CannotJudge if it differs.

        A non-finite loss compares nothing (the next batch is checked). `strict=False` where the loss seen may not be
        this batch's own mean (divided over a gradient-accumulation group): a miss leaves it unchecked. `items`:
        what the model divided its summed loss by in place of the positions it scored (the Trainer's
        num_items_in_batch, counted over a whole accumulation group and over every rank, and by the Trainer's own
        reading of the labels): for class indices the two are then compared as sums too, the implied loss times the
        labels it averages over against the loss seen times `items`, and either agreeing checks it.
        """
        with torch.no_grad():
            computed, seen = float(self(outputs.detach(), targets)), float(loss.detach())
            kind = self.task or task_of(targets, outputs)
            pairs = [(computed, seen)]
            if items is not None and kind in INDEX_TASKS:
                # As sums, where the model divided by `items`; as means (above), where it takes num_items_in_batch
                # and leaves it unused (a BERT classifier's head): then `items` differs from this batch's labels
                # under accumulation, and under DDP, where the Trainer counts them over every rank.
                labels = int(in_classes(targets, outputs.shape[-1]).sum())  # the labels cross-entropy averages
                pairs.append((computed * labels, seen * float(items)))
        if not all(math.isfinite(value) for value in pairs[0]):
            return
        # Within the resolution of the format the loss was computed in: a bfloat16 module's own loss (Lightning's
        # "bf16-true") differs from the same cross-entropy in float32 by up to a few of bfloat16's 2^-7 steps.
        resolution = max(torch.finfo(t.dtype).eps for t in (outputs, loss) if t.is_floating_point())
        tolerance = max(1e-3, 2 * resolution)
        self.checked = any(math.isclose(a, b, rel_tol=tolerance, abs_tol=1e-6) for a, b in pairs)
        if strict and not self.checked:
            raise CannotJudge(self._refusal(outputs, targets, seen, computed))

    def _refusal(self, outputs: torch.Tensor, targets: torch.Tensor, seen: float, computed: float) -> str:
        """Why the training loss is not the implied one, in one line; a shift the loop made itself is named."""
        kind = self.task or task_of(targets, outputs)
        if kind == "sequence":
            with torch.no_grad():
                in_the_loop = only_shifted_reproduces(self, outputs.detach(), targets, seen, fill=-100)
            if in_the_loop:
                return (
                    f"no loss_fn was given, and the loss training computed on the first batch ({seen:.4g}) scores the"
                    " output at each position against the next position's target, a causal shift made where the"
                    " doctor cannot read it from the model's own loss: give the batches targets already shifted"
                    " (inputs tokens[:, :-1], targets tokens[:, 1:]), or have the model's forward take the labels"
                    " and return its own loss"
                )
        return (
            f"no loss_fn was given, and the loss training computed on the first batch ({seen:.4g}) is not"
            f" {IMPLIED_LOSSES[kind][0]} ({computed:.4g}), the loss its targets imply: pass the loss training"
            " computes from the model's output and the targets, loss_fn=..."
        )


class Outcome:
    """What a callback keeps of the doctor's judgment: the report, or the one line saying why there is none.

    A run the doctor cannot judge (CannotJudge: a batch it cannot read, a task it does not cover) is logged as a
    warning and the training goes on without the doctor: a diagnosis must never stop the user's run. A callback
    subclassing it keeps the handles of the hooks it puts on the model itself in `self._hooks`.
    """

    doctor: Doctor | None = None
    report: Report | None = None  # set at the end of training
    cannot_judge: str | None = None  # why there is no report: the doctor refused the run, or training stopped short
    # Backward passes watched before the checkpoint this fit was last resumed from (None: not resumed).
    resumed_after: int | None = None
    _resumed: Carried | None = None  # loaded from a checkpoint, for the next start
    _earlier: Carried | None = None  # the fit's parts before this doctor's (None: it watches from the first step)
    _start_seen: Mapping[str, float] | None = None  # this doctor's START_COLUMNS, once measured
    _final: Carried | None = None  # what a checkpoint saved after training ended carries
    # (rank, world size) of a doctor under torch.distributed that gave up during training: at the end of training
    # it still meets the other ranks' gather (distributed.absent), or their reports would wait for it.
    _absent_from: tuple[int, int] | None = None
    _hooks: list  # the callback's own hooks' handles, set in its __init__
    loss_fn: Callable | None = None  # the user's loss, if given (set in the callback's __init__)
    loss_used: Callable | None = None  # what the doctor of the last run evaluates with: loss_fn, or an ImpliedLoss
    KNOBS: Mapping[str, str] = MappingProxyType({})  # the integration's own setting for a verdict's advice (`knobs`)

    def report_dict(self) -> dict:
        """The report as a JSON-ready dict (Report.to_dict); {"verdict": None, "cannot_judge": why} without one."""
        if self.report is not None:
            return self.report.to_dict()
        return {"verdict": None, "cannot_judge": self.cannot_judge or "training has not ended"}

    def close(self) -> None:
        """Take the doctor's hooks off now if it is still watching: for a training that raised where no hook saw it.

        A training that ended has none left; one that raised gets no report. `with callback: trainer.train()`
        calls it on the way out.
        """
        if self.doctor is not None:
            self._let_go("training stopped before its end: there is no report")

    def __enter__(self) -> "Outcome":
        return self

    def __exit__(self, *_exception) -> None:
        self.close()

    def _doctor_loss(self) -> Callable:
        """The loss this run's doctor evaluates with: the user's, or a fresh ImpliedLoss (checked once per run)."""
        self.loss_used = self.loss_fn if self.loss_fn is not None else ImpliedLoss()
        return self.loss_used

    def _built(self, doctor: Doctor) -> Doctor:
        """The run's doctor, built around `loss_used`: an ImpliedLoss reads the task the doctor reads."""
        if isinstance(self.loss_used, ImpliedLoss):
            self.loss_used.doctor = doctor
        return doctor

    @property
    def _loss_unchecked(self) -> bool:
        """Whether the run's ImpliedLoss still waits for a training loss to be checked against."""
        return isinstance(self.loss_used, ImpliedLoss) and self.loss_used.checked is None

    def _start(self, doctor_factory, model: nn.Module, resumed: bool) -> None:
        """A new doctor for a new run (or the next part of a resumed one): the last run's report is forgotten.

        `resumed`: the framework resumes training from a checkpoint.
        """
        self.close()  # this callback's last run raised where no hook saw it
        previous = WATCHING.get(model)
        if previous is not None:
            previous.close()  # another callback's run on this model did
        self.report, self.cannot_judge, self.doctor, self._final, self._start_seen = None, None, None, None, None
        if resumed and self._resumed is None:
            LOG.warning(
                "doctor: training resumes from a checkpoint that holds no state of the doctor's: the report counts"
                " the steps from here, and what only the run's start measures (the first loss, the initial"
                " weights) is not measured"
            )
        self._earlier = (self._resumed or Carried()) if resumed else None
        self._resumed, self._absent_from = None, None
        self.resumed_after = self._earlier.steps if self._earlier is not None else None
        with self._judging():
            self.doctor = doctor_factory()
        if self.doctor is not None:
            WATCHING[model] = self

    @contextlib.contextmanager
    def _judging(self):
        """Run doctor code; a CannotJudge, or any error of the doctor's own, ends its part in this run, not the run.

        The doctor's code here includes its own passes through the user's model (its evaluation of validation, its
        fits of fresh copies): an error there is the doctor's, said once in the log, and training goes on without it.
        A KeyboardInterrupt goes on out, as from any other code of the run.
        """
        try:
            yield
        except CannotJudge as error:
            self._give_up(str(error))
        except Exception as error:  # noqa: BLE001 - a diagnosis must never stop the user's run
            self._give_up(
                f"the doctor's own code raised {type(error).__name__}: {error} (training goes on without it; a"
                " traceback through the doctor's frames is a bug in the doctor: please report it)"
            )

    def _give_up(self, why: str) -> None:
        if self.cannot_judge is None:
            LOG.warning("doctor: cannot judge this run: %s", why)
        self._let_go(why)

    def _let_go(self, why: str) -> None:
        """The doctor's part in this run is over without a report: every hook off, the steps it watched kept."""
        self._remove_hooks()
        if self.cannot_judge is None:
            self.cannot_judge = why
        if self.doctor is not None:
            self._final = self._carry()
            ranks = self.doctor.ranks
            self._absent_from = (ranks.rank, ranks.world_size) if ranks is not None else None
            let_go(self.doctor)
            self._forget_doctor()

    def _remove_hooks(self) -> None:
        """The hooks the callback put on the model itself (the doctor's own come off in let_go)."""
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def _forget_doctor(self) -> None:
        for model, watcher in list(WATCHING.items()):
            if watcher is self:
                del WATCHING[model]
        self.doctor = None

    def _conclude(self, log: bool = True) -> None:
        """The report at the end of training, its verdict logged in one line (`_verdict_line`)."""
        self._remove_hooks()
        if self.doctor is None:
            if self._absent_from is not None:  # gave up under torch.distributed: the other ranks wait in a gather
                distributed.gather(distributed.absent(*self._absent_from, self.cannot_judge))
                self._absent_from = None
            return
        with self._judging():
            observed = self.doctor.finish()  # its hooks come off here
            self._final = self._carry(observed.measurements)
            if self._earlier is not None:
                observed = self._earlier.onto(observed)
            self.report = with_knobs(diagnose(observed), self.KNOBS)
        self._forget_doctor()  # a later run builds a new one
        if self.report is not None and log:
            LOG.log(*self._verdict_line())

    def _verdict_line(self) -> tuple:
        """The one line logged when training ends: the verdict, and how to see the report (not the report itself).

        A warning unless healthy (a fault must be seen), else info. The report is printed by whoever wants it: a
        log of the whole report and the user's own print(callback.report) would show it twice.
        """
        report = self.report
        level = logging.INFO if report.verdict == "healthy" else logging.WARNING
        resumed = "" if self.resumed_after is None else f", resumed after {self.resumed_after} steps"
        loss = self.loss_used
        used = f"; evaluated with {loss.described()}" if isinstance(loss, ImpliedLoss) else ""
        return (
            level,
            "doctor: verdict: %s  (from %d training steps%s%s); the findings and next steps: print(callback.report),"
            " as JSON: callback.report_dict()",
            report.headline,
            report.steps,
            resumed,
            used,
        )

    # ----- checkpoints --------------------------------------------------------------------------------------------
    def _checkpoint_state(self) -> dict:
        """What a checkpoint saved now carries (Carried.to_dict): the steps so far, and the fit's start."""
        if self.doctor is None:
            return (self._final or self._earlier or Carried()).to_dict()
        if self._earlier is None and self._start_seen is None and self.doctor.steps > 0:
            # Measured once: they are fixed after the first step. The snapshot's forwards run under no_grad, which
            # the callbacks' hooks leave alone.
            with self._judging():
                self._start_seen = self.doctor.instruments.snapshot()
        return self._carry().to_dict()

    def _carry(self, measured: Mapping | None = None) -> Carried:
        """The watch so far as a checkpoint carries it; `measured` holds this doctor's START_COLUMNS, if at hand."""
        doctor, earlier = self.doctor, self._earlier
        if earlier is not None:  # the fit's start was carried in: it stays
            return Carried(earlier.steps + doctor.steps, earlier.start, earlier.val_start)
        seen = measured if measured is not None else self._start_seen or {}
        start = {name: float(seen[name]) for name in START_COLUMNS if name in seen}
        return Carried(doctor.steps, start, doctor.val_start)

    def _restore(self, saved: Mapping | None) -> None:
        """A checkpoint's Carried.to_dict(), for the next start (a fit resumed from it)."""
        self._resumed = Carried.from_dict(saved) if saved else None


def let_go(doctor: Doctor) -> None:
    """Take the doctor's hooks off the model, its parameters, the loss and the optimizer, and measure nothing.

    Each instrument's close() removes its own hooks (harness/instruments/loop.py). Not Instruments.finish(): that
    measures too, and after an exception (out of memory, say) measuring would run forwards on a failed run.
    """
    for instrument in doctor.instruments.collectors:
        instrument.close()
    if doctor.ranks is not None:  # the rank's own readings for the checks across ranks (finish() closes it too)
        doctor.ranks.close()
