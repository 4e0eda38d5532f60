"""Gradient clearing: whether `.grad` was cleared between one optimizer step and the next backward.

On the first backward after an optimizer step, .grad should be None or zero: whatever it still holds was added
before that step, so the next step would follow it again (a forgotten zero_grad). One parameter is read, the
first whose gradient arrives in the run's first backward: any one would do, since a parameter that sat out the
step's earlier backward passes holds nothing of them.

A Python hook in every backward pass costs about 3% of a small model's step, so .grad is first read after
backward, from what the optimizer step left: a new tensor (zero_grad(set_to_none=True), the default) or one
zeroed in place and then added to (its version counter two or more ahead) is cleared. A tensor only added to
since the step (one ahead) may be one whose zeroing the counter does not see (grad.data.zero_()), so from then on
the hook reads it exactly, before each step's first gradient is added: only the hook ever says "carried". A
gradient that is a view (its counter shared with other tensors) or sparse is read by the hook from the start.
Where torch's version counter cannot be read (harness/torch_private.py), a new tensor is still cleared, and a
tensor kept since the step is read by the hook from then on, as one only added to is. Under torch.distributed
with more than one rank the hook reads it from the start: DDP writes the averaged gradient into .grad in place
after backward, which moves the counter once more, so a .grad only added to would read as zeroed and added to.
"""

import math
import weakref
from functools import partial

import torch

from harness.column import F64, Column
from harness.instruments.loop import Collector, Loop
from harness.instruments.ranks import world
from harness.torch_private import drop_empty_hook_table, inplace_version, is_view


def unhook(param: torch.Tensor, hook) -> None:
    """Remove a tensor hook, and with the last one the tensor's hook table.

    Autograd calls into Python for a table left empty too, at the cost of a hook (about 3% of a small model's step).
    """
    hook.remove()
    drop_empty_hook_table(param)


class GradientClearing(Collector):
    """Optimizer steps whose first backward found `.grad` not cleared, of those checked (grad_carried_share)."""

    COLUMNS = (
        Column(
            "grad_carried_share",
            F64,
            "share of optimizer steps whose next backward found .grad not cleared",
            per_budget=True,
        ),
    )

    SAMPLED = True  # a share of optimizer cycles: read on the watched ones

    def __init__(self, loop: Loop):
        self.loop = loop
        # Optimizer steps whose first backward found .grad not cleared: counted on the gradient's device, read with
        # the columns (a read per step would wait for the device each step).
        self._carried: torch.Tensor | int = 0
        self.checked_steps = 0
        self._check_due = False  # the first backward after an optimizer step looks at .grad once
        self._gradient_hooks: list = []
        self._watched: torch.Tensor | None = None  # the parameter whose .grad is read (_hook_every_gradient)
        # Read by the hook on every step (_read_cleared); from the start where DDP moves .grad's counter itself.
        self._exact = world() is not None
        self._grad_at_step: tuple | None = None  # (weakref to .grad, its version) as the last optimizer step left it
        self._step_hook = loop.after_update(self._after_update, when="arming")  # for the next cycle, if it is watched
        self._hook_every_gradient()

    def after_backward(self, loss) -> None:
        if self._check_due and not self._exact and self._watched is not None:
            self._read_cleared()  # before anything here or in the loop changes .grad in place

    def _after_update(self, _optimizer, _args, _kwargs) -> None:
        relearn = self._check_due and self._watched is not None
        if relearn:
            self._hook_every_gradient()  # a whole step without the watched parameter's gradient: learn another
        # The hook reads any parameter as it learns it; read after backward, the one learned has no reading of
        # its own from this step, and is read from the next.
        self._check_due = self._exact or not relearn
        if not self._exact and self._watched is not None:
            grad = self._watched.grad  # what the step followed: the next backward should find it gone or zeroed
            self._grad_at_step = None if grad is None else (weakref.ref(grad), inplace_version(grad))

    def _hook_every_gradient(self) -> None:
        """Hook every parameter the optimizer steps, to learn which one's gradient arrives first (then only its).

        Only those the optimizer holds: clearing .grad is the job of the step's zero_grad, which reaches just them.
        A parameter no step moves (an output map copied after the optimizer was made) keeps its .grad whatever
        the loop clears, and that is the unmoved check's finding (unmoved_share), not a forgotten zero_grad.
        """
        self._watched, self._grad_at_step = None, None
        for param, hook in self._gradient_hooks:
            unhook(param, hook)
        stepped = {id(p) for group in self.loop.optimizer.param_groups for p in group["params"]}
        self._gradient_hooks = [
            (p, p.register_hook(partial(self._on_gradient, p)))
            for _, p in self.loop.named_params
            if p.requires_grad and id(p) in stepped
        ]

    def _on_gradient(self, param: torch.Tensor, grad: torch.Tensor) -> None:
        """Runs when backward has computed `param`'s gradient, before it is added into `param.grad`."""
        if not self.loop.watching:
            return  # an optimizer cycle the doctor's cost budget does not watch
        if self._watched is None:  # the run's first gradient, or one after the watched parameter sat out a step
            self._watched = param
            for hooked, hook in self._gradient_hooks:
                if not (self._exact and hooked is param):
                    unhook(hooked, hook)
            self._gradient_hooks = [pair for pair in self._gradient_hooks if self._exact and pair[0] is param]
            if not self._exact:
                return  # read after backward from now on (_read_cleared)
        if not self._check_due or self.loop.own_forward:
            return
        self._check_due = False
        self.checked_steps += 1
        held = param.grad
        if held is not None:
            self._carried = self._carried + held.ne(0).any()

    def _read_exactly(self) -> None:
        """From now on the hook reads the watched parameter's .grad before each step's first gradient is added."""
        self._exact = True
        param = self._watched
        self._gradient_hooks = [(param, param.register_hook(partial(self._on_gradient, param)))]

    def _read_cleared(self) -> None:
        """After the first backward since an optimizer step, whether the watched .grad was cleared in between."""
        grad, at_step = self._watched.grad, self._grad_at_step
        if grad is None:
            return  # no gradient reached it in this backward: look again after the next
        if grad.is_sparse or is_view(grad) is not False:  # no version counter of its own (or cannot tell)
            self._check_due = False
            self._read_exactly()
            return
        if at_step is not None and at_step[0]() is grad:
            version = inplace_version(grad)
            ahead = None if version is None else version - at_step[1]
            if ahead == 0:
                return  # no gradient reached it in this backward
            # Added to and not zeroed, or zeroed where the counter does not see it, or no counter to read: the
            # hook tells.
            if ahead is None or ahead == 1:
                self._check_due = False
                self._read_exactly()
                return
        self._check_due = False
        self.checked_steps += 1  # cleared: a new tensor, or zeroed in place before backward added to it

    def close(self) -> None:
        self._step_hook.remove()
        for param, hook in self._gradient_hooks:
            unhook(param, hook)

    @property
    def carried_steps(self) -> int:
        """Optimizer steps whose first backward found .grad not cleared (a read back to the host)."""
        return int(self._carried)

    def columns(self, final: bool) -> dict:
        share = self.carried_steps / self.checked_steps if self.checked_steps else math.nan
        return {"grad_carried_share": share}
