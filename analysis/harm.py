"""Does a planted fault measurably hurt? Each fault cell against its healthy twin.

A fault of some size on some problem can do no harm: Adam at 30 times its rate still learns an easy problem,
a second frozen layer does not matter when the first one already separates the classes. A doctor that names
such a run is not wrong about the mechanism, but it is not finding a failure either, so cells whose fault did
no measurable harm are left out of the scores (and counted in the report), for fitting and for scoring alike.

The twin is the healthy cell with the same problem, seed and recipe (optimizer and its rate, batch size and
feed, model family, steps). The harm is read on what the fault costs:
- accuracy: validation accuracy below the twin's by more than max(0.01, two binomial standard errors of the
  twin's accuracy on that many validation examples);
- time (starved_loader): the training loop at least 1.5 times as long as the twin's;
- by definition (wrong_mode, periodic_bad_batch, double_softmax, squashed_logits, over_clipped,
  unshuffled_batches): the loop is wrong whatever the accuracy says: validation read with dropout on, a tenth of
  the batches with random labels, a loss handed probabilities, a softmax loss handed values a sigmoid keeps within
  1 of each other (no class ever gets more than e / (e + C - 1) of the probability), gradients clipped while
  still scaled by a GradScaler (to max_norm / 65536: Adam, which divides any gradient scale out, hides it; SGD
  barely moves), batches sorted by class (each step trains on one class, and the model a run ends with depends
  on where in the sorted order it stopped). These count as harmful in every cell. bce_on_single_label (binary
  cross-entropy on one-hot rows) counts as harmful by definition where the problem has three classes or more;
  with two, two sigmoids on one-hot rows are a proper model of one label, and its harm is read on accuracy like
  any other fault's.
A fault cell without a twin in the records counts as harmful.

`label_stopped_early` reads harm the same way along one run: a healthy run cut at a shorter budget whose own
continuation reached a measurably better validation accuracy was stopped while still improving, and that is
its label at that budget (the fault still_improving plants by cutting the healthy recipe short).
"""

import math

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from analysis.checks import HARM
from analysis.rules import HEALTHY

# Each check says how its harm is read (analysis/checks/: `harm`); these are the grid's views of that.
BY_DEFINITION = {v for v, harm in HARM.items() if harm.kind == "definition" and harm.from_classes is None}
BY_TIME = {v: harm.slower for v, harm in HARM.items() if harm.kind == "time"}  # the twin's loop times this
# harmful by definition with at least this many classes
BY_DEFINITION_FROM_CLASSES = {v: harm.from_classes for v, harm in HARM.items() if harm.from_classes is not None}


STILL_IMPROVING = "still_improving"


def _tolerance(accuracy: float, n: int) -> float:
    """How much lower an accuracy must be to count as harm: max(0.01, two binomial standard errors)."""
    return max(0.01, 2 * math.sqrt(max(accuracy * (1 - accuracy), 0.0) / max(n, 1)))


def label_stopped_early(cut: pd.DataFrame, records: pd.DataFrame) -> pd.DataFrame:
    """`cut` (records at a budget, same index) with healthy runs that did measurably better later relabeled.

    Relabeled: diagnosis `still_improving`, when the run as it ended reached a validation accuracy (R² for
    regression targets) above the cut's by more than the harm tolerance.
    """
    if cut.empty or "final_val_acc" not in cut:
        return cut
    ended = records.loc[cut.index]
    later = ended.steps > cut.steps
    tolerance = [_tolerance(a, n) for a, n in zip(ended.final_val_acc, ended.n_val.fillna(1), strict=True)]
    gained = (ended.final_val_acc - cut.final_val_acc).fillna(0) > tolerance
    stopped = (cut.diagnosis == HEALTHY) & later & gained
    if not stopped.any():
        return cut
    cut = cut.copy()
    cut.loc[stopped, "diagnosis"] = STILL_IMPROVING
    return cut


def _twin_key(record: pd.Series) -> tuple:
    """What a fault cell and its healthy twin share: problem, seed, family, optimizer, batches, steps, device."""
    cfg = OmegaConf.create(record.config_yaml or "{}")
    optimizer = OmegaConf.select(cfg, "optimizer", default=None)
    optimizer = OmegaConf.to_container(optimizer) if optimizer is not None else {}
    return (
        record.dataset,
        record.seed,
        record.model,
        tuple(sorted((k, str(v)) for k, v in optimizer.items())),
        OmegaConf.select(cfg, "data.batch_size", default=None),
        OmegaConf.select(cfg, "data.batches", default="indexed"),
        OmegaConf.select(cfg, "loop.steps", default=None),
        record.device,
    )


def harm_table(records: pd.DataFrame) -> pd.DataFrame:
    """For each record: `harmful` and `by_outcome`, the two answers of the harm test, and `healthy` (planted so).

    `harmful`: its fault measurably hurt against its healthy twin (healthy cells: True). `by_outcome`: that was
    read on the run's accuracy (healthy cells, and fault cells with one fault planted judged against a twin's
    accuracy, not by definition or by time).

    The outcome gate (analysis/outcome_gate.py) is fitted on the `by_outcome` rows: what it should tell from the run
    alone is what the twin tells here.
    """
    keys = pd.Series([_twin_key(record) for _, record in records.iterrows()], index=records.index)
    healthy = records.fault == HEALTHY
    twins = {key: index for key, index in zip(keys[healthy], records.index[healthy], strict=True)}
    planted_healthy = (records.diagnosis == HEALTHY) & (records.verdicts.str.len() <= 1)
    result = pd.DataFrame({"harmful": True, "by_outcome": planted_healthy, "healthy": planted_healthy})
    for index, record in records.iterrows():
        if len(record.verdicts) > 1 or record.diagnosis == HEALTHY or record.diagnosis in BY_DEFINITION:
            continue
        classes = BY_DEFINITION_FROM_CLASSES.get(record.diagnosis)
        if classes is not None and record.ln_classes > math.log(classes - 0.5):  # ln C (fault cells: class targets)
            continue
        twin = twins.get(keys[index])
        if twin is None:
            continue
        reference = records.loc[twin]
        if record.diagnosis in BY_TIME:
            result.loc[index, "harmful"] = record.loop_s >= BY_TIME[record.diagnosis] * reference.loop_s
            continue
        accuracy, n = reference.final_val_acc, max(int(reference.n_val), 1)
        tolerance = _tolerance(accuracy, n)
        result.loc[index, "harmful"] = bool(np.nan_to_num(accuracy - record.final_val_acc, nan=1.0) > tolerance)
        result.loc[index, "by_outcome"] = True
    return result


def harmful(records: pd.DataFrame) -> pd.Series:
    """For each record: True if its fault measurably hurt against its healthy twin (healthy cells: True)."""
    return harm_table(records).harmful
