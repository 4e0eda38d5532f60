"""What one rank of a data-parallel run measures of its own, to be compared with the other ranks' at the report.

A run under torch.distributed (DDP, or gradients averaged by hand) has one training loop per process. Each rank
measures its own loop here, from the model, the optimizer and the batches only, and keeps everything on its own
side: no collective is run, and no value is read back from an accelerator during the loop (readings stay in
tensors where they were taken, read once by `evidence()` at the report). Comparing the ranks is the doctor's, at
the report (doctor/distributed.py: one gather of every rank's `evidence()`).

Three readings, each what one distributed fault leaves behind:

- **Batch fingerprints**, per pass over the loader (a pass: one `Doctor.watch` of it, an epoch), for the first
  `PER_PASS` batches of the first `PASSES` passes: a weighted sum of up to `SAMPLED` values of the inputs, spread
  over the batch, and the same of the targets. Identical batches give identical fingerprints (the same values
  through the same operations); two ranks whose fingerprints agree batch for batch trained on the same batches
  (no DistributedSampler), and a pass whose fingerprints repeat the last one's saw the same order again (a
  DistributedSampler that shuffles, whose set_epoch is never called). Whether the loader's sampler shuffles is
  read from the loader itself (its `sampler`, or its `batch_sampler`'s).
- **Replica checksums** at the sampled steps (`sampled`: the powers of two and every 100th, of which the latest
  LATEST are kept), for every parameter and buffer: its sum, the sum of
  its magnitudes and the sum of a strided sample, in float64, taken in a forward pre-hook of the step's first
  training forward: after the last optimizer step, and after DDP has broadcast its buffers for this forward (a
  BatchNorm's running statistics are each rank's own between its forward and the next broadcast).
- **Local and reduced gradient norms** at the sampled steps: each backward pass's gradient norm as autograd
  hands it to the parameters (tensor hooks, before it is accumulated into `.grad` and before DDP's reducer or
  anything else touches it: this rank's own gradient), summed over the step's backward passes, plus the norm of
  what `.grad` held before the first of them (nothing once zeroed); and the norm of the gradient the optimizer
  steps on (just before the update: after DDP's averaging, or the loop's own all_reduce; after the closure of a
  `step(closure)`, inside which Lightning runs the backward pass: harness/instruments/loop.py, `before_update`).
  Averaged gradients can never be longer than the mean of the local bounds (the triangle inequality); summed
  ones can (doctor/distributed.py says how it is judged). Under a GradScaler the local norms are divided by its
  scale, as the optimizer's are unscaled.

The hooks of the gradient norms are put on only for the sampled steps' backward passes, so that the other steps
pay for none of them.
"""

import math
from collections.abc import Iterable

import numpy
import torch
from torch import nn

from harness import torch_private
from harness.batches import tensors
from harness.instruments.loop import before_update

PASSES = 4  # passes over the loader fingerprinted: consecutive pairs among them are compared
PER_PASS = 256  # batches fingerprinted per pass
SAMPLED = 32  # values of each batch's inputs (and of its targets) a fingerprint reads
LATEST = 32  # sampled steps kept besides the powers of two: what is gathered stays small on a long run


def world() -> tuple[int, int] | None:
    """(rank, world size) of this process's default group when it has more than one rank; None otherwise."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    size = torch.distributed.get_world_size()
    return (torch.distributed.get_rank(), size) if size > 1 else None


def sampled(step: int) -> bool:
    """Whether the ranks compare replicas and gradients at this optimizer step (0-based): 0, 1, 2, 4, 8, ..., 100k.

    The same on every rank, being a function of the step alone.
    """
    return step & (step - 1) == 0 or step % 100 == 0


def keep(readings: dict, step: int, reading) -> None:
    """Add a sampled step's reading; of the others than powers of two, only the LATEST are kept."""
    readings[step] = reading
    later = [s for s in readings if s & (s - 1)]
    for old in later[: max(0, len(later) - LATEST)]:
        del readings[old]


def fingerprint(tensor: torch.Tensor) -> "float | torch.Tensor":
    """A position-weighted sum of up to SAMPLED of the tensor's values, spread evenly over it when flattened.

    Every example of a batch contributes when the batch has at least SAMPLED values. In float64 (float32 on MPS),
    so that equal values give an equal sum exactly. A CPU tensor's is a float, read with numpy (a few microseconds:
    it runs on every step); an accelerator's a 0-d tensor on its device, read back only at the report.
    """
    if tensor.layout != torch.strided:
        return 0.0  # a sparse batch: the targets' fingerprint tells batches apart
    if tensor.device.type == "cpu" and tensor.dtype in NUMPY_READS:
        flat = tensor.detach().numpy().reshape(-1)
        values = flat[:: max(1, flat.size // SAMPLED)][:SAMPLED]
        return float(numpy.dot(values, _WEIGHTS_NUMPY[: len(values)]))
    flat = tensor.detach().reshape(-1)
    values = flat[:: max(1, flat.numel() // SAMPLED)][:SAMPLED]
    if not values.numel():
        return 0.0
    weights = _weights(tensor.device, len(values))
    return torch.dot(values.to(weights.dtype), weights)


NUMPY_READS = {torch.float64, torch.float32, torch.float16, torch.int64, torch.int32, torch.int16, torch.int8}
NUMPY_READS |= {torch.uint8, torch.bool}
_WEIGHTS_NUMPY = numpy.arange(1, SAMPLED + 1, dtype=numpy.float64)
_WEIGHTS: dict[tuple[torch.device, int], torch.Tensor] = {}  # 1, 2, ..., n on a device, made once (every step reads)


def _weights(device: torch.device, n: int) -> torch.Tensor:
    if (device, n) not in _WEIGHTS:
        dtype = torch.float32 if device.type == "mps" else torch.float64
        _WEIGHTS[device, n] = torch.arange(1, n + 1, device=device, dtype=dtype)
    return _WEIGHTS[device, n]


def _checksums(named: list[tuple[str, torch.Tensor]]) -> list[torch.Tensor]:
    """Per tensor, a (3,) tensor on its device: its sum, the sum of its magnitudes and a strided sample's sum.

    Summed in float64 where the device has it, without a float64 copy of the tensor. The sample (every 7th value
    from the second) tells apart most pairs of tensors that hold the same values in another order, which the
    first two sums cannot.
    """
    rows = []
    for _, tensor in named:
        flat = tensor.detach().reshape(-1)
        dtype = torch.float32 if flat.device.type == "mps" else torch.float64
        if not flat.is_floating_point():
            flat = flat.to(dtype)  # a counter (num_batches_tracked): one value
        magnitudes = torch.linalg.vector_norm(flat, 1, dtype=dtype)
        rows.append(torch.stack([flat.sum(dtype=dtype), magnitudes, flat[1::7].sum(dtype=dtype)]))
    return rows


def sampler_of(batches) -> str | None:
    """The loader's sampler, named with whether it shuffles: "DistributedSampler(shuffle=True)", ...; None: not seen.

    Read from the object handed to the watch: a DataLoader's `sampler`, or its `batch_sampler`'s (a DataLoader
    always has both; its default batch sampler wraps its sampler). Any other iterable shows none.
    """
    for holder in (getattr(batches, "batch_sampler", None), batches):
        sampler = getattr(holder, "sampler", None)
        if sampler is None or isinstance(sampler, torch.utils.data.BatchSampler):
            continue
        shuffle = getattr(sampler, "shuffle", None)
        if isinstance(sampler, torch.utils.data.RandomSampler):
            shuffle = True
        if isinstance(sampler, torch.utils.data.SequentialSampler):
            shuffle = False
        return f"{type(sampler).__name__}(shuffle={shuffle})"
    return None


def shuffles(sampler: str | None) -> bool:
    """Whether a sampler named by sampler_of draws a new order each pass when used as meant."""
    return sampler is not None and sampler.endswith("(shuffle=True)")


class RankWatch:
    """One rank's own measurements for the comparison across ranks (see the module docstring); no collective.

    `model` is the module the loop trains (not a DistributedDataParallel wrapper: its `.module`), `scaler` the
    loop's GradScaler if any. `batch(inputs, targets)` for each batch, `new_pass(batches)` as each pass over the
    loader begins; `evidence()` at the report; `close()` takes the hooks off.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, rank: int, world_size: int, scaler=None):
        if not (isinstance(world_size, int) and world_size >= 1 and isinstance(rank, int) and 0 <= rank < world_size):
            raise ValueError(
                f"rank must be in [0, world_size) and world_size >= 1, not rank={rank}, world={world_size}"
            )
        self.model, self.optimizer, self.scaler = model, optimizer, scaler
        self.rank, self.world_size = rank, world_size
        self.passes_begun = 0  # passes over the loader begun (only the first PASSES are kept)
        self.passes: list[dict] = []  # per pass: {"sampler": str | None, "prints": [(inputs', targets') 0-d tensors]}
        self.updates = 0  # optimizer steps taken so far: the index of the step under way
        self.checksums: dict[int, torch.Tensor] = {}  # step -> (tensors, 3), taken before its first forward
        self.gradients: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # step -> (local bound, reduced norm)
        self.names = [f"parameter {n}" for n, _ in model.named_parameters()]
        self.names += [f"buffer {n}" for n, _ in model.named_buffers()]
        self._checksum_due = True  # the next training forward starts a sampled step
        self._local: torch.Tensor | None = None  # this step's sum of per-backward local gradient norms
        self._backward_sq: torch.Tensor | None = None  # the backward pass under way's sum of squares
        self._armed: list = []  # the hooks of a sampled step, taken off after its optimizer step
        # The one hook on every step: it counts the steps and arms the sampled ones' hooks.
        self._counting = optimizer.register_step_post_hook(self._after_step)
        self._arm()  # step 0 is sampled

    # ----- the batches ----------------------------------------------------------------------------------------
    def new_pass(self, batches: Iterable | None) -> None:
        """A new pass over the loader begins (an epoch); `batches` is what the loop iterates (its sampler is read)."""
        self.passes_begun += 1
        if self.passes_begun <= PASSES:
            self.passes.append({"sampler": sampler_of(batches), "prints": []})

    def batch(self, inputs, targets: torch.Tensor) -> None:
        """One batch the loop is about to train on: its fingerprint, kept where it was taken (no host read)."""
        if not self.passes:  # batches handed over without a watch (a framework's callbacks): one pass, no sampler
            self.passes_begun = 1
            self.passes.append({"sampler": None, "prints": []})
        prints = self.passes[-1]["prints"]
        if self.passes_begun > PASSES or len(prints) >= PER_PASS:
            return
        first = tensors(inputs)
        prints.append((fingerprint(first[0]) if first else 0.0, fingerprint(targets)))

    # ----- the replicas ---------------------------------------------------------------------------------------
    def _before_forward(self, module, args) -> None:
        if not (self._checksum_due and torch.is_grad_enabled()):
            return  # not the loop's first forward of a sampled step (the doctor's own looks run without gradients)
        self._checksum_due = False
        named = [*self.model.named_parameters(), *self.model.named_buffers()]
        with torch.no_grad():
            rows = _checksums(named)
            device = rows[0].device if rows else None
            sums = torch.stack([r.to(device, non_blocking=True) for r in rows]) if rows else None
            keep(self.checksums, self.updates, sums)

    # ----- the gradients --------------------------------------------------------------------------------------
    def _arm(self) -> None:
        """The hooks of a sampled step: the checksums before its first forward, the gradients' norms around it.

        A forward pre-hook on the model, a tensor hook on every trained parameter and a read just before the
        optimizer's update, for this step only: the steps between sampled ones run none of them.
        """
        self._checksum_due = True
        self._armed = [self.model.register_forward_pre_hook(self._before_forward)]
        params = [p for p in self.model.parameters() if p.requires_grad]
        if not params:
            return
        device = params[0].device
        dtype = torch.float32 if device.type == "mps" else torch.float64
        self._local = torch.zeros((), device=device, dtype=dtype)
        self._carried = None  # the norm of what .grad held before the step's first backward (read at its first hook)
        self._armed += [p.register_hook(self._local_gradient) for p in params]
        self._armed.append(before_update(self.optimizer, self._before_update))

    def _local_gradient(self, grad: torch.Tensor) -> None:
        """A tensor hook: one parameter's share of this backward pass's own gradient (before it reaches .grad)."""
        if self._backward_sq is None:
            # The first parameter of a backward pass: its norm is taken once the pass has ended.
            self._backward_sq = torch.zeros_like(self._local)
            if self._carried is None:
                # The step's first backward: what .grad holds before it (nothing once zeroed; every earlier step's
                # gradients in a loop that never zeroes them) is part of what the optimizer will step on. No
                # parameter's .grad has been added to yet: this is the first hook of the pass.
                held = [p.grad for p in self.model.parameters() if p.grad is not None]
                norms = [n.to(self._local) for n in torch_private.norms(held)]
                self._carried = torch.stack(norms).norm() if norms else torch.zeros_like(self._local)
            if not torch_private.queue_after_backward(self._backward_done):
                self._local = torch.full_like(self._local, math.nan)  # no end-of-backward: no honest bound
        self._backward_sq += grad.detach().to(self._backward_sq.dtype).pow(2).sum().to(self._backward_sq.device)

    def _backward_done(self) -> None:
        """The backward pass has ended: its gradient's norm (unscaled) is added to the step's local bound."""
        norm = self._backward_sq.sqrt() + self._carried
        self._carried = torch.zeros_like(self._carried)  # counted once, with the step's first backward
        scale = torch_private.grad_scaler_scale(self.scaler) if self.scaler is not None else None
        if self.scaler is not None:
            norm = norm / (scale.to(norm) if scale is not None else float(self.scaler.get_scale()))
        self._local = self._local + norm
        self._backward_sq = None

    def _before_update(self, optimizer) -> None:
        """A sampled step's update is next: the norm of the gradient it steps on, beside the local bound."""
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        with torch.no_grad():
            reduced = torch.stack([n.to(self._local) for n in torch_private.norms(grads)]).norm() if grads else None
        if reduced is not None:
            keep(self.gradients, self.updates, (self._local, reduced))

    def _after_step(self, optimizer, args, kwargs) -> None:
        for hook in self._armed:
            hook.remove()
        self._armed = []
        self.updates += 1
        if sampled(self.updates):
            self._arm()

    # ----- at the report --------------------------------------------------------------------------------------
    def evidence(self) -> dict:
        """The rank's measurements as plain values (read back from the device here, once): what the ranks gather.

        `passes`: per pass, the sampler seen and the fingerprints [[inputs', targets'], ...]; `checksums`: step ->
        per tensor [sum, sum of magnitudes, sample sum] (tensors named in `names`); `gradients`: step -> [local
        bound, reduced norm]; `steps`: the optimizer steps taken.
        """
        passes = [
            {"sampler": seen["sampler"], "prints": [[float(x), float(y)] for x, y in seen["prints"]]}
            for seen in self.passes
        ]
        return {
            "rank": self.rank,
            "world_size": self.world_size,
            "steps": self.updates,
            "names": list(self.names),
            "passes": passes,
            "checksums": {
                str(step): sums.double().cpu().tolist() for step, sums in self.checksums.items() if sums is not None
            },
            "gradients": {
                str(step): [float(local), float(reduced)] for step, (local, reduced) in self.gradients.items()
            },
        }

    def close(self) -> None:
        for hook in [self._counting, *self._armed]:
            hook.remove()
        self._armed = []
