"""Update ratios: how far an optimizer step moves each parameter, against the parameter's own size.

Against the weights' own size, the step says whether the rate fits the model, whatever kind of optimizer computed
it: a large ratio for a rate too high, a tiny one for a rate too low. It is read on the first optimizer step at
or after each census step (the weights copied just before the update, compared just after).

The same reading gives two more: the weights' norm at each measured step against the first one (weight decay
that dominates the update shrinks them while the loss stays high: weight_norm_ratio), and which parameters had a
gradient but never moved at any measured step (an optimizer that holds other tensors than the trained model's,
a model rebuilt after its optimizer was made: unmoved_share). Both read the parameters, never `.grad` alone.

And which parameter tensors got a gradient but ended the run bit for bit as they were at the first measured step,
while others changed (`unchanged_params`: a layer left out of the optimizer, `Adam(net[0].parameters())`). This
reads the whole run, not the measured steps alone: a tensor another optimizer steps (a GAN's discriminator beside
the watched generator's optimizer) changes between them, and is not named. Kept as an exact checksum of each
tensor's bits (`bit_checksums`), not a copy, so it costs no memory.
"""

import math

import torch

from harness.column import F64, NOT_ALONG_THE_RUN, STR, Column, list_of
from harness.instruments.census import GradientCensus
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import finite_median, read_scalars
from harness.torch_private import copies, differences, norms

_BIT_VIEWS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_checksums(tensors: list[torch.Tensor]) -> list[tuple[int, int]]:
    """Per tensor, two exact sums of its elements' bits read as integers: of all of them, and of every other one.

    A tensor whose bits did not change keeps both; one whose bits changed keeps both only where the changes cancel
    exactly in two sums at once. Integer sums, so no rounding hides a change as small as one bit: an update too
    small to move a float32 norm still moves them.
    """
    sums = []
    for tensor in tensors:
        bits = tensor.detach().reshape(-1).view(_BIT_VIEWS[tensor.element_size()]).to(torch.int64)
        sums.append((bits.sum(), bits[::2].sum()))
    values = read_scalars([value for pair in sums for value in pair]) if sums else []
    return [(int(values[2 * i]), int(values[2 * i + 1])) for i in range(len(sums))]


class UpdateRatios(Collector):
    """Per measured optimizer step, per parameter: the norm of the update over the norm of the weights before it."""

    COLUMNS = (
        Column(
            "update_ratio",
            list_of(F64),
            "per parameter: median |step update| / |weight| at census steps",
            along=NOT_ALONG_THE_RUN,
        ),
        Column(
            "update_ratio_median",
            F64,
            "median update ratio over weight matrices (all parameters if none) that got gradients",
            per_budget=True,
        ),
        Column(
            "update_ratio_curve",
            list_of(F64),
            "at each census step: the median update ratio over those matrices",
            along="census_steps",
        ),
        Column("update_ratio_peak", F64, "largest value of that curve", per_budget=True),
        Column(
            "weight_norm_ratio",
            F64,
            "joint norm of the weight matrices at the last census step over the first one's",
            per_budget=True,
        ),
        Column(
            "unmoved_share",
            F64,
            "share of parameter elements with a gradient at a census step that no update measured at one moved at all",
            per_budget=True,
        ),
        Column(
            "unchanged_params",
            list_of(STR),
            "parameter tensors that had a gradient at a census step and ended the run bit for bit as at the first"
            " measured step, while other tensors changed",
            along=NOT_ALONG_THE_RUN,
        ),
        Column("unchanged_param_count", F64, "how many tensors unchanged_params names (NaN: not read)"),
    )

    CENSUS_ONLY = True  # reads the update of census steps

    def __init__(self, loop: Loop, census: GradientCensus):
        self.loop, self.census = loop, census
        self.update_ratios: list[list[float]] = []
        self.first_norms: list[float] | None = None  # per parameter: its norm before the first measured update
        self.last_norms: list[float] | None = None  # and before the last one
        n = len(loop.named_params)
        self.read = [False] * n  # per parameter: had a gradient at some measured step
        self.moved = [False] * n  # per parameter: moved at some measured step where it had one
        self._weights_before: list[torch.Tensor] | None = None
        self._first_checksums: list[tuple[int, int]] | None = (
            None  # each tensor's bits before the first measured update
        )
        self._due = False  # a census asked for the update ratio of the next optimizer step
        self._hooks = [
            loop.before_update(self._before_update, when="watched"),  # census cycles are
            loop.after_update(self._after_update, when="watched"),
        ]

    def after_backward(self, loss) -> None:
        # The first optimizer step at or after a census: with gradient accumulation the census's own backward
        # pass is seldom the one an optimizer step follows.
        if self.loop.census_now:
            self._due = True

    def _before_update(self, _optimizer) -> None:
        if self._due:
            with torch.no_grad():
                self._weights_before = copies([p for _, p in self.loop.named_params])
                if self._first_checksums is None:
                    self._first_checksums = bit_checksums(self._weights_before)
            self._due = False

    def _after_update(self, _optimizer, _args, _kwargs) -> None:
        if self._weights_before is None:
            return
        with torch.no_grad():
            params = [param for _, param in self.loop.named_params]
            moves = norms(differences(params, self._weights_before))
            grads = [p.grad if p.grad is not None else torch.zeros((), device=p.device) for p in params]
            values = read_scalars([*moves, *norms(self._weights_before), *norms(grads)])
        n = len(params)
        moves, scales, grad_norms = values[:n], values[n : 2 * n], values[2 * n :]
        self.first_norms = scales if self.first_norms is None else self.first_norms
        self.last_norms = scales
        # A parameter without a gradient is not expected to move (frozen, or unused by this batch): left unread.
        for i, (move, grad_norm) in enumerate(zip(moves, grad_norms, strict=True)):
            if grad_norm > 0:
                self.read[i], self.moved[i] = True, self.moved[i] or move > 0
        self.update_ratios.append(
            [move / scale if scale > 0 else math.nan for move, scale in zip(moves, scales, strict=True)]
        )
        self._weights_before = None

    def _weight_norm_ratio(self, matrices: list[bool]) -> float:
        """The weight matrices' joint norm at the last measured step over the first (before any update)."""
        if len(self.update_ratios) < 2:  # fewer than two measured steps
            return math.nan
        first, last = (
            math.sqrt(sum(n**2 for n, m in zip(norms, matrices, strict=True) if m))
            for norms in (self.first_norms, self.last_norms)
        )
        return last / first if first > 0 else math.nan

    def _unmoved_share(self) -> float:
        """Share of the parameter elements read with a gradient that no measured update moved at all."""
        sizes = [param.numel() for _, param in self.loop.named_params]
        read = sum(size for size, r in zip(sizes, self.read, strict=True) if r)
        unmoved = sum(size for size, r, m in zip(sizes, self.read, self.moved, strict=True) if r and not m)
        return unmoved / read if read else math.nan

    def _unchanged(self) -> list[str] | None:
        """The tensors read with a gradient whose bits ended as they began, where another tensor's changed.

        None: not read (no measured update, or nothing changed at all, which unmoved_share reads).
        """
        if self._first_checksums is None:
            return None
        with torch.no_grad():
            now = bit_checksums([p for _, p in self.loop.named_params])
        same = [first == last for first, last in zip(self._first_checksums, now, strict=True)]
        if all(same):
            return None
        return [
            name for (name, _), read, kept in zip(self.loop.named_params, self.read, same, strict=True) if read and kept
        ]

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()

    def columns(self, final: bool) -> dict:
        never = self.census.never_got_gradient()
        ratios_by_param = list(zip(*self.update_ratios, strict=True)) if self.update_ratios else []
        update_ratio = [finite_median(r) for r in ratios_by_param]
        # Per census: the median over weight matrices that got gradients. Its peak reads the rate even when a run
        # that diverged has stopped moving by the end (dead units pass no gradient). Biases and other vectors
        # are left out: one that starts at zero (Keras's default) has no size to compare a step with, and its
        # ratio is 1/steps-so-far whatever the rate. A model with no matrices is read on all its parameters.
        matrices = [p.dim() >= 2 for _, p in self.loop.named_params]
        if not any(matrices):
            matrices = [True] * len(matrices)
        counted = [m and not n for m, n in zip(matrices, never, strict=False)]
        curve = [finite_median(r for r, c in zip(ratios, counted, strict=False) if c) for ratios in self.update_ratios]
        scalars = {
            "update_ratio_median": finite_median(r for r, c in zip(update_ratio, counted, strict=False) if c),
            "update_ratio_peak": max((r for r in curve if not math.isnan(r)), default=math.nan),
            "weight_norm_ratio": self._weight_norm_ratio(matrices),
            "unmoved_share": self._unmoved_share(),
        }
        if not final:
            return scalars
        unchanged = self._unchanged()
        return {
            **scalars,
            "update_ratio": update_ratio,
            "update_ratio_curve": curve,
            "unchanged_params": unchanged if unchanged is not None else [],
            "unchanged_param_count": float(len(unchanged)) if unchanged is not None else math.nan,
        }
