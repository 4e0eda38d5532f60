"""Non-finite values: a collector that finds the first NaN or inf training loss, and what was non-finite first.

The doctor turns it on (Instruments(watch_nonfinite=True)): any NaN or inf training loss is a finding of its own,
`nonfinite_loss` (analysis/checks/numerics.py, judged in doctor/diagnosis.py), ahead of every fitted rule. It declares
no record column: what it finds is `origin`, an `Origin`. The grid's cells leave it off.

It never reads a value back to the host between census steps (a read waits for the device: a sync). Each step
it keeps what it would look at, on the model's device, and reads it all at the next census step (and as the run
ends, or after HOLD_AT_MOST steps where censuses are further apart), in one read:

- every step: the loss (detached, as the loop computed it) and a reference to the step's inputs;
- on the optimizer cycles the doctor's cost budget watches (all, without one) and on census cycles: the norm of
  each trained parameter's gradient, of each parameter and of the output of the step's training forward (handed
  over by a hook on the model), in one fused call (the fastest there is on the CPU and on CUDA): NaN where a value
  is NaN, inf where one is inf or where values past about 1e19 in magnitude square past float32's range.

When that read finds a non-finite loss, the first one is known exactly (each step's loss is kept), and the doctor
looks back along that step, before its optimizer.step(), in the order the values came about:

1. the weights (non-finite at initialization, or after the previous update; if an earlier step's gradients
   were non-finite while its loss was finite, those gradients came first);
2. the step's inputs;
3. the model's outputs, as that step's forward gave them (read on the census step itself: how many values were
   NaN or inf; where the hook saw no output, its forward run again on those inputs without gradients, the weights
   not stepped yet; on an earlier step of the window, whether any was);
4. the loss itself, when all of the above were finite.

On a step the cost budget did not watch, the weights and outputs of that step were not kept: the inputs are still
checked, and the finding says what was left unchecked. The training goes on meanwhile: a NaN is noticed at the
next census step, at most `census_every` steps later (50 by default), or at the end of the run.

It sees the model, the batches and the loss only: nothing here knows of any planted fault. It runs last of the
collectors after backward, when every other collector has read the step.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from harness.batches import tensors, to_device
from harness.instruments.loop import Collector, Loop
from harness.torch_private import norms

# Steps kept at most between two reads: censuses far apart (a census_every of thousands, whose censuses below it
# come at 0, 1, 2, 4, ...) would otherwise hold every step's batch; one read in this many steps costs nothing.
HOLD_AT_MOST = 1024


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


def magnitudes(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each tensor's norm, in one call, as 0-d tensors on their devices; nothing is read back.

    NaN where the tensor holds a NaN; inf where it holds an inf, or values past about 1e19 in magnitude (their
    squares overflow float32): only a norm read on the step itself can be told apart by looking at the values.
    Stacked when read (`stacked`): a stack each step would cost as much again.
    """
    # float16's own norms overflow at 65504: those are taken in float32 (bfloat16 has float32's range).
    if not any(t.dtype == torch.float16 for t in tensors):
        return list(norms(tensors))
    rest = iter(norms([t for t in tensors if t.dtype != torch.float16]))
    return [
        torch.linalg.vector_norm(t, dtype=torch.float32) if t.dtype == torch.float16 else next(rest) for t in tensors
    ]


def stacked(values: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """0-d tensors as one float32 tensor on `device` (a copy from another device does not wait, but to the CPU)."""
    if not values:
        return torch.zeros(0, device=device)
    blocking = device.type == "cpu"
    return torch.stack(
        [
            v if v.dtype == torch.float32 and v.device == device else v.float().to(device, non_blocking=not blocking)
            for v in values
        ]
    )


@dataclass
class _Step:
    """One step as the watch keeps it until the next read: the loss, the inputs, and what a watched cycle read."""

    step: int
    loss: torch.Tensor  # 0-d, detached: the loss, or the sum of a loss of several values
    inputs: object
    grad_names: list[str] | None = None  # the trained parameters with a gradient, in `magnitudes` order
    # Their gradients', then every parameter's (`named_params` order), then each training forward's output's.
    magnitudes: list[torch.Tensor] | None = None
    output_sizes: list[int] | None = None  # the values of each of those outputs
    previous_read: bool = False  # whether the step before it was watched (its gradients read)


class NonFiniteWatch(Collector):
    """Keeps each step's loss, and more on watched cycles, on the device; reads them at census steps."""

    def __init__(self, loop: Loop):
        self.loop, self.model, self.named_params = loop, loop.model, loop.named_params
        self.trained = [(name, p) for name, p in self.named_params if p.requires_grad]
        self.origin: Origin | None = None
        self.gradients: tuple[int, list[str], float] | None = None  # (step, parameters, the finite loss then)
        self.reads = 0  # the reads back to the host so far (one per census step while all is finite)
        self._window: list[_Step] = []  # the steps since the last read, in order
        self._outputs: list[torch.Tensor] = []  # what the training forwards of the step under way gave
        self._last_recorded = -2  # the last step whose gradients were kept (the weights' message says so)
        self._hook = None
        self._arm()
        self._step_read = loop.after_update(lambda *_: self._arm())  # the next cycle may be watched or not

    # ----- every step: keep, read nothing --------------------------------------------------------------------
    def _recording(self, census: bool) -> bool:
        return self.loop.watching or census

    def _arm(self) -> None:
        """Hook the model's output exactly while the next forward is to be kept: a hook costs its call every step."""
        wanted = self.origin is None and self._recording(self.loop.census_next)
        if wanted and self._hook is None:
            self._hook = self.model.register_forward_hook(self._after_forward)
        elif not wanted and self._hook is not None:
            self._hook.remove()
            self._hook = None

    def _after_forward(self, _model, _inputs, output) -> None:
        loop = self.loop
        if loop.own_forward or not torch.is_grad_enabled():
            return  # the instruments' own looks, and evaluations: not the step's forward
        output = loop.layout.output_or_none(output)
        if not torch.is_tensor(output) or not output.numel() or not (output.is_floating_point()):
            return
        self._outputs.append(output.detach())  # measured with the gradients after backward, in the same call

    def after_backward(self, loss: torch.Tensor) -> None:
        """After backward and before optimizer.step(): keep the step; at a census step, read what was kept."""
        if self.origin is not None:
            return  # found: the rest of the run cannot say more about where it started
        loop = self.loop
        loss = loss.detach()
        kept = _Step(loop.step, loss if loss.numel() == 1 else loss.sum(), loop.last_inputs)
        outputs, self._outputs = self._outputs, []
        if self._recording(loop.census_now):
            grads = [(name, g) for name, p in self.trained if (g := p.grad) is not None and not g.is_sparse]
            with torch.no_grad():
                kept.magnitudes = magnitudes([g for _, g in grads] + [p for _, p in self.named_params] + outputs)
            kept.grad_names = [name for name, _ in grads]
            kept.output_sizes = [o.numel() for o in outputs]
            kept.previous_read = self._last_recorded == loop.step - 1
            self._last_recorded = loop.step
        self._window.append(kept)
        if loop.census_now or len(self._window) >= HOLD_AT_MOST:
            self._read(on_the_step=True, outputs=outputs)
        self._arm()

    # ----- census steps and the end: one read ----------------------------------------------------------------
    def _read(self, on_the_step: bool, outputs: list[torch.Tensor] | None = None) -> None:
        """Read what was kept since the last read, in one read back; look back along the first non-finite loss.

        `on_the_step`: read at the last kept step's backward, before its update (its weights are as they were);
        `outputs` what that step's training forwards gave.
        """
        window, self._window = self._window, []
        if not window or self.origin is not None:
            return
        device = window[0].loss.device
        losses = torch.stack([s.loss.float().reshape(()).to(device) for s in window])
        kept = [m for s in window if s.magnitudes is not None for m in s.magnitudes]
        bad = torch.isfinite(losses).logical_not_().any()
        if kept:
            bad |= torch.isfinite(stacked(kept, device)).logical_not_().any()
        self.reads += 1
        if not bad.item():  # the one read of this census step
            return
        # Something was NaN or inf (a NaN loss, or gradients a GradScaler will skip): the look back reads what it needs.
        values = losses.double().tolist()
        first = next((i for i, v in enumerate(values) if not math.isfinite(v)), None)
        for i, (step, value) in enumerate(zip(window, values, strict=True)):
            if first is not None and i >= first:
                break
            if step.magnitudes is not None and self.gradients is None and math.isfinite(value):
                grads = stacked(step.magnitudes[: len(step.grad_names)], device).tolist()
                bad_grads = [name for name, v in zip(step.grad_names, grads, strict=True) if not math.isfinite(v)]
                if bad_grads and on_the_step and i == len(window) - 1:  # the gradients are still there: counted
                    grads = dict(self.trained)
                    bad_grads = [name for name in step.grad_names if _count(grads[name].grad)[0]] or bad_grads
                if bad_grads:
                    self.gradients = (step.step, bad_grads, value)
        if first is not None:
            now = on_the_step and first == len(window) - 1
            self.origin = self._origin(window[first], values[first], now, outputs if now else None)
            self._arm()

    def close(self) -> None:
        """The run is over: read what was kept since the last census step, and take the hooks off."""
        self._read(on_the_step=False)
        self._step_read.remove()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    # ----- the look back -----------------------------------------------------------------------------------
    def _weights_now(self) -> list[str]:
        return [name for name, p in self.named_params if _count(p)[0]]

    def _origin(self, kept: _Step, value: float, on_the_step: bool, outputs: list[torch.Tensor] | None) -> Origin:
        """Where the first non-finite loss came from, each read as far as the kept step allows.

        The weights (and the gradients before them), else the inputs, else the model's outputs, else the loss itself.
        """
        weights = self._nonfinite_weights(kept, on_the_step)
        if weights:
            return self._weights_origin(kept, value, weights)
        step = kept.step
        if kept.inputs is None:  # after_backward without the doctor watching the batches: nothing to look back at
            return Origin(
                step,
                value,
                "outputs or loss",
                step,
                "the weights were finite; the doctor saw no batch to check the rest on",
            )
        bad, total = map(sum, zip(*(_count(t) for t in tensors(kept.inputs)), strict=True))
        if bad:
            return Origin(
                step,
                value,
                "inputs",
                step,
                f"{bad} of {total} input values of the batch at step {step} were NaN or inf",
            )
        return self._outputs_origin(kept, value, on_the_step, outputs, weights_kept=weights is not None)

    def _nonfinite_weights(self, kept: _Step, on_the_step: bool) -> list[str] | None:
        """The weights that were non-finite at the kept step, named (with their norms where read from those).

        None where the step's weights were not kept (a step the cost budget did not watch).
        """
        if on_the_step:
            return self._weights_now()  # the step's own weights, not yet updated: counted
        if kept.magnitudes is None:
            return None
        at = len(kept.grad_names)
        norms = stacked(kept.magnitudes[at : at + len(self.named_params)], kept.loss.device).tolist()
        # Read from the step's norms: an inf there may be values past 1e19, so the norm is said with the name.
        return [
            f"{name} (norm {v:g})"
            for (name, _), v in zip(self.named_params, norms, strict=True)
            if not math.isfinite(v)
        ]

    def _weights_origin(self, kept: _Step, value: float, weights: list[str]) -> Origin:
        """Non-finite weights: made so by non-finite gradients, there from initialization, or by an update."""
        step = kept.step
        if self.gradients is not None:
            at, names, finite_loss = self.gradients
            detail = (
                f"the gradients of {_names(names)} were non-finite at step {at} while its loss was finite"
                f" ({finite_loss:.3g}); the update made the weights {_names(weights)} non-finite, and the loss followed"
            )
            return Origin(step, value, "gradients", at, detail)
        if step == 0:
            detail = f"the weights {_names(weights)} were non-finite before any update"
            return Origin(step, value, "weights at initialization", step, detail)
        checked = (
            "were finite" if kept.previous_read else "were not read (a cycle the doctor's cost budget did not watch)"
        )
        detail = (
            f"the weights {_names(weights)} were non-finite after the update of step {step - 1}, whose gradients"
            f" {checked}"
        )
        return Origin(step, value, "weights", step, detail)

    def _outputs_origin(
        self, kept: _Step, value: float, on_the_step: bool, outputs: list[torch.Tensor] | None, weights_kept: bool
    ) -> Origin:
        """From finite inputs and weights: whether the model's outputs were non-finite, else the loss was."""
        step = kept.step

        def found(what: str, detail: str) -> Origin:
            return Origin(step, value, what, step, detail)

        if outputs:  # the census step's own: counted
            bad_outputs, total_outputs = map(sum, zip(*(_count(o) for o in outputs), strict=True))
            largest = max(float(o.abs().max()) for o in outputs)
        elif on_the_step:
            again = self._forward_again(kept.inputs)
            if again is None:
                return found(
                    "outputs or loss",
                    "inputs and weights were finite; the doctor could not run the forward again on the step's inputs,"
                    " so the model's outputs are unchecked",
                )
            bad_outputs, total_outputs = _count(again)
            largest = float(again.detach().abs().max()) if again.numel() else 0.0
        elif kept.output_sizes:  # an earlier step of the window: whether its outputs were finite
            return self._kept_outputs_origin(kept, value)
        else:
            unchecked = "outputs" if weights_kept else "weights and outputs"
            return found(
                "outputs or loss",
                f"the inputs were finite; step {step} was a cycle the doctor's cost budget did not watch in full, so"
                f" its {unchecked} are unchecked",
            )
        if bad_outputs:
            return found(
                "outputs",
                f"the model's outputs on the batch of step {step} had {bad_outputs} of {total_outputs} values NaN or"
                " inf, from finite inputs and finite weights",
            )
        return found(
            "loss",
            f"inputs, weights and the model's outputs were finite (largest |output| {largest:.3g}), but the loss was"
            f" {_kind(value)}",
        )

    def _kept_outputs_origin(self, kept: _Step, value: float) -> Origin:
        """An earlier step of the window, read from the output sums it kept: outputs non-finite, else the loss."""
        step = kept.step
        sums = stacked(kept.magnitudes[len(kept.magnitudes) - len(kept.output_sizes) :], kept.loss.device).tolist()
        total_outputs = sum(kept.output_sizes)
        if not all(math.isfinite(v) for v in sums):
            detail = (
                f"the model's outputs on the batch of step {step} held NaN or inf among their {total_outputs}"
                " values, from finite inputs and finite weights"
            )
            return Origin(step, value, "outputs", step, detail)
        rms = math.sqrt(sum(v * v for v in sums) / max(total_outputs, 1))
        detail = (
            f"inputs, weights and the model's outputs were finite (RMS output {rms:.3g}), but the loss was"
            f" {_kind(value)}"
        )
        return Origin(step, value, "loss", step, detail)

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
