"""Benchmark of the doctor, measured side by side in one run.

1. Its cost on a user's loop, under its cost budget (default 3% of the loop's own time: harness/instruments/
   budget.py) and watching every step (budget=None), against the bare loop: the grid's digits MLP (about a
   millisecond a step), 600 steps and 3000; and a wider MLP on bigger batches (about 10 ms a step). Whole runs in
   turn (bare, budget, every step; which goes first rotates), the ratio of each to the bare run of its round, the
   median over rounds. The report after the loop is timed apart (it adds the evaluations and the fits). Beside
   each: the doctor's own measure of its cost and the steps it chose to watch in full (the budget's sampling).
   Whole runs, not steps interleaved: the budget reads the loop's time off the clock, and a loop interleaved with
   another would look twice as long to it.
2. Its cost on a small causal transformer language model (byte-level, on Python's own standard library source),
   bare and under the doctor's default budget, whole runs in turn as above; beside it, the reads back to the host
   (each a device sync on an accelerator) that the doctor adds per step, between census steps and at them,
   counted by harness/instruments/host_reads.py in one more run of each (the count slows a run: never timed).
3. Time to a verdict in probe mode on the CPU, for the example recipes.

Run it with `make bench-doctor` (bench/integrations_overhead.py then measures the Lightning and Hugging Face
callbacks the same way); `python bench/doctor_overhead.py --transformer` runs part 2 alone. Only ratios within
one run are worth quoting.
"""

import os
import statistics
import sys
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from torch import nn

from doctor import Doctor
from doctor.recipe import load, run
from harness.data import load_splits, training_batches
from harness.instruments.host_reads import HostReads
from harness.model import MLP

ROOT = Path(__file__).resolve().parent.parent
REPEATS = 9
GOAL = 1.03  # the doctor's cost on the loop of one-millisecond steps, at most (issue 34)
MODES = {"bare": None, "budget": 0.03, "every step": None}  # the Doctor's budget= in each mode
TRANSFORMER_GOAL = 1.05  # the doctor's cost on the transformer family's loop, at most (issue 35)
VOCAB, CONTEXT, WIDTH, LAYERS, LM_BATCH = 256, 64, 128, 2, 16  # bytes; a small causal LM
LM_FILES = ("textwrap.py", "string.py", "shlex.py", "fnmatch.py", "heapq.py", "bisect.py", "glob.py", "queue.py")


def user_loop(data, mode: str, steps: int, width: int, batch: int) -> tuple[float, float, object]:
    """Seconds of the loop, of the report after it (0 without the doctor), and the doctor's cost (None: none)."""
    torch.manual_seed(0)
    model = MLP(data.x_train.shape[1], data.n_classes, hidden=[width, width])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    batches = training_batches(data.x_train, data.y_train, batch, seed=0)
    start = time.perf_counter()
    if mode != "bare":
        doctor = Doctor(model, optimizer, loss_fn, validation=[(data.x_val, data.y_val)], budget=MODES[mode])
        batches = doctor.watch(batches)
    for _step, (x, y) in zip(range(steps), batches, strict=False):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        if mode != "bare":
            doctor.after_backward(loss)
        optimizer.step()
    loop = time.perf_counter() - start
    if mode == "bare":
        return loop, 0.0, None
    start = time.perf_counter()
    report = doctor.report()
    return loop, time.perf_counter() - start, report.cost


def overhead(data, what: str, steps: int, width: int, batch: int) -> None:
    """Print the doctor's cost on this loop, under its budget and watching every step, beside the bare loop."""
    user_loop(data, "budget", steps, width, batch)  # first-use imports and caches, not timed
    order = list(MODES)
    loops = {mode: [] for mode in order}
    reports, costs = [], []
    for repeat in range(REPEATS):
        # The host's load drifts over seconds: each round's three runs share it, in turn first.
        for mode in order[repeat % 3 :] + order[: repeat % 3]:
            loop, report, cost = user_loop(data, mode, steps, width, batch)
            loops[mode].append(loop)
            if mode == "budget":
                reports.append(report)
                costs.append(cost)
    bare = loops["bare"]
    ratio = {mode: statistics.median(w / b for b, w in zip(bare, loops[mode], strict=True)) for mode in MODES}
    cost = costs[len(costs) // 2]
    print(
        f"1. {what}, {steps} steps of {1000 * statistics.median(bare) / steps:.2f} ms: under the budget"
        f" {ratio['budget']:.3f}x, every step watched {ratio['every step']:.3f}x (medians of {REPEATS} rounds;"
        f" goal <= {GOAL}: {'met' if ratio['budget'] <= GOAL else 'MISSED'}); the budget watched"
        f" {statistics.median(c.watched_steps for c in costs):.0f} of {steps} steps in full, its own measure"
        f" {100 * statistics.median(c.share for c in costs):.1f}% (e.g. {cost.line()}); the report after it:"
        f" {statistics.median(reports):.3f} s"
    )


class CausalLM(nn.Module):
    """Token and position embeddings, causal pre-LN transformer layers, a final LayerNorm, a map to the bytes."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.position = nn.Embedding(CONTEXT, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, dropout=0.1, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(length)
        hidden = self.embed(tokens) + self.position(torch.arange(length))
        return self.head(self.norm(self.blocks(hidden, mask=mask, is_causal=True)))


def text_batches(steps: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows of standard library source: (inputs, next bytes), (LM_BATCH, CONTEXT) each."""
    library = Path(os.path.dirname(os.__file__))
    tokens = torch.tensor(list(b"\n".join((library / name).read_bytes() for name in LM_FILES)), dtype=torch.long)
    starts = torch.randint(
        0, len(tokens) - CONTEXT - 1, (steps * LM_BATCH,), generator=torch.Generator().manual_seed(0)
    )
    at = starts.unsqueeze(1) + torch.arange(CONTEXT)
    x, y = tokens[at], tokens[at + 1]
    return [(x[i : i + LM_BATCH], y[i : i + LM_BATCH]) for i in range(0, len(x), LM_BATCH)]


def lm_loop(batches: list, doctored: bool, reads: HostReads | None = None) -> tuple[float, list[int], object]:
    """Seconds of the loop, the host reads of each step (with `reads`), and the doctor (None: the bare loop)."""
    torch.manual_seed(0)
    model = CausalLM()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    doctor = Doctor(model, optimizer, loss_fn) if doctored else None
    per_step, counted = [], 0
    start = time.perf_counter()
    for x, y in doctor.watch(batches) if doctor else batches:
        logits = model(x)
        loss = loss_fn(logits.reshape(-1, VOCAB), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        if doctor:
            doctor.after_backward(loss)
        optimizer.step()
        if reads is not None:  # from one step's end to the next: the doctor reads each batch before the body
            per_step.append(reads.count - counted)
            counted = reads.count
    return time.perf_counter() - start, per_step, doctor


def transformer_overhead(steps: int = 100, repeats: int = 7) -> None:
    """Print the doctor's cost on a small causal LM's loop beside the bare loop, and the host reads it adds."""
    batches = text_batches(steps)
    lm_loop(batches[:10], doctored=True)  # first-use imports and caches, not timed
    loops = {"bare": [], "doctor": []}
    for repeat in range(repeats):
        for mode in ["bare", "doctor"][repeat % 2 :] + ["bare", "doctor"][: repeat % 2]:
            loops[mode].append(lm_loop(batches, doctored=mode == "doctor")[0])
    ratio = statistics.median(d / b for b, d in zip(loops["bare"], loops["doctor"], strict=True))
    with HostReads() as reads:
        _, bare_reads, _ = lm_loop(batches, doctored=False, reads=reads)
    with HostReads() as reads:
        _, doctor_reads, doctor = lm_loop(batches, doctored=True, reads=reads)
    censuses = {c["step"] for c in doctor.instruments.census.censuses}
    added = [d - b for d, b in zip(doctor_reads, bare_reads, strict=True)]
    between = [n for step, n in enumerate(added) if step not in censuses]
    at = [n for step, n in enumerate(added) if step in censuses]
    cost = doctor.report().cost
    print(
        f"2. doctor on a causal transformer LM (byte-level, width {WIDTH}, {LAYERS} layers, context {CONTEXT},"
        f" batches of {LM_BATCH}; AdamW), {steps} steps of {1000 * statistics.median(loops['bare']) / steps:.1f} ms:"
        f" under the budget {ratio:.3f}x (median of {repeats} rounds; goal <= {TRANSFORMER_GOAL}:"
        f" {'met' if ratio <= TRANSFORMER_GOAL else 'MISSED'}); {cost.line()}; host reads per step the doctor"
        f" adds: {max(between, default=0)} at most on the {len(between)} steps between census steps, a median of"
        f" {statistics.median(at):.0f} on its {len(at)} census steps (the bare loop's own: {sum(bare_reads)} in"
        f" {steps} steps, AdamW's step counters on the CPU)"
    )


def main() -> None:
    torch.set_num_threads(1)
    if "--transformer" in sys.argv[1:]:
        print(f"machine: torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}")
        transformer_overhead()
        return
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("config")
    data = load_splits(cfg.dataset, cfg.data, cfg.seed)
    print(f"machine: torch {torch.__version__}, 1 thread, python {sys.version.split()[0]}")
    overhead(data, "doctor on the digits MLP (widths 64, 64; batches of 64)", 600, 64, 64)
    overhead(data, "the same, a longer run", 3000, 64, 64)
    overhead(data, "doctor on a wider MLP (widths 1024, 1024; batches of 128)", 200, 1024, 128)
    transformer_overhead()
    for name in ("healthy_cnn", "starved_loader"):
        recipe = load(ROOT / "examples" / f"{name}.py")
        times = []
        for _ in range(3):
            start = time.perf_counter()
            verdict = run(recipe, force_probe=True).verdict
            times.append(time.perf_counter() - start)
        steps = getattr(recipe, "STEPS", 300)
        seconds = statistics.median(times)
        print(f"3. probe mode, examples/{name}.py ({steps} steps, CPU): verdict {verdict} in {seconds:.1f} s")


if __name__ == "__main__":
    main()
