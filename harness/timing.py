"""Where a training step's time goes on its device: the measurements of the device study.

`DeviceClock` wraps the host-to-device copy and marks step boundaries. After `warmup` steps it measures:
- time per step: wall time of the remaining steps over their number, synchronized with the GPU at both ends,
  so that asynchronous CUDA work is counted where it ends;
- copy share: time spent copying batches to the device over the loop's time (CUDA events on the GPU, host
  time on the CPU, where the copy is a no-op);
- GPU busy share: GPU time from the start to the end of each step (CUDA events) over the loop's wall time; an
  upper bound, since gaps between kernels inside a step count as busy. NaN on the CPU;
- peak memory: CUDA's peak allocation on the GPU; on the CPU the process's largest resident set seen at the
  step boundaries (it includes the libraries, and a worker's earlier cells).
"""

import math
import time

import psutil
import torch

from harness.column import F64, I64, Column

# What `DeviceClock.finish` returns (NoClock: nothing), after loop.timing_warmup steps.
COLUMNS = (
    Column("step_time_s", F64, "seconds per training step, synchronized with the GPU"),
    Column("copy_share", F64, "share of the loop spent copying batches to the device"),
    Column(
        "gpu_busy_share",
        F64,
        "GPU time from the start to the end of each step over wall time (upper bound); NaN on CPU",
    ),
    Column("peak_memory_bytes", I64, "CUDA peak allocation; on the CPU, the process's largest resident set seen"),
)


class DeviceClock:
    """Times the steps of one loop on `device`; see the module docstring for what it measures."""

    def __init__(self, device: torch.device, warmup: int = 10, sample_every: int = 50):
        self.device, self.warmup, self.sample_every = device, warmup, sample_every
        self.cuda = device.type == "cuda"
        self.step = 0
        self.timed_start: float | None = None
        self.copy_host_s = 0.0
        self.copy_events: list = []
        self.step_events: list = []
        self.peak_rss = 0
        self.process = psutil.Process()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(device)

    def _event(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def begin_step(self) -> None:
        self.step += 1
        if self.step == self.warmup + 1:
            if self.cuda:
                torch.cuda.synchronize(self.device)
            self.timed_start = time.perf_counter()
        if self.cuda and self.timed_start is not None:
            self.step_events.append([self._event(), None])

    def copy(self, *tensors: torch.Tensor) -> tuple:
        """The tensors on the device, the copy timed."""
        timed = self.timed_start is not None
        if self.cuda and timed:
            start = self._event()
            moved = tuple(t.to(self.device, non_blocking=True) for t in tensors)
            self.copy_events.append((start, self._event()))
            return moved
        began = time.perf_counter()
        moved = tuple(t.to(self.device, non_blocking=True) for t in tensors)
        if timed:
            self.copy_host_s += time.perf_counter() - began
        return moved

    def end_step(self) -> None:
        if self.cuda and self.step_events and self.step_events[-1][1] is None:
            self.step_events[-1][1] = self._event()
        if self.step % self.sample_every == 0:
            self.peak_rss = max(self.peak_rss, self.process.memory_info().rss)

    def finish(self) -> dict:
        if self.timed_start is None:
            return {
                "step_time_s": math.nan,
                "copy_share": math.nan,
                "gpu_busy_share": math.nan,
                "peak_memory_bytes": None,
            }
        if self.cuda:
            torch.cuda.synchronize(self.device)
        wall = time.perf_counter() - self.timed_start
        timed_steps = self.step - self.warmup
        if self.cuda:
            copy_s = sum(start.elapsed_time(end) for start, end in self.copy_events) / 1000
            busy_s = sum(start.elapsed_time(end) for start, end in self.step_events if end is not None) / 1000
            peak = torch.cuda.max_memory_allocated(self.device)
        else:
            copy_s, busy_s = self.copy_host_s, math.nan
            peak = max(self.peak_rss, self.process.memory_info().rss)
        return {
            "step_time_s": wall / timed_steps,
            "copy_share": copy_s / wall,
            "gpu_busy_share": busy_s / wall,
            "peak_memory_bytes": int(peak),
        }


class NoClock(DeviceClock):
    """The same interface measuring nothing: the bare loop of the benchmarks."""

    def __init__(self, device: torch.device):
        self.device = device

    def begin_step(self) -> None:
        pass

    def copy(self, *tensors: torch.Tensor) -> tuple:
        return tuple(t.to(self.device, non_blocking=True) for t in tensors)

    def end_step(self) -> None:
        pass

    def finish(self) -> dict:
        return {}
