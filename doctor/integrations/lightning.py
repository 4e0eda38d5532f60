"""The doctor on a PyTorch Lightning run, in one line: Trainer(..., callbacks=[DoctorCallback()]).

    doctor = DoctorCallback(validation=val_loader)   # any Doctor keyword argument; loss_fn= optional
    trainer = lightning.Trainer(max_steps=600, callbacks=[doctor])
    trainer.fit(module, train_loader)
    print(doctor.report)            # the verdict alone is logged under the logger "doctor" when fit ends
    doctor.report_dict()            # the same as a JSON-ready dict

The callback builds a Doctor (doctor/watch.py) around the LightningModule and the trainer's optimizer when fit
starts, shows it each training batch (on_train_batch_start) and each backward pass (on_after_backward, with the
loss on_before_backward saw), and computes the report when fit ends. The LightningModule's forward must return
the output the loss reads, and training_step must call it (self(x), not self.net(x)): the doctor calls the
module itself to read the task, to recompute a fresh gradient on census steps and to evaluate `validation`, and
its forward hooks sit on the module. `loss_fn(output, targets)`, if given, must compute the loss as training_step
does; without it the doctor evaluates with the loss the targets imply, once it has reproduced training_step's loss
on the first batch's output (else it gives up on the run in one line that says to pass loss_fn). A module wrapping
a Hugging Face causal language model gets the causal shift read from the model's own loss when its forward takes
the labels and returns the model's output (doctor/task_reading.py: causal_shift).

With precision="16-mixed" the precision plugin's GradScaler is handed to the doctor, which then reads gradients
unscaled. Lightning's own loss normalization (divided by accumulate_grad_batches) and the scaler's scale are
taken off the loss before the doctor records it: it wants the loss as computed.

Without a GradScaler Lightning runs training_step, backward and gradient clipping inside
optimizer.step(closure), after the optimizer's step pre-hook; the instruments then read the step (its rate, the
gradient's norm at the step, the weights before the update) after the closure has run, just before the update
(harness/instruments/loop.py, `before_update`), so every measurement is what a plain loop gets. Tested with
lightning 2.6; the older package name pytorch_lightning is used when lightning is not installed.

Under DDP (strategy="ddp", launched by torchrun or by Lightning) the callback on each rank watches the
LightningModule inside the wrapper and reports at on_fit_end on every rank, where the ranks' evidence is gathered
(docs/doctor.md, "Several processes"); rank 0 alone logs the verdict.

The wait for data is the time Lightning's loop spends fetching each training batch, timed where it tells its
profiler it fetches ("train_dataloader_next"; `FetchClock`): what Lightning does between two batches besides
(other callbacks, logging, the progress bar, under DDP a broadcast each step whose wait is the other ranks') is no
wait for data. A Lightning that names no such fetch gets the time from one batch's end to the next's start.

A fit that raises calls on_exception, which takes every hook off and leaves no report. The callback's
state_dict() goes into Lightning's checkpoints: a fit resumed with fit(..., ckpt_path=...) continues the count
of steps and keeps what only the fit's start measured (doctor/integrations/__init__.py, `Carried`).
"""

import time

import torch

try:
    from lightning.pytorch import Callback
except ImportError:  # the package's older name
    from pytorch_lightning import Callback

from doctor.integrations import LOG, Outcome, knobs
from doctor.refusals import CannotJudge
from doctor.watch import Doctor
from harness.torch_private import grad_scaler_scale


class FetchClock:
    """The seconds Lightning's training loop spends fetching batches, from the profiler calls around each fetch.

    Lightning's training epoch loop calls `trainer.profiler.start/stop("[...].train_dataloader_next")` around the
    fetch of each batch (with prefetching: the fetch of the batch after, which is what the loop waits for then). The
    clock wraps those two methods on the trainer's profiler for the fit and passes every call on unchanged.
    """

    ACTION = "train_dataloader_next"

    def __init__(self, profiler):
        self.profiler, self._began, self._pending = profiler, None, None
        self._own = {name: vars(profiler).get(name) for name in ("start", "stop")}  # instance attributes to restore
        self._start, self._stop = profiler.start, profiler.stop
        profiler.start, profiler.stop = self.start, self.stop

    def start(self, action_name: str) -> None:
        self._start(action_name)
        if action_name.endswith(self.ACTION):
            self._began = time.perf_counter()

    def stop(self, action_name: str) -> None:
        if action_name.endswith(self.ACTION) and self._began is not None:
            self._pending = (self._pending or 0.0) + time.perf_counter() - self._began
            self._began = None
        self._stop(action_name)

    def take(self) -> float | None:
        """The fetching time since the last take; None where no fetch was timed (the epoch's first, prefetched)."""
        fetched, self._pending = self._pending, None
        return fetched

    def remove(self) -> None:
        """Put the profiler's own methods back."""
        for name, own in self._own.items():
            if own is None:
                vars(self.profiler).pop(name, None)
            else:
                setattr(self.profiler, name, own)


def as_the_fit_runs(precision, doctor_kwargs: dict) -> dict:
    """The callback's Doctor keywords with each fresh model from the factory converted as the fit converts its own.

    Under "64-true" or "bf16-true" the strategy converts the module at setup (the plugin's convert_module): a fresh
    copy for memorization and the capacity fit is converted the same way, so that it trains in the fit's precision.
    The batches need nothing here: the doctor's own forwards put floating inputs in the model's dtype, as Lightning's
    convert_input does to the fit's (harness/batches.py: in_dtype_of).
    """
    factory = doctor_kwargs.get("model_factory")
    if factory is None:
        return dict(doctor_kwargs)
    return {**doctor_kwargs, "model_factory": lambda: precision.convert_module(factory())}


# Lightning's own settings for the checks' advice (lightning 2: the Trainer's parameters, configure_optimizers).
LIGHTNING_KNOBS = knobs(
    "Lightning",
    {
        "lr_too_high": "in Lightning: the rate configure_optimizers() gives, 10x smaller"
        " (Tuner(trainer).lr_find(model) proposes one)",
        "lr_too_low": "in Lightning: the rate configure_optimizers() gives, 10x larger"
        " (Tuner(trainer).lr_find(model) proposes one)",
        "still_improving": "in Lightning: a larger Trainer(max_epochs=) or max_steps=",
        "starved_loader": "in Lightning: DataLoader(num_workers=, pin_memory=True, persistent_workers=True) in"
        " train_dataloader() or the DataModule",
        "weight_decay_dominates": "in Lightning: a smaller weight_decay in configure_optimizers()",
        "over_clipped": "in Lightning: a larger Trainer(gradient_clip_val=)",
        "exploding_gradients": "in Lightning: Trainer(gradient_clip_val=1.0) clips them",
        "warmup_never_ends": "in Lightning: the scheduler's \"interval\" in configure_optimizers()' lr_scheduler"
        ' config: "step" for a schedule counted in optimizer steps, "epoch" (the default) for one in epochs',
        "rate_decayed_early": "in Lightning: the scheduler's \"interval\" in configure_optimizers()' lr_scheduler"
        ' config: "epoch" (the default) for StepLR and the like, "step" only for a schedule in optimizer steps',
        "overfitting": 'in Lightning: Trainer(callbacks=[EarlyStopping(monitor="val_loss")])',
        "params_left_out": "in Lightning: build the optimizer in configure_optimizers() from self.parameters()",
        "params_not_updated": "in Lightning: build the optimizer in configure_optimizers() from self.parameters()",
        "no_zero_grad": "in Lightning: automatic optimization clears .grad itself; with"
        " self.automatic_optimization = False, call opt.zero_grad() in training_step",
        "wrong_mode": "in Lightning: the Trainer sets train() and eval() itself: look for a .eval() in"
        " training_step or a hook",
    },
)


class DoctorCallback(Outcome, Callback):
    """Watches a Lightning fit with the doctor; `report` (and `report_dict()`) once fit has ended.

    `loss_fn(output, targets)`: the loss as training_step computes it from the module's output; left out, the loss
    the targets imply (cross-entropy for class indices, binary cross-entropy on the logits for binary and
    multi-label targets, mean squared error for regression), checked against training_step's loss on the first
    batch (doctor/integrations/__init__.py, `ImpliedLoss`). Any other keyword is passed to Doctor: validation=
    (batches shaped as the training ones), model_factory= (a function returning a fresh LightningModule or model,
    for the memorization check), inputs=/targets=/output=, census_every=, ...
    """

    KNOBS = LIGHTNING_KNOBS

    def __init__(self, loss_fn=None, **doctor_kwargs):
        super().__init__()
        self.loss_fn, self.doctor_kwargs = loss_fn, doctor_kwargs
        self._loss: torch.Tensor | None = None  # the loss on_before_backward saw, as computed
        self._ready_at = 0.0  # when the loop was last ready for a batch: waiting for one starts then
        self._fetch: FetchClock | None = None  # the time Lightning spends fetching batches, for the fit
        self._forward_seen = False
        self._output: torch.Tensor | None = None  # this step's first training output, while the loss is unchecked
        # The hook that looks at the training forward: until the first backward, or until the loss is checked.
        self._hooks: list = []

    # ----- fit start: the doctor around the module and the optimizer ------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self._scaler = getattr(trainer.precision_plugin, "scaler", None)  # "16-mixed" on a GPU: a GradScaler

        def build() -> Doctor:
            optimizers = trainer.optimizers
            if len(optimizers) != 1:
                raise CannotJudge(f"the doctor watches one optimizer and this module configures {len(optimizers)}")
            loss = self._doctor_loss()  # without loss_fn: the loss the task implies, checked at the first backward
            given = as_the_fit_runs(trainer.precision_plugin, self.doctor_kwargs)
            return self._built(Doctor(pl_module, optimizers[0], loss, scaler=self._scaler, **given))

        # A fit resumed from a checkpoint has its ckpt_path; Lightning has restored the callback's state_dict
        # (load_state_dict) by now, and restores global_step only after on_fit_start.
        self._start(build, pl_module, resumed=bool(trainer.ckpt_path))
        self._forward_seen = False
        if self.doctor is not None:
            self._hooks = [pl_module.register_forward_hook(self._training_forward)]
        self._ready_at = time.perf_counter()
        if self.doctor is not None and getattr(trainer, "profiler", None) is not None:
            self._fetch = FetchClock(trainer.profiler)

    def _training_forward(self, module, _inputs, output) -> None:
        if torch.is_grad_enabled() and module.training:
            self._forward_seen = True
            if self._output is None and self._loss_unchecked and self.doctor is not None:
                output = self.doctor.layout.output_or_none(output)
                self._output = output.detach() if torch.is_tensor(output) else None

    # ----- each batch --------------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._ready_at = time.perf_counter()  # the epoch's first wait includes starting the loader's workers

    def on_validation_end(self, trainer, pl_module) -> None:
        self._ready_at = time.perf_counter()  # a validation between two batches is no wait for data

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.doctor is None:
            return
        # The fetch Lightning timed for this batch; else from the end of the last batch (or the epoch's start, or
        # a validation's end) to this one, Lightning's own work between batches included.
        fetched = self._fetch.take() if self._fetch is not None else None
        waited = fetched if fetched is not None else time.perf_counter() - self._ready_at
        self._output = None  # the training forward of this batch is the one its loss is computed from
        with self._judging():
            self.doctor.see(batch, waited)

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        loss = loss.detach()
        if self._scaler is not None and self._scaler.is_enabled():
            # Lightning scales the loss before this hook; the scale as a tensor needs no host-device sync
            # (get_scale() would wait for the GPU every step).
            scale = grad_scaler_scale(self._scaler)
            loss = loss / (scale if scale is not None else self._scaler.get_scale())
        if pl_module.automatic_optimization and trainer.accumulate_grad_batches > 1:
            loss = loss * trainer.accumulate_grad_batches  # training_step's loss was divided by it for backward
        self._loss = loss

    def on_after_backward(self, trainer, pl_module) -> None:
        if self.doctor is None or self._loss is None:
            return
        if not self._forward_seen and self._hooks:
            LOG.warning(
                "doctor: training_step did not call the LightningModule itself (self(x)): the checks read from the"
                " training forward (the task, a softmax before the loss, train/eval mode) are missing"
            )
        loss, self._loss = self._loss, None
        with self._judging():
            if self._loss_unchecked:
                self._check_loss(loss)
            self.doctor.after_backward(loss)
        if not self._loss_unchecked:
            self._remove_hooks()  # looked at once: the first backward follows the first forward

    def _check_loss(self, loss: torch.Tensor) -> None:
        """Without loss_fn: the loss the task implies must give training_step's loss on its output (ImpliedLoss)."""
        if self._output is None:  # training_step did not call the module (warned of): nothing to compare
            self.loss_used.checked = False
        else:
            self.loss_used.check(self._output, self.doctor.instruments.last_targets, loss)
        self._output = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._ready_at = time.perf_counter()

    # ----- fit end: the report -------------------------------------------------------------------------------------
    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        """A fit that failed gets no report; the hooks come off, so that the module is left as it was.

        Lightning calls it for any exception out of fit (KeyboardInterrupt included), then raises it on unchanged.
        """
        self._stop_clock()
        self.close()

    def on_fit_end(self, trainer, pl_module) -> None:
        """Compute, keep and log the report."""
        self._stop_clock()
        self._conclude(log=trainer.is_global_zero)

    def _stop_clock(self) -> None:
        if self._fetch is not None:
            self._fetch.remove()
            self._fetch = None

    # ----- checkpoints ---------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """What Lightning saves of the callback in a checkpoint: the steps watched so far and the fit's start."""
        return self._checkpoint_state()

    def load_state_dict(self, state_dict: dict) -> None:
        """From a checkpoint a fit resumes from: the next on_fit_start continues from it."""
        self._restore(state_dict)
