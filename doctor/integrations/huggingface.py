"""The doctor on a Hugging Face Trainer run, in one line: Trainer(..., callbacks=[DoctorTrainerCallback()]).

    doctor = DoctorTrainerCallback()               # or DoctorTrainerCallback(loss_fn, validation=..., ...)
    trainer = Trainer(model, args, train_dataset=train, callbacks=[doctor])
    trainer.train()
    print(doctor.report)                           # the verdict alone is logged under "doctor" when training ends
    doctor.report_dict()                           # the same as a JSON-ready dict

A TrainerCallback is shown neither the batch nor the loss, so the callback watches the model instead: a forward
pre-hook sees each training batch (the Trainer calls model(**batch), so the keyword arguments are the batch), a
forward hook reads the loss and hooks the model's own loss and the output the loss reads, and the first of them
the backward reaches tells the doctor when the backward pass has ended (under bf16 or fp16 the Trainer's loss is
cast to fp32 apart from the logits, so its backward never passes through the cast logits). Forwards under
torch.no_grad() or in eval mode (evaluation, prediction) and the doctor's own forwards are not training batches and
are left alone.

`loss_fn(logits, labels)` must compute the loss the way the model does. Left out, the doctor uses the loss the
targets imply, as the Trainer's heads compute it: cross-entropy for integer labels, binary cross-entropy on the
logits for multi-label rows, mean squared error for regression (doctor/integrations/__init__.py, `ImpliedLoss`),
once it has reproduced the model's own loss on the first batch (else it gives up on the run in one line that says
to pass loss_fn; a loss the Trainer has the model divide over an accumulation group is not compared, and the
log says the loss was not checked). The doctor uses it to evaluate `validation` and the last training batches, to
memorize, and as the training loss where the model returns none of its own. A language model's or a tagger's
(batch, time, V) logits against (batch, time) labels are the sequence task; a causal language model, which shifts
its labels itself, is read so from its own loss on the first batch (doctor/task_reading.py: causal_shift), and padding
its labels do not leave out is padding_in_loss (counted by harness/instruments/padding.py, judged by the check in
analysis/checks/language.py).

Under DDP (torchrun; on the CPU TrainingArguments(use_cpu=True, ddp_backend="gloo")) the callback on each rank
watches the model inside the wrapper and reports at on_train_end on every rank, where the ranks' evidence is
gathered (docs/doctor.md, "Several processes"); the main process alone logs the verdict.

A training that raises: a TrainerCallback hears of no exception (transformers 5 has no such event, and nothing of
train() runs in a finally), so the callback takes the hooks off where an exception passes through code of its
own. It wraps the model's forward for the run (`ForwardGuard`, as accelerate wraps it for autocast): whatever
fails inside the model, the loss of a model given its labels included, and a KeyboardInterrupt during the
forward, ends the watch on its way out. An exception out of the callback's hooks or the doctor's code does too.
(torch's always_call forward hooks see a failed forward as well, but a hook cannot take the model's forward
hooks off from in there: torch is iterating over them.) What fails elsewhere (the data, the optimizer, backward,
another callback) leaves the hooks on until `callback.close()` (or `with callback: trainer.train()`), or until a
doctor callback next starts training on the same model.

Resuming: the callback is an ExportableState, so the Trainer writes its state() into each checkpoint's
trainer_state.json (under "stateful_callbacks"). The Trainer restores such states only with
restore_callback_states_from_checkpoint=True, and then by replacing the callback with a new one built from the
JSON (no loss_fn, none of the user's keywords, not the object the user holds); so the callback restores
itself in on_train_begin from the resumed TrainerState, which holds the same JSON whatever that flag says.
"""

import functools
import time
import weakref
from functools import partial
from types import MethodType

import torch
from torch import nn
from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from doctor.integrations import LOG, Outcome, knobs
from doctor.refusals import CannotJudge
from doctor.watch import Doctor
from harness.torch_private import queue_after_backward

# What the Trainer adds to model(**batch) that is not the batch (it passes it to models whose forward takes
# **kwargs, to normalize a loss over gradient accumulation).
TRAINER_KWARGS = ("num_items_in_batch",)


class ForwardGuard:
    """The model's forward wrapped for a run: an exception out of it calls `raised()` first, then goes on unchanged.

    Installed as accelerate installs its autocast wrapper: a method bound to the model over the underlying
    function, so that a deepcopy of the model binds it to the copy (whose failures are not this run's), and with
    the forward's own signature (functools.wraps), which the Trainer reads to pick the batch's columns. `remove()`
    puts back what was there, unless something has wrapped the forward over it since; then it stays, passing
    calls through.
    """

    def __init__(self, model: nn.Module, raised):
        self.model = model
        self.previous = model.__dict__.get("forward")  # an instance attribute (accelerate's wrapper), or None
        forward = model.forward
        underlying = getattr(forward, "__func__", None)
        watched, notify = weakref.ref(model), weakref.WeakMethod(raised)  # a guard left behind holds neither

        def guarded(module, *args, **kwargs):
            try:
                return underlying(module, *args, **kwargs) if underlying is not None else forward(*args, **kwargs)
            except BaseException:
                if module is watched() and notify() is not None:
                    notify()()  # inside the forward: torch has not begun iterating over its forward hooks
                raise

        functools.update_wrapper(guarded, underlying if underlying is not None else forward)
        self.installed = MethodType(guarded, model)
        model.forward = self.installed

    def remove(self) -> None:
        if self.model.__dict__.get("forward") is not self.installed:
            return  # already removed, or wrapped over since
        if self.previous is None:
            del self.model.forward
        else:
            self.model.forward = self.previous


def ending_watch_on_error(hook):
    """A hook of the callback's whose exception ends the doctor's watch before it goes on out of the forward."""

    @functools.wraps(hook)
    def guarded(self, *args):
        try:
            return hook(self, *args)
        except BaseException:
            self.close()
            raise

    return guarded


# The Trainer's own settings for the checks' advice (transformers 5: TrainingArguments and Trainer's parameters).
TRAINER_KNOBS = knobs(
    "the Trainer",
    {
        "lr_too_high": "in the Trainer: TrainingArguments(learning_rate=) 10x smaller, or a warm-up (warmup_steps=)",
        "lr_too_low": "in the Trainer: TrainingArguments(learning_rate=) 10x larger",
        "still_improving": "in the Trainer: more TrainingArguments(num_train_epochs=), or a larger max_steps=",
        "starved_loader": "in the Trainer: TrainingArguments(dataloader_num_workers=4, dataloader_pin_memory=True)",
        "weight_decay_dominates": "in the Trainer: a smaller TrainingArguments(weight_decay=)",
        "over_clipped": "in the Trainer: a larger TrainingArguments(max_grad_norm=) (1.0 by default)",
        "exploding_gradients": "in the Trainer: TrainingArguments(max_grad_norm=1.0) clips them",
        "warmup_never_ends": "in the Trainer: TrainingArguments(warmup_steps=, lr_scheduler_type=) count optimizer"
        " steps; a scheduler given as Trainer(optimizers=(optimizer, scheduler)) is stepped once per optimizer step",
        "rate_decayed_early": "in the Trainer: a scheduler given as Trainer(optimizers=(optimizer, scheduler)) is"
        " stepped once per optimizer step, so give it its length in optimizer steps (or use"
        " TrainingArguments(lr_scheduler_type=))",
        "overfitting": "in the Trainer: TrainingArguments(weight_decay=, eval_strategy=, load_best_model_at_end=True)"
        " with callbacks=[EarlyStoppingCallback()]",
        "params_left_out": "in the Trainer: leave Trainer(optimizers=) unset (the Trainer builds its optimizer over"
        " every trainable parameter), or build yours from model.parameters()",
        "params_not_updated": "in the Trainer: leave Trainer(optimizers=) unset, or build yours from the model"
        " the Trainer is given, after it is final",
        "class_imbalance": "in the Trainer: a weighted loss through Trainer(compute_loss_func=)",
    },
)


class DoctorTrainerCallback(Outcome, TrainerCallback, ExportableState):
    """Watches a Hugging Face Trainer's training with the doctor; `report` (and `report_dict()`) once it has ended.

    `loss_fn(logits, labels)`: see the module docstring (default: the loss the labels imply, checked).
    Any other keyword is passed to Doctor: validation= (batches as the model takes them, dicts with "labels"),
    model_factory= (a function returning a fresh model, for the memorization check), inputs=/targets=/output=,
    census_every=, ...
    """

    KNOBS = TRAINER_KNOBS

    def __init__(self, loss_fn=None, **doctor_kwargs):
        self.loss_fn = loss_fn  # None: the loss the targets imply (ImpliedLoss), checked against the model's own
        self.doctor_kwargs = doctor_kwargs
        self._hooks: list = []
        self._batch = None  # the training batch the model is running on now
        self._busy = False  # inside the doctor's own code, whose forward passes are not the Trainer's
        self._ready_at = 0.0  # when the loop was last ready for a batch: waiting for one starts then
        self._log = True

    # ----- training start: the doctor around the model and the optimizer ---------------------------------------
    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        # accelerate's AcceleratedOptimizer wraps the torch optimizer; the step hooks go on the one that steps,
        # and the wrapper holds the GradScaler when training in fp16.
        inner = getattr(optimizer, "optimizer", optimizer)
        scaler = getattr(optimizer, "scaler", None)

        def build() -> Doctor:
            if args.label_smoothing_factor:
                raise CannotJudge(
                    "with label_smoothing_factor the Trainer takes the labels out of the batch before calling the"
                    " model, so the doctor never sees them: run it without label smoothing"
                )
            return self._built(Doctor(model, inner, self._doctor_loss(), scaler=scaler, **self.doctor_kwargs))

        resumed = state.global_step > 0  # the TrainerState was loaded from the checkpoint it resumes from
        if resumed:
            self._resume(args, state)
        self._start(build, model, resumed)
        self._log = state.is_world_process_zero
        if self.doctor is not None:
            self._hooks = [
                model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                model.register_forward_hook(self._after_forward, with_kwargs=True),
                ForwardGuard(model, self._forward_raised),
            ]
        self._ready()

    # When the loop was last ready for a batch: the end of a step or substep, and of logging, evaluating or saving
    # between steps (none of which is waiting for data); the wait then runs to the next training forward.
    def _ready(self, *_args, **_kwargs) -> None:
        self._ready_at = time.perf_counter()

    on_epoch_begin = on_step_end = on_substep_end = on_log = on_evaluate = on_save = _ready

    # ----- each training forward and backward ---------------------------------------------------------------
    def _training(self, module) -> bool:
        return self.doctor is not None and not self._busy and torch.is_grad_enabled() and module.training

    def _forward_raised(self) -> None:
        """The model's forward raised: training is over, unless the forward was the doctor's own.

        An exception in the doctor's own forward is the doctor's to handle; if it goes on out of the doctor's
        code, _call ends the watch then.
        """
        if not self._busy:
            self.close()

    @ending_watch_on_error
    def _before_forward(self, module, _args, kwargs) -> None:
        if not self._training(module):
            return
        self._batch = {k: v for k, v in kwargs.items() if k not in TRAINER_KWARGS}
        self._call("see", self._batch, time.perf_counter() - self._ready_at)

    @ending_watch_on_error
    def _after_forward(self, module, _args, kwargs, output) -> None:
        if not self._training(module) or self._batch is None:
            return
        logits = self.doctor.layout.output_or_none(output)
        if logits is None or not logits.requires_grad:
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        own_loss = loss  # the model's own, in the graph the Trainer's backward runs through (if the model gave one)
        targets = self.doctor.instruments.last_targets  # split by see()
        divided = any(k in kwargs for k in TRAINER_KWARGS)  # the model's loss may be divided over a whole group
        if self._loss_unchecked and torch.is_tensor(loss):
            # Without loss_fn: the loss the targets imply must give the model's own loss (ImpliedLoss); a miss ends
            # the doctor's part in the run (logged), not the run.
            with self._judging():
                self.loss_used.check(logits, targets, loss, strict=not divided, items=kwargs.get(TRAINER_KWARGS[0]))
        if self.doctor is None:
            return
        if not torch.is_tensor(loss) or divided:
            # No loss of the model's own, or one divided over a whole accumulation group: the loss as computed.
            loss = self.loss_used(logits.detach(), targets)
        self._batch = None
        # after_backward must run once backward has filled .grad, and before the Trainer clips (on_substep_end and
        # on_pre_optimizer_step come after clip_grad_norm_: the census would read clipped gradients, and the
        # clipping reading would always find nothing clipped). A hook on the output fires during backward;
        # a callback it queues runs when the whole backward pass has ended, as DistributedDataParallel's does.
        # Hooked on the model's own loss and on the logits, whichever the backward reaches first: under mixed
        # precision (bf16=True, fp16=True) accelerate hands the Trainer each output tensor cast to fp32 apart, so
        # the loss it back-propagates does not pass through the cast logits, and a hook there alone never fired.
        reached = partial(self._gradient_reached_output, loss.detach(), [])
        for tensor in (own_loss, logits):
            if torch.is_tensor(tensor) and tensor.requires_grad:
                tensor.register_hook(reached)

    def _gradient_reached_output(self, loss: torch.Tensor, queued: list, _grad: torch.Tensor) -> None:
        if queued:  # the backward reached the other tensor hooked for this forward first
            return
        queued.append(True)
        if not queue_after_backward(partial(self._call, "after_backward", loss)):
            # No way, in this torch, to run once the whole backward pass has ended: rather than read gradients
            # half filled, or after the Trainer clipped them, the doctor gives up on this run (it says so).
            self._give_up(
                "this torch's autograd engine offers no queue for a callback after backward (harness/torch_private.py"
                "); the Hugging Face callback needs one: use the plain loop's three lines (docs/doctor.md)"
            )

    def _call(self, method: str, *args) -> None:
        """A doctor method, its own forward passes left alone; a CannotJudge ends the doctor's part in the run."""
        if self.doctor is None:
            return
        self._busy = True
        try:
            with self._judging():  # a CannotJudge: the doctor gave up, and its hooks and these are off
                getattr(self.doctor, method)(*args)
        except BaseException:
            # Any other exception goes on out of the model's forward or out of backward, and out of train().
            self.close()
            raise
        finally:
            self._busy = False

    # ----- training end: the report -------------------------------------------------------------------------------
    def on_train_end(self, args, state, control, **kwargs):
        self._conclude(log=self._log)

    # ----- checkpoints ---------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """What the Trainer writes to a checkpoint's trainer_state.json: the steps watched so far and the fit's start.

        No "args": the callback's own (the loss, the validation batches) are no JSON; `_resumed` is the attribute
        the state is restored to.
        """
        return {"args": {}, "attributes": {"_resumed": self._checkpoint_state()}}

    def _resume(self, args, state) -> None:
        """Continue from the state a callback of this class saved in the checkpoint (the first, if several did)."""
        saved = (state.stateful_callbacks or {}).get(type(self).__name__)  # the key the Trainer saves it under
        if isinstance(saved, list):
            saved = saved[0] if saved else None
        if saved and args.restore_callback_states_from_checkpoint:
            LOG.warning(
                "doctor: restore_callback_states_from_checkpoint=True made the Trainer replace the doctor's callback"
                " by %s() rebuilt from the checkpoint: the default loss, no validation, and the object you hold gets"
                " no report. Leave it False: the callback resumes itself",
                type(self).__name__,
            )
        self._restore((saved or {}).get("attributes", {}).get("_resumed"))
