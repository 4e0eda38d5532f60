"""Records: one parquet file per cell, in one flat folder, all written with one explicit, versioned schema.

`pandas.read_parquet(folder)` loads a whole grid in one call. Files are written under a temporary name that
starts with "." (which parquet readers skip) and renamed into place, so a reader never meets a partial file.
Bump SCHEMA_VERSION whenever a column changes meaning or type.

A folder is also where sweeps meet: `scan_folder` names what else lies there (foreign, truncated or misnamed
files, which make `pandas.read_parquet(folder)` fail or read wrong rows), `quarantine` moves those aside,
`check_writable` tries a folder before any cell runs, and `cell_lock` keeps two sweeps from running one cell.
"""

import errno
import fcntl
import hashlib
import os
import re
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf

SCHEMA_VERSION = 15  # 2: update ratio curve and peak; 3: the device study's timings; 4: the checks of issue 6;
# 5: severity, the reference fit, the class prior, loss spike count, snapshots per step budget; 6: the task, the
# loss's kind, the output's spread and reach; 7: update ratios over weight matrices only;
# 8: the loop's shape (backward passes per optimizer step, gradients carried across steps); 9: clipping, the
# learning rate against the one the optimizer was built with, the GradScaler's scale and skipped steps;
# 10: the batches' label mix; 11: how far apart the logits of a softmax loss can get; 12: the planted faults and
# their verdicts as lists (`faults`, `verdicts`), `diagnosis` null when two are planted; 13: steps at a decayed rate,
# the weights' norm against their first, parameters with a gradient that never moved, targets changed at the loss;
# 14: capacity, what a fresh model fits of up to 1024 training examples in a clean loop; 15: the data learning curve

_f64, _i64, _str = pa.float64(), pa.int64(), pa.string()
_COLUMNS = [
    # identity: what was run
    ("cell_id", _str, "readable key plus a hash of the resolved recipe"),
    ("fault", _str, "the condition planted, as a label: its conf/fault/ option name (names joined by + for two)"),
    ("faults", pa.list_(_str), "the conf/fault/ options planted: one, or two at once"),
    ("diagnosis", _str, "the verdict the rules should give when one fault is planted (null for two); scoring only"),
    ("verdicts", pa.list_(_str), "the verdicts that should name the planted faults, one per fault; scoring only"),
    ("severity", _str, "size of the planted fault: mild, planted or extreme (none for the healthy controls)"),
    ("dataset", _str, "conf/dataset/ option name"),
    ("model", _str, "conf/model/ option name"),
    ("seed", _i64, "seed of the split, initialization, batch order and probes"),
    ("device", _str, "cpu or cuda"),
    ("status", _str, "ok, failed or skipped"),
    ("error", _str, "why the cell failed or was skipped; null when ok"),
    # run metadata
    ("schema_version", pa.int32(), "version of this schema"),
    ("started_at", pa.timestamp("us", tz="UTC"), "when the cell started"),
    ("wall_s", _f64, "seconds the whole cell took"),
    ("torch_version", _str, "torch.__version__"),
    ("python_version", _str, "platform.python_version()"),
    ("host", _str, "machine that ran the cell"),
    ("device_name", _str, "GPU name, or the CPU architecture"),
    ("threads", _i64, "torch threads the cell ran with"),
    ("config_yaml", _str, "the resolved recipe (config without run.*) as YAML"),
    # the problem
    ("n_classes", _i64, "number of classes C"),
    ("n_train", _i64, "training examples"),
    ("n_val", _i64, "validation examples"),
    ("steps", _i64, "training steps the measurements rest on (backward passes seen)"),
    ("task", _str, "multiclass, onehot, binary, multilabel or regression, read from targets and output"),
    ("output_layer", _str, "the model's last module without children, `name (Type)`: where the output comes from"),
    (
        "loss_kind",
        _str,
        "what the loss computes, named from one batch: cross_entropy, nll, bce_logits, bce, mse, l1, other",
    ),
    # first loss
    ("first_loss", _f64, "loss of the first batch, before any update"),
    ("ln_classes", _f64, "ln C: the first loss of a model that guesses uniformly"),
    # memorization
    ("memorize_rates", pa.list_(_f64), "Adam rates tried on the fresh model"),
    ("memorize_losses", pa.list_(_f64), "final loss on the memorized examples, per rate"),
    ("memorize_best_loss", _f64, "lowest finite final loss over the rates"),
    ("memorize_best_rate", _f64, "rate that reached it"),
    # capacity
    ("capacity_score", _f64, "score (accuracy, R², per-label accuracy) of a fresh model on the examples it fitted"),
    ("capacity_baseline", _f64, "what the best constant answer scores on those examples"),
    ("capacity_rate", _f64, "the Adam rate that reached that score (the better of capacity.rates)"),
    ("capacity_examples", _i64, "training examples the fresh model fitted, full batch, capacity.steps steps"),
    # gradient census (per parameter tensor: medians over the census steps)
    ("census_steps", pa.list_(_i64), "steps at which the census was taken"),
    ("param_names", pa.list_(_str), "parameter tensors, in model order"),
    ("grad_norm", pa.list_(_f64), "per parameter: median L2 norm of .grad"),
    ("grad_max", pa.list_(_f64), "per parameter: median largest |.grad|"),
    ("grad_zero_share", pa.list_(_f64), "per parameter: median share of exact zeros in .grad"),
    ("grad_missing", pa.list_(pa.bool_()), "per parameter: .grad was None at every census"),
    ("grad_norm_curve", pa.list_(_f64), "global gradient norm at each census step"),
    ("grad_zero_share_total", _f64, "median share of exact zeros over all gradient entries"),
    ("params_without_grad", _i64, "parameter tensors that never got a gradient"),
    ("params_without_grad_share", _f64, "share of parameter elements that never got a gradient"),
    ("accumulation_ratio", _f64, "median |.grad| / |fresh gradient of the same loss| after step 0 (1 = zeroed)"),
    ("accumulation_ratio_curve", pa.list_(_f64), "that ratio at each census step"),
    ("backwards_per_step", _f64, "median backward passes per optimizer step (k when accumulating over k batches)"),
    ("optimizer_steps", _i64, "optimizer steps taken"),
    ("grad_carried_share", _f64, "share of optimizer steps whose next backward found .grad not cleared"),
    (
        "grad_kept_at_step",
        _f64,
        "median over the optimizer steps after each census: gradient norm at the step over its (unscaled) norm after"
        " the last backward (1 = not clipped)",
    ),
    ("clipped_step_share", _f64, "share of those steps whose gradient norm was cut (by clipping) at the step"),
    ("lr_built", _f64, "the optimizer's rate before any schedule (param group 0's initial_lr, else its first lr)"),
    ("lr_peak_share", _f64, "the highest rate any optimizer step used, over lr_built"),
    ("lr_last_share", _f64, "the last optimizer step's rate, over lr_built"),
    (
        "lr_decayed_share",
        _f64,
        "share of optimizer steps whose rate was under 5% of the highest rate a step had used before it",
    ),
    ("amp_scale_min", _f64, "the GradScaler's smallest scale (read at census steps and at the end; none: NaN)"),
    ("amp_scale_last", _f64, "the GradScaler's scale at the end"),
    ("amp_skipped_share", _f64, "share of optimizer steps the GradScaler skipped for inf/NaN gradients (scale halved)"),
    ("update_ratio", pa.list_(_f64), "per parameter: median |step update| / |weight| at census steps"),
    (
        "update_ratio_median",
        _f64,
        "median update ratio over weight matrices (all parameters if none) that got gradients",
    ),
    ("update_ratio_curve", pa.list_(_f64), "at each census step: the median update ratio over those matrices"),
    ("update_ratio_peak", _f64, "largest value of that curve"),
    ("weight_norm_ratio", _f64, "joint norm of the weight matrices at the last census step over the first one's"),
    (
        "unmoved_share",
        _f64,
        "share of parameter elements with a gradient at a census step that no update measured at one moved at all",
    ),
    ("grad_depth_ratio_init", _f64, "|.grad| of the first weight matrix over the last one's, at the first census"),
    ("grad_depth_ratio", _f64, "median of that ratio over the census steps"),
    # dead units
    ("dead_unit_share_init", _f64, "share of ReLU units never active on the probe batch, at initialization"),
    ("dead_unit_share", _f64, "the same after training"),
    ("dead_unit_share_layers", pa.list_(_f64), "after training, per ReLU module"),
    # the activations, inputs, labels and outputs the loop hands over
    ("saturated_share_init", _f64, "share of Tanh/Sigmoid outputs within 1% of their bounds, at initialization"),
    ("saturated_share", _f64, "the same after training"),
    ("activation_growth_init", _f64, "RMS of the last activation module's output over the first's, at init"),
    ("input_rms", _f64, "root mean square of the first batch's inputs (standardized data: about 1)"),
    ("label_imbalance", _f64, "most frequent class over least frequent among the training labels seen"),
    (
        "batch_label_mix",
        _f64,
        "mean entropy of each batch's labels over that of random batches of the same size from the labels seen",
    ),
    ("majority_share", _f64, "share of the most frequent class among the training labels seen (the class prior)"),
    (
        "targets_changed_share",
        _f64,
        "share of target rows the loss received (census steps) that differ from the batch's (NaN: loss not a Module)",
    ),
    (
        "output_prob_share",
        _f64,
        "median share of output rows that are probabilities, handed to a loss that applies a softmax",
    ),
    (
        "output_spread",
        _f64,
        "std of the output over the probe batch's examples over its RMS (0: the same for every input)",
    ),
    ("target_reach_gap", _f64, "share of the probe batch's targets the output cannot produce (NaN for class indices)"),
    (
        "logit_reach_span",
        _f64,
        "for a loss that applies its own softmax: how far apart the outputs can get (max - min), with the inputs"
        " and the output layer scaled up to 1000x; NaN for other losses and for rows that always sum to 1",
    ),
    (
        "confident_disagreement",
        _f64,
        "median over the later half of the census steps: share of the batch whose label the model contradicts"
        " (another class ranked first, the label given p < 0.1)",
    ),
    ("confident_disagreement_peak", _f64, "the largest share of a census batch confidently contradicted so far"),
    ("train_in_eval_share", _f64, "share of training forwards run in eval mode (0 without dropout/BatchNorm)"),
    ("eval_in_train_share", _f64, "share of evaluation forwards run in training mode (0 without them)"),
    # data wait
    ("data_wait_s", _f64, "seconds the loop waited for batches"),
    ("loop_s", _f64, "seconds of the training loop"),
    ("data_wait_share", _f64, "data_wait_s / loop_s"),
    # where a step's time goes (harness/timing.py), after loop.timing_warmup steps
    ("step_time_s", _f64, "seconds per training step, synchronized with the GPU"),
    ("copy_share", _f64, "share of the loop spent copying batches to the device"),
    (
        "gpu_busy_share",
        _f64,
        "GPU time from the start to the end of each step over wall time (upper bound); NaN on CPU",
    ),
    ("peak_memory_bytes", _i64, "CUDA peak allocation; on the CPU, the process's largest resident set seen"),
    # curves
    ("train_loss_curve", pa.list_(_f64), "training loss at every step"),
    ("nonfinite_losses", _i64, "steps whose training loss was NaN or infinite"),
    ("loss_spikes", _i64, "how many steps' loss jumped far out of its recent range"),
    ("loss_spike_steps", pa.list_(_i64), "steps (batch indices) whose loss jumped far out of its recent range"),
    ("loss_spike_period", _f64, "most common gap between consecutive spikes"),
    ("periodic_spikes", _i64, "how many gaps between consecutive spikes equal that period"),
    ("val_steps", pa.list_(_i64), "steps at which validation ran (0 = before training)"),
    ("val_loss_curve", pa.list_(_f64), "validation loss at val_steps"),
    ("val_acc_curve", pa.list_(_f64), "validation accuracy at val_steps"),
    # final
    ("final_train_loss", _f64, "training-set loss after the last step (eval mode)"),
    ("final_train_acc", _f64, "training-set accuracy after the last step"),
    ("final_val_loss", _f64, "validation loss after the last step"),
    ("final_val_acc", _f64, "validation accuracy after the last step"),
    # the run's own yardsticks (harness/reference.py), from the first training examples and validation
    ("baseline_val_acc", _f64, "validation accuracy of always answering the most frequent training label"),
    ("reference_val_acc", _f64, "best validation accuracy of a ridge classifier and 5-NN on the same examples"),
    ("reference_train_acc", _f64, "the ridge classifier's accuracy on its own training examples"),
    ("reference_linear_val_acc", _f64, "the ridge classifier's validation accuracy"),
    ("reference_loo_acc", _f64, "5-NN leave-one-out accuracy on the reference's training examples"),
    ("reference_knn_val_acc", _f64, "5-NN accuracy on validation, trained on those examples"),
    ("prior_shift", _f64, "most under-represented training class: its validation share over its training share"),
    ("reference_examples", _i64, "distinct training examples the references were fitted on"),
    ("reference_val_examples", _i64, "held-out examples the references were scored on"),
    ("data_curve_examples", pa.list_(_i64), "data learning curve: training examples the references were refitted on"),
    ("data_curve_val_acc", pa.list_(_f64), "data learning curve: the references' validation accuracy at each size"),
]
# The measurements that move as a run goes on, taken again at every step budget (loop.budgets) as if the run
# had stopped there; the record's own columns of these names are the snapshot at the run's end.
CHECKPOINT_COLUMNS = [
    "steps",
    "first_loss",
    "nonfinite_losses",
    "grad_zero_share_total",
    "params_without_grad",
    "params_without_grad_share",
    "accumulation_ratio",
    "backwards_per_step",
    "optimizer_steps",
    "grad_carried_share",
    "grad_kept_at_step",
    "clipped_step_share",
    "lr_built",
    "lr_peak_share",
    "lr_last_share",
    "lr_decayed_share",
    "amp_scale_min",
    "amp_scale_last",
    "amp_skipped_share",
    "update_ratio_median",
    "update_ratio_peak",
    "weight_norm_ratio",
    "unmoved_share",
    "grad_depth_ratio_init",
    "grad_depth_ratio",
    "dead_unit_share_init",
    "dead_unit_share",
    "saturated_share_init",
    "saturated_share",
    "activation_growth_init",
    "input_rms",
    "label_imbalance",
    "batch_label_mix",
    "majority_share",
    "targets_changed_share",
    "output_prob_share",
    "output_spread",
    "target_reach_gap",
    "logit_reach_span",
    "confident_disagreement",
    "confident_disagreement_peak",
    "train_in_eval_share",
    "eval_in_train_share",
    "loss_spikes",
    "loss_spike_period",
    "periodic_spikes",
    "data_wait_s",
    "loop_s",
    "data_wait_share",
    "final_train_loss",
    "final_train_acc",
    "final_val_loss",
    "final_val_acc",
]
_TYPES = {name: kind for name, kind, _ in _COLUMNS}
_COLUMNS.append(
    (
        "checkpoints",
        pa.list_(pa.struct([(name, _TYPES[name]) for name in CHECKPOINT_COLUMNS])),
        "per step budget reached: the measurements of CHECKPOINT_COLUMNS at that step",
    )
)
SCHEMA = pa.schema(
    [pa.field(name, kind, metadata={"doc": doc}) for name, kind, doc in _COLUMNS],
    metadata={"schema_version": str(SCHEMA_VERSION)},
)


def recipe_yaml(cfg: DictConfig) -> str:
    """The resolved config without the `run` node: what the cell computes, not how it is run."""
    recipe = OmegaConf.to_container(cfg, resolve=True)
    recipe.pop("run", None)
    return OmegaConf.to_yaml(OmegaConf.create(recipe), sort_keys=True)


def planted(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """The planted faults (one, or two with `fault=[a,b]`) and the verdicts that should name them, in order."""
    faults = cfg.get("fault") or {}
    if {"name", "diagnosis"} & set(faults):
        raise ValueError("a fault file names itself as `fault: {<name>: <verdict>}`, not with name/diagnosis keys")
    if not faults or not all(isinstance(v, str) and v for v in faults.values()):
        raise ValueError("no fault chosen: a fault file adds `fault: {<name>: <verdict>}`, e.g. {healthy: healthy}")
    return list(faults), list(faults.values())


def severity(cfg: DictConfig) -> str:
    """The size of the planted fault: the fault file's `severity`, else planted (none for a healthy control)."""
    if cfg.get("severity"):
        return str(cfg.severity)
    return "none" if set((cfg.get("fault") or {}).values()) == {"healthy"} else "planted"


def cell_id(cfg: DictConfig) -> str:
    """Readable name plus a hash of every resolved value, so a changed recipe never reuses an old record."""
    digest = hashlib.sha1(recipe_yaml(cfg).encode()).hexdigest()[:10]
    return f"{'+'.join(planted(cfg)[0])}-{cfg.dataset.name}-{cfg.device.name}-s{cfg.seed}-{digest}"


def empty_record() -> dict:
    """A record with every column present and null."""
    return dict.fromkeys(SCHEMA.names)


def record_path(folder: str | os.PathLike, cell_id: str) -> Path:
    return Path(folder) / f"{cell_id}.parquet"


def write_record(record: dict, folder: str | os.PathLike) -> Path:
    """Write one record atomically; returns its path. Unknown or missing columns are an error."""
    if set(record) != set(SCHEMA.names):
        extra, missing = set(record) - set(SCHEMA.names), set(SCHEMA.names) - set(record)
        raise KeyError(f"record does not match the schema: extra {sorted(extra)}, missing {sorted(missing)}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    final = record_path(folder, record["cell_id"])
    temporary = folder / f".{final.name}.{os.getpid()}.tmp"  # leading "." : readers skip it
    table = pa.Table.from_pylist([record], schema=SCHEMA)
    try:
        with open(temporary, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(temporary, final)  # atomic on POSIX: the old file or the new one, never half of one
    finally:
        temporary.unlink(missing_ok=True)
    return final


def remove_stale_temporaries(folder: str | os.PathLike) -> int:
    """Delete temporary files left by writers that no longer run (a killed sweep); returns how many."""
    removed = 0
    for path in Path(folder).glob(".*.tmp"):
        match = re.fullmatch(r"\..+\.parquet\.(\d+)\.tmp", path.name)
        if match is None:
            continue
        try:
            pid = int(match.group(1))
            os.kill(pid, 0)  # signal 0 only asks whether the process exists
        except ProcessLookupError:
            path.unlink(missing_ok=True)
            removed += 1
        except PermissionError:
            pass  # another user's live process
    return removed


def record_status(folder: str | os.PathLike, cell_id: str) -> str | None:
    """Status of the stored record of a cell: ok, failed or skipped.

    None if there is none, it cannot be read, it holds another cell's record (a copy under this name), or it was
    written with another schema version (a measurement may mean something else now, so a sweep measures it again).
    """
    path = record_path(folder, cell_id)
    if not path.exists():
        return None
    try:
        stored = pq.read_table(path, columns=["status", "schema_version", "cell_id"]).to_pylist()[0]
    except (OSError, pa.ArrowException, KeyError, IndexError):
        return None
    if stored["cell_id"] != cell_id:  # another cell's record under this name (a copy): this cell has none
        return None
    return stored["status"] if stored["schema_version"] == SCHEMA_VERSION else None


RECORD_COLUMNS = ("cell_id", "schema_version", "status")  # what makes a parquet file a record of this project
QUARANTINE = ".quarantine"  # a dot folder inside the records folder: parquet readers skip it


@dataclass
class FolderScan:
    """What a records folder holds besides whole records of the current schema, by file name."""

    records: list[str] = field(default_factory=list)  # readable one-row records named after their cell id
    foreign: dict[str, str] = field(default_factory=dict)  # name -> why it is not such a record
    older: list[str] = field(default_factory=list)  # records of another schema: load_records reads them, pandas
    # may not (it takes the columns of whichever file it reads first)


def scan_folder(folder: str | os.PathLike, trusted: Collection[str] = ()) -> FolderScan:
    """Look at every entry of a records folder that parquet readers read, from the files' footers only.

    `pandas.read_parquet(folder)` reads every entry whose name does not start with "." or "_", whatever its
    suffix, and descends into folders; so a notes file, a truncated record or another table there makes it
    fail or read wrong rows. A footer costs well under a millisecond to read, a thousand records a fraction
    of a second; names in `trusted` (records just written, or found whole by an earlier scan) are not read.
    """
    scan = FolderScan()
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return scan
    for entry in entries:
        if entry.name.startswith((".", "_")):
            continue  # temporaries, locks, .hydra and .quarantine: every parquet reader skips these
        if entry.name in trusted:
            problem = None
        elif entry.is_dir():
            problem = "a folder (parquet readers read it too)"
        else:
            problem = _record_problem(Path(entry.path))
        if problem == "other schema":
            scan.older.append(entry.name)
        elif problem:
            scan.foreign[entry.name] = problem
        else:
            scan.records.append(entry.name)
    return scan


@cache
def _parquet_schema() -> pq.ParquetSchema:
    """SCHEMA as parquet stores it: comparing a footer with it is cheaper than decoding the footer's arrow schema."""
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([], schema=SCHEMA), sink)
    return pq.read_metadata(pa.BufferReader(sink.getvalue())).schema


def _record_problem(path: Path) -> str | None:
    """Why the file is not a readable record of the current schema named after its cell id; None if it is one."""
    if path.suffix != ".parquet":
        return "not a parquet file"
    try:
        metadata = pq.read_metadata(path)
        current = metadata.schema.equals(_parquet_schema())
        names = SCHEMA.names if current else metadata.schema.to_arrow_schema().names
    except (OSError, pa.ArrowException):
        return "unreadable"  # truncated, empty, or not parquet at all
    if not set(RECORD_COLUMNS) <= set(names):
        return "not a record"
    if metadata.num_rows != 1:
        return f"{metadata.num_rows} rows, where a record has one"
    stored = _stored_cell_id(path, metadata)
    if stored is None:
        return "unreadable"
    if stored != path.stem:
        return f"holds the record of {stored}"  # a copy: read with the others, that cell would appear twice
    return None if current else "other schema"


def _stored_cell_id(path: Path, metadata: pq.FileMetaData) -> str | None:
    """The cell id a one-row file holds: from the footer's column statistics, else from the column itself."""
    group = metadata.row_group(0) if metadata.num_row_groups else None
    for i in range(group.num_columns if group else 0):
        column = group.column(i)
        if column.path_in_schema == "cell_id" and column.is_stats_set and column.statistics.has_min_max:
            value = column.statistics.min
            return value.decode() if isinstance(value, bytes) else value
    try:
        return pq.read_table(path, columns=["cell_id"]).column(0)[0].as_py()
    except (OSError, pa.ArrowException, IndexError):
        return None


def quarantine(folder: str | os.PathLike, names: list[str]) -> list[str]:
    """Move these entries of a records folder into its `.quarantine/` folder; returns the names moved.

    Nothing is deleted: a name already in the quarantine gets a numbered suffix.
    """
    target = Path(folder) / QUARANTINE
    target.mkdir(exist_ok=True)
    moved = []
    for name in names:
        destination, n = target / name, 0
        while destination.exists():
            n += 1
            destination = target / f"{name}.{n}"
        try:
            os.replace(Path(folder) / name, destination)  # the same file system: a rename, never a copy
        except FileNotFoundError:
            continue  # gone meanwhile (another sweep moved or rewrote it)
        moved.append(name)
    return moved


def check_writable(folder: str | os.PathLike) -> str | None:
    """Why records cannot be written into `folder`, or None when they can.

    It creates the folder if needed and then a file in it, and deletes that: permission bits say nothing to
    root, nor about a read-only mount or a full disk. The file is named like a writer's temporary, so that
    `remove_stale_temporaries` deletes it should this process be killed in between.
    """
    folder = Path(folder)
    probe = folder / f".write-check.parquet.{os.getpid()}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with open(probe, "wb") as sink:
            sink.write(b"PAR1")
        probe.unlink()
    except OSError as error:
        blocker = next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
        if isinstance(error, NotADirectoryError | FileExistsError) and (blocker or folder.exists()):
            return f"{blocker or folder} is a file, not a folder"  # what "Not a directory" means here
        where = f" ({error.filename})" if error.filename and Path(error.filename) != folder else ""
        return f"{error.strerror or error}{where}"
    return None


def remove_stale_locks(folder: str | os.PathLike) -> int:
    """Delete the lock files no process holds (left by a killed worker); returns how many.

    Each one is taken first, as `cell_lock` takes it, and removed while held: a lock another sweep holds is
    never touched, and a process about to take one that is removed sees it gone and makes a new one. (A
    worker of another sweep trying that very lock in the same instant is told it is held, and reports its
    cell as running elsewhere: rare, and said in its summary; its next run does the cell.)
    """
    removed = 0
    for path in Path(folder).glob(".*.lock"):
        try:
            descriptor = os.open(path, os.O_RDWR)
        except OSError:
            continue  # gone meanwhile
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            path.unlink(missing_ok=True)
            removed += 1
        except OSError:
            pass  # held: a cell is running
        finally:
            os.close(descriptor)
    return removed


def lock_path(folder: str | os.PathLike, cell_id: str) -> Path:
    return Path(folder) / f".{cell_id}.lock"  # leading "." : readers skip it


@contextmanager
def cell_lock(folder: str | os.PathLike, cell_id: str) -> Iterator[bool]:
    """Hold the lock of one cell while the body runs; yields False, at once, if another process holds it.

    An exclusive flock on `.<cell_id>.lock` in the records folder: the kernel lets go of it when its holder
    dies, however it dies, so a killed sweep never leaves a cell locked. flock works across the machines of
    a Dask cluster on a shared NFS folder too (Linux maps it to NFS byte-range locks). The lock file is
    removed by its holder, while still holding it, so that a folder is not left with a lock file per cell.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = lock_path(folder, cell_id)
    while True:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            os.close(descriptor)
            if error.errno in (errno.EWOULDBLOCK, errno.EACCES):
                yield False
                return
            # A file system without locks: run unlocked, as every sweep did before there were locks.
            yield True
            return
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        opened = os.fstat(descriptor)
        if current is not None and (current.st_ino, current.st_dev) == (opened.st_ino, opened.st_dev):
            break
        # We locked a file its holder had just removed: that lock guards nothing. Take the one there now.
        os.close(descriptor)
    try:
        yield True
    finally:
        path.unlink(missing_ok=True)  # before letting go: a process waiting on this file sees it gone, retries
        os.close(descriptor)
