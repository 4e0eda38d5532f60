"""Non-finite values: a collector that finds the first NaN or inf training loss, and what was non-finite first.

The doctor turns it on (Instruments(watch_nonfinite=True)): any NaN or inf training loss is a finding of its own,
`nonfinite_loss` (analysis/checks/numerics.py, judged in doctor/core.py), ahead of every fitted rule. It declares
no record column: what it finds is `origin`, an `Origin`. The grid's cells leave it off.

What it costs: once a step, until the first non-finite loss, one fused check of every gradient for NaN and inf
(the kernel GradScaler uses, at a scale of 1: it leaves the gradients bit for bit as they were) and one read of
the loss and that check together (a single device sync on an accelerator). At the first non-finite loss, still
before optimizer.step(), the doctor looks back along the step, in the order the values came about:

1. the weights (non-finite at initialization, or after the previous update; if an earlier step's gradients
   were non-finite while its loss was finite, those gradients came first);
2. the step's inputs;
3. the model's outputs, by running its forward again on those inputs without gradients (the weights have not
   been stepped yet, so this is the forward that produced the loss);
4. the loss itself, when all of the above were finite.

It sees the model, the batches and the loss only: nothing here knows of any planted fault. It runs last of the
collectors after backward, when every other collector has read the step.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.batches import tensors, to_device
from harness.instruments.loop import Collector, Loop
from harness.torch_private import flag_nonfinite


@dataclass(frozen=True)
class Origin:
    """The first non-finite loss, and what was non-finite first."""

    loss_step: int  # the step whose training loss was first NaN or inf
    loss_value: float
    what: str  # what was non-finite first: a key of NEXT_STEPS (analysis/checks/numerics.py)
    step: int  # the step at which `what` was first seen non-finite (earlier than loss_step for gradients)
    detail: str

    @property
    def from_the_start(self) -> bool:
        """Non-finite inputs or weights at the first step: every measurement the rules read saw those values."""
        return self.step == 0 and self.what in ("inputs", "weights at initialization")

    @property
    def first_value(self) -> str:
        """What the first non-finite loss was: NaN, inf or -inf."""
        return _kind(self.loss_value)


def _kind(value: float) -> str:
    return "NaN" if math.isnan(value) else ("-inf" if value < 0 else "inf")


def _count(tensor: torch.Tensor) -> tuple[int, int]:
    """(non-finite values, all values) of a tensor; integer tensors are always finite."""
    if not tensor.is_floating_point() and not tensor.is_complex():
        return 0, tensor.numel()
    return int((~torch.isfinite(tensor.detach())).sum()), tensor.numel()


def _names(names: Sequence[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


class NonFiniteWatch(Collector):
    """Checks each step for a non-finite loss (and, before it, non-finite gradients); see the module docstring."""

    def __init__(self, loop: Loop):
        self.loop, self.model, self.named_params = loop, loop.model, loop.named_params
        self.trained = [p for _, p in self.named_params if p.requires_grad]  # the per-step check reads their gradients
        self.origin: Origin | None = None
        self.gradients: tuple[int, list[str], float] | None = None  # (step, parameters, the finite loss then)
        self.check_gradients = True

    def after_backward(self, loss: torch.Tensor) -> None:
        """After backward and before optimizer.step(): the step's loss and gradients, and its inputs if it failed."""
        step, inputs = self.loop.step, self.loop.last_inputs
        if self.origin is not None:
            return  # found: the rest of the run cannot say more about where it started
        # The gradients on the optimizer cycles the doctor's cost budget watches (all, without one); the loss always.
        if not self.loop.watching and loss.is_cpu and loss.dim() == 0:
            if math.isfinite(loss.item()):  # the loss alone, on the CPU: one read, the cheapest check there is
                return
        elif _all_finite(loss, self._gradients()):
            return
        loss = loss.detach()
        value = loss.item() if loss.numel() == 1 else loss.sum().item()
        if math.isfinite(value):
            bad = [name for name, p in self.named_params if p.grad is not None and _count(p.grad)[0]]
            if bad and self.gradients is None:
                self.gradients = (step, bad, value)
            self.check_gradients = False  # found: from here on the loss alone is checked
            return
        self.origin = self._origin(step, value, inputs)

    def _gradients(self) -> list[torch.Tensor]:
        """The gradients the check reads: every trained parameter's, until a non-finite one was found."""
        if not (self.check_gradients and self.loop.watching):
            return []
        return [g for p in self.trained if (g := p.grad) is not None and not g.is_sparse]

    def _origin(self, step: int, value: float, inputs) -> Origin:
        def found(what: str, detail: str, at: int = step) -> Origin:
            return Origin(step, value, what, at, detail)

        weights = [name for name, p in self.named_params if _count(p)[0]]
        if weights:
            if self.gradients is not None:
                at, names, finite_loss = self.gradients
                return found(
                    "gradients",
                    f"the gradients of {_names(names)} were non-finite at step {at} while its loss was finite"
                    f" ({finite_loss:.3g}); the update made the weights {_names(weights)} non-finite, and the loss"
                    " followed",
                    at,
                )
            if step == 0:
                return found(
                    "weights at initialization", f"the weights {_names(weights)} were non-finite before any update"
                )
            checked = (
                "were finite" if self.check_gradients else "the doctor had stopped checking (their norm overflowed)"
            )
            return found(
                "weights",
                f"the weights {_names(weights)} were non-finite after the update of step {step - 1}, whose gradients"
                f" {checked}",
            )
        if inputs is None:  # after_backward without the doctor watching the batches: nothing to look back at
            return found("outputs or loss", "the weights were finite; the doctor saw no batch to check the rest on")
        bad, total = map(sum, zip(*(_count(t) for t in tensors(inputs)), strict=True))
        if bad:
            return found("inputs", f"{bad} of {total} input values of the batch at step {step} were NaN or inf")
        outputs = self._forward_again(inputs)
        if outputs is None:
            return found(
                "outputs or loss",
                "inputs and weights were finite; the doctor could not run the forward again on the step's inputs, so"
                " the model's outputs are unchecked",
            )
        bad, total = _count(outputs)
        if bad:
            return found(
                "outputs",
                f"the model's outputs on the batch of step {step} had {bad} of {total} values NaN or inf, from finite"
                " inputs and finite weights",
            )
        largest = float(outputs.detach().abs().max()) if outputs.numel() else 0.0
        return found(
            "loss",
            f"inputs, weights and the model's outputs were finite (largest |output| {largest:.3g}), but the loss was"
            f" {_kind(value)}",
        )

    def _forward_again(self, inputs) -> torch.Tensor | None:
        """The model's outputs on the step's inputs, as the step computed them; None if that forward fails.

        Model, buffers (BatchNorm statistics), RNG and the instruments' forward counts are left as they were.
        """
        device = next(self.model.parameters()).device
        buffers = [b.detach().clone() for b in self.model.buffers()]
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        self.loop.own_forward = True  # the instruments count the loop's forwards, not this one
        try:
            with torch.random.fork_rng(devices=devices), torch.no_grad():
                outputs = self.loop.layout.forward(self.model, to_device(inputs, device))
        except Exception:  # noqa: BLE001 - the user's loop may call the model differently: then say so, not crash
            return None
        finally:
            self.loop.own_forward = False
            with torch.no_grad():
                for buffer, saved in zip(self.model.buffers(), buffers, strict=True):
                    buffer.copy_(saved)
        return outputs if torch.is_tensor(outputs) else None


_FOUND: dict[torch.device, torch.Tensor] = {}  # the check's count of hits, per device: zeroed again only after a hit


def _all_finite(loss: torch.Tensor, grads: list[torch.Tensor]) -> bool:
    """Whether the loss and every gradient are free of NaN and inf.

    The gradients are checked by GradScaler's own fused kernel where torch has it (one call for all of them, about
    a seventh of the cost of their norms on a small model; harness/torch_private.py: `flag_nonfinite`), which
    leaves them as they were. Gradients on several devices, or of a dtype the kernel does not take, are checked
    one by one with torch.isfinite.
    """
    loss = loss.detach()
    if not grads and loss.is_cpu:
        return math.isfinite(loss.item() if loss.numel() == 1 else loss.sum().item())  # the loss alone: one read
    found = _found(loss.device)
    if grads:
        device = grads[0].device
        hits = found if device == loss.device else torch.zeros(1, device=device)
        flag_nonfinite(grads, hits)
        if hits is not found:
            found += hits.to(loss.device)
    if loss.is_cpu:
        # On the CPU two reads cost less than the ops that would make them one.
        hit = bool(found.item())
        finite = math.isfinite(loss.item() if loss.numel() == 1 else loss.sum().item())
        if hit:
            found.zero_()
        return finite and not hit
    total = (found + (~torch.isfinite(loss)).any().float()).item()  # one sync for the loss and the check
    if total:
        found.zero_()
    return total == 0


def _found(device: torch.device) -> torch.Tensor:
    """The zero the check counts its hits into, kept from call to call (a new one each step costs more)."""
    found = _FOUND.get(device)
    if found is None:
        found = _FOUND[device] = torch.zeros(1, device=device)
    return found
