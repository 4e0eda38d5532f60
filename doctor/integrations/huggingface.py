"""The doctor on a Hugging Face Trainer run, in one line: Trainer(..., callbacks=[DoctorTrainerCallback()]).

    doctor = DoctorTrainerCallback()               # or DoctorTrainerCallback(loss_fn, validation=..., ...)
    trainer = Trainer(model, args, train_dataset=train, callbacks=[doctor])
    trainer.train()
    print(doctor.report)                           # also logged under the logger "doctor" when training ends
    doctor.report_dict()                           # the same as a JSON-ready dict

A TrainerCallback is shown neither the batch nor the loss, so the callback watches the model instead: a forward
pre-hook sees each training batch (the Trainer calls model(**batch), so the keyword arguments are the batch), a
forward hook reads the loss and hooks the output the loss reads, and that hook tells the doctor when the backward
pass through it has ended. Forwards under torch.no_grad() or in eval mode (evaluation, prediction) and the
doctor's own forwards are not training batches and are left alone.

`loss_fn(logits, labels)` must compute the loss the way the model does: the default, nn.CrossEntropyLoss(),
is the loss of a single-label classification head (AutoModelForSequenceClassification and the like with
integer labels); regression, multi-label or token-level heads must pass their own. The doctor uses it to
recompute a fresh gradient on census steps, to read the task, to evaluate `validation` and to memorize.
"""

import time
from functools import partial

import torch
from torch import nn
from transformers import TrainerCallback

from doctor.core import CannotJudge, Doctor
from doctor.integrations import Outcome

# What the Trainer adds to model(**batch) that is not the batch (it passes it to models whose forward takes
# **kwargs, to normalize a loss over gradient accumulation).
TRAINER_KWARGS = ("num_items_in_batch",)


class DoctorTrainerCallback(Outcome, TrainerCallback):
    """Watches a Hugging Face Trainer's training with the doctor; `report` (and `report_dict()`) once it has ended.

    `loss_fn(logits, labels)`: see the module docstring (default: cross entropy, single-label classification).
    Any other keyword is passed to Doctor: validation= (batches as the model takes them, dicts with "labels"),
    model_factory= (a function returning a fresh model, for the memorization check), inputs=/targets=/output=,
    census_every=, ...
    """

    def __init__(self, loss_fn=None, **doctor_kwargs):
        self.loss_fn = loss_fn if loss_fn is not None else nn.CrossEntropyLoss()
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
            return Doctor(model, inner, self.loss_fn, scaler=scaler, **self.doctor_kwargs)

        self._start(build)
        self._log = state.is_world_process_zero
        if self.doctor is not None:
            self._hooks = [
                model.register_forward_pre_hook(self._before_forward, with_kwargs=True),
                model.register_forward_hook(self._after_forward, with_kwargs=True),
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

    def _before_forward(self, module, _args, kwargs) -> None:
        if not self._training(module):
            return
        self._batch = {k: v for k, v in kwargs.items() if k not in TRAINER_KWARGS}
        self._call("see", self._batch, time.perf_counter() - self._ready_at)

    def _after_forward(self, module, _args, kwargs, output) -> None:
        if not self._training(module) or self._batch is None:
            return
        logits = self.doctor.layout.output_or_none(output)
        if logits is None or not logits.requires_grad:
            return
        loss = output.get("loss") if isinstance(output, dict) else getattr(output, "loss", None)
        if not torch.is_tensor(loss) or any(k in kwargs for k in TRAINER_KWARGS):
            # No loss of the model's own, or one divided over a whole accumulation group: the loss as computed.
            loss = self.loss_fn(logits.detach(), self.doctor.instruments.last_targets)  # split by see()
        self._batch = None
        # after_backward must run once backward has filled .grad, and before the Trainer clips (on_substep_end and
        # on_pre_optimizer_step come after clip_grad_norm_: the census would read clipped gradients, and the
        # clipping reading would always find nothing clipped). A hook on the output fires during backward;
        # a callback it queues runs when the whole backward pass has ended, as DistributedDataParallel's does.
        logits.register_hook(partial(self._gradient_reached_output, loss.detach()))

    def _gradient_reached_output(self, loss: torch.Tensor, _grad: torch.Tensor) -> None:
        torch.autograd.Variable._execution_engine.queue_callback(partial(self._call, "after_backward", loss))

    def _call(self, method: str, *args) -> None:
        """A doctor method, its own forward passes left alone; a CannotJudge ends the doctor's part in the run."""
        if self.doctor is None:
            return
        self._busy = True
        try:
            with self._judging():
                getattr(self.doctor, method)(*args)
        finally:
            self._busy = False
        if self.doctor is None:  # it gave up: its hooks are off, take these off too
            self._remove_hooks()

    # ----- training end: the report -------------------------------------------------------------------------------
    def on_train_end(self, args, state, control, **kwargs):
        self._remove_hooks()
        self._conclude(log=self._log)

    def _remove_hooks(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
