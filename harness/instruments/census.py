"""Gradient census: the gradient of every parameter, read after backward on census steps.

Per parameter: its gradient's norm, largest entry and share of exact zeros, and whether it got a gradient at all
(a frozen or unused layer never does). Per census: the total norm (exploding gradients), the first weight
matrix's norm over the last one's (vanishing gradients on their way back to the input), and the accumulation
ratio: `.grad` against a fresh gradient of the same batch, which grows when gradients are never zeroed. Under
mixed precision the gradients are read divided by the GradScaler's scale, as the optimizer will get them.
"""

import math

import torch

from harness import torch_private
from harness.column import BATCH_INDICES, BOOL, F64, I64, NOT_ALONG_THE_RUN, STR, Column, list_of
from harness.instruments.loop import Collector, Loop
from harness.instruments.signals import finite_median, read_scalars, zero_counts


class GradientCensus(Collector):
    """One census per census step (harness/instruments/loop.py: `is_census_step`), kept for the record."""

    COLUMNS = (
        Column("census_steps", list_of(I64), "steps at which the census was taken", along=BATCH_INDICES),
        Column("param_names", list_of(STR), "parameter tensors, in model order", along=NOT_ALONG_THE_RUN),
        Column("grad_norm", list_of(F64), "per parameter: median L2 norm of .grad", along=NOT_ALONG_THE_RUN),
        Column("grad_max", list_of(F64), "per parameter: median largest |.grad|", along=NOT_ALONG_THE_RUN),
        Column(
            "grad_zero_share",
            list_of(F64),
            "per parameter: median share of exact zeros in .grad",
            along=NOT_ALONG_THE_RUN,
        ),
        Column("grad_missing", list_of(BOOL), "per parameter: .grad was None at every census", along=NOT_ALONG_THE_RUN),
        Column("grad_norm_curve", list_of(F64), "global gradient norm at each census step", along="census_steps"),
        Column("grad_zero_share_total", F64, "median share of exact zeros over all gradient entries", per_budget=True),
        Column("params_without_grad", I64, "parameter tensors that never got a gradient", per_budget=True),
        Column(
            "params_without_grad_share",
            F64,
            "share of parameter elements that never got a gradient",
            per_budget=True,
        ),
        Column(
            "accumulation_ratio",
            F64,
            "median |.grad| / |fresh gradient of the same loss| after step 0 (1 = zeroed)",
            per_budget=True,
        ),
        Column("accumulation_ratio_curve", list_of(F64), "that ratio at each census step", along="census_steps"),
        Column(
            "grad_depth_ratio_init",
            F64,
            "|.grad| of the first weight matrix over the last one's, at the first census",
            per_budget=True,
        ),
        Column("grad_depth_ratio", F64, "median of that ratio over the census steps", per_budget=True),
    )

    CENSUS_ONLY = True  # the census, and the RNG state before a census step's forward

    def __init__(self, loop: Loop, fresh_gradient: bool):
        self.loop = loop
        # Each census recomputes a fresh gradient of the last batch to compare .grad with (accumulation_ratio): a
        # forward and backward pass of its own. Only the naive rules read it (no_zero_grad is read from hooks), so
        # the doctor, which must cost its user little, goes without.
        self.fresh_gradient = fresh_gradient
        self.censuses: list[dict] = []
        self._last_rng: tuple | None = None

    def see(self, inputs, targets) -> None:
        if self.fresh_gradient and self.loop.census_next:
            # Remember the RNG state the forward pass will start from, so that the census can replay
            # the same dropout masks when it recomputes a fresh gradient.
            cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
            self._last_rng = (torch.get_rng_state(), cuda)

    def after_backward(self, loss) -> None:
        if self.loop.census_now:
            self._census()

    def _census(self) -> None:
        scale = self.loop.grad_scale()  # under AMP the census reads the gradients as the optimizer will get them
        named_params = self.loop.named_params
        grads = [param.grad for _, param in named_params]
        missing = [grad is None for grad in grads]
        present = [grad for grad in grads if grad is not None]
        norms, maxima, zero_shares = [], [], []
        zeros = elements = 0
        if present:
            # One call per statistic for all the parameters: the same values as one tensor at a time, for a
            # fraction of the calls (a census on a small model costs about a step).
            values = iter(read_scalars([*torch_private.norms(present), *torch_private.largest_magnitudes(present)]))
            norm_values = [next(values) for _ in present]
            values = iter(zip(norm_values, values, zero_counts(present), strict=True))
        for grad in grads:
            if grad is None:
                norms.append(math.nan), maxima.append(math.nan), zero_shares.append(math.nan)
                continue
            norm, largest, n_zero = next(values)
            norms.append(norm / scale)
            maxima.append(largest / scale)
            zero_shares.append(n_zero / grad.numel())
            zeros += n_zero
            elements += grad.numel()
        # Over the gradients there are: a missing one (None) is left out, a NaN one makes the total NaN, as it is.
        total_norm = math.sqrt(sum(n * n for n, grad in zip(norms, grads, strict=True) if grad is not None))
        # First over last weight matrix (or kernel) with a gradient: far below 1 when gradients vanish on their
        # way back to the input, as through a deep stack of sigmoids.
        matrices = [n for (_, p), n in zip(named_params, norms, strict=True) if p.dim() >= 2 and not math.isnan(n)]
        depth_ratio = matrices[0] / matrices[-1] if len(matrices) > 1 and matrices[-1] > 0 else math.nan
        self.censuses.append(
            {
                "step": self.loop.step,
                "norms": norms,
                "maxima": maxima,
                "zero_shares": zero_shares,
                "missing": missing,
                "zero_share": zeros / elements if elements else math.nan,
                "total_norm": total_norm if elements and not math.isnan(scale) else math.nan,  # NaN scale: unreadable
                "accumulation": self._accumulation_ratio() if self.fresh_gradient else math.nan,
                "depth_ratio": depth_ratio,
            }
        )

    def _accumulation_ratio(self) -> float:
        """Norm of `.grad` over the norm of a fresh gradient of the same loss on the same batch.

        1 when `.grad` holds this step's gradient only; larger when gradients pile up across steps because
        they were never zeroed. The recomputation leaves the model, its buffers and the RNG as they were.
        """
        loop = self.loop
        if loop.last_targets is None:
            return math.nan
        pairs = [p for _, p in loop.named_params if p.requires_grad and p.grad is not None]
        if not pairs:
            return math.nan
        x, y = loop.on_model_device(loop.last_inputs), loop.on_model_device(loop.last_targets)
        buffers = [b.detach().clone() for b in loop.model.buffers()]
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            if self._last_rng is not None:
                torch.set_rng_state(self._last_rng[0])
                if self._last_rng[1] is not None:
                    torch.cuda.set_rng_state_all(self._last_rng[1])
            with loop.own_forward_pass():
                loss = loop.loss_fn(loop.layout.forward(loop.model, x), y)
                fresh = torch.autograd.grad(loss, pairs, allow_unused=True)
        with torch.no_grad():
            for buffer, saved in zip(loop.model.buffers(), buffers, strict=True):
                buffer.copy_(saved)
        held = math.sqrt(sum(float(p.grad.norm()) ** 2 for p, f in zip(pairs, fresh, strict=True) if f is not None))
        held /= loop.grad_scale()
        new = math.sqrt(sum(float(f.norm()) ** 2 for f in fresh if f is not None))
        return held / new if new > 0 else math.nan

    def never_got_gradient(self) -> list[bool]:
        """Per parameter: True if no census found a gradient in it (empty before the first census)."""
        if not self.censuses:
            return []
        return [all(c["missing"][i] for c in self.censuses) for i in range(len(self.loop.named_params))]

    def columns(self, final: bool) -> dict:
        never = self.never_got_gradient()
        sizes = [p.numel() for _, p in self.loop.named_params]
        later = [c["accumulation"] for c in self.censuses if c["step"] >= 1]
        scalars = {
            "grad_zero_share_total": finite_median(c["zero_share"] for c in self.censuses),
            "params_without_grad": sum(never),
            "params_without_grad_share": sum(s for s, n in zip(sizes, never, strict=True) if n) / sum(sizes)
            if self.censuses and sum(sizes)
            else math.nan,
            "accumulation_ratio": finite_median(later),
            "grad_depth_ratio_init": self.censuses[0]["depth_ratio"] if self.censuses else math.nan,
            "grad_depth_ratio": finite_median(c["depth_ratio"] for c in self.censuses),
        }
        if not final:
            return scalars
        per_param = list(zip(*(c["norms"] for c in self.censuses), strict=True)) if self.censuses else []
        return {
            **scalars,
            "census_steps": [c["step"] for c in self.censuses],
            "param_names": [name for name, _ in self.loop.named_params],
            "grad_norm": [finite_median(v) for v in per_param],
            "grad_max": [finite_median(v) for v in zip(*(c["maxima"] for c in self.censuses), strict=True)],
            "grad_zero_share": [finite_median(v) for v in zip(*(c["zero_shares"] for c in self.censuses), strict=True)],
            "grad_missing": never,
            "grad_norm_curve": [c["total_norm"] for c in self.censuses],
            "accumulation_ratio_curve": [c["accumulation"] for c in self.censuses],
        }
