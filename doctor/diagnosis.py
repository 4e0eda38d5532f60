"""`diagnose`: a finished run (`Observed`) judged into a `Report`, and the notes on what was not judged.

The findings are analysis/findings.py's (`judge`: the same pipeline as a grid record's, which puts each at its
place, analysis/checks/base.py: `Place`): every fact the doctor's watch reads, the fitted rules and the outcome
gate, with the findings only the doctor's own watches make: a non-finite loss and where it began
(doctor/nonfinite.py) and, under torch.distributed, the checks across ranks (doctor/distributed.py). What a run's
task, its examples or the report's time budget leave unjudged is said in the report's note, never passed over in
silence. It reads only the `Observed` and the thresholds: it changes nothing, and the same run can be judged again.
"""

import math
from collections.abc import Mapping
from types import MappingProxyType

from analysis.data_forecast import data_forecast
from analysis.features import FEATURES, RESTS_ON_REFERENCES, features, too_few_for_references, too_few_in_class
from analysis.findings import JUDGED_FACTS, Judged, judge
from analysis.forecast import forecast
from analysis.rules import RULES, VERDICTS, load_thresholds
from doctor import distributed
from doctor.machine import bigger_machine
from doctor.nonfinite import finding as nonfinite_finding
from doctor.observed import NO_VALIDATION, Observed
from doctor.report import Report
from harness.after_training import FIT_COLUMNS


def diagnose(observed: Observed, thresholds: Mapping[str, float] | None = None) -> Report:
    """The report on a finished run; it changes nothing and reads only `observed` and the thresholds.

    Without `thresholds`: the fitted ones of the step budget nearest to the run's steps (analysis/thresholds.json).
    """
    thresholds = load_thresholds(observed.steps) if thresholds is None else thresholds
    measured = observed.measurements
    across = distributed.judge(observed.ranks)
    judged = _judged(observed, thresholds, across)
    findings, note = judged.findings, judged.note
    if observed.input_scale:  # said, not silent: the rule reading it could not be judged
        unscaled = f"unscaled_inputs not judged: the input scale was not measured ({observed.input_scale})"
        note = unscaled if note is None else f"{note}; {unscaled}"
    own = observed.own_evaluations
    own = own and f"judged on the loop's own losses, no evaluation of the doctor's (accuracy, validation, fits): {own}"
    beyond = _beyond_the_task(measured, observed.rows_are_positions)
    empty = observed.unvalidated if observed.unvalidated != NO_VALIDATION else None  # given, and read as none
    unjudged_notes = (
        empty,
        own,
        beyond,
        _too_few_examples(measured),
        _too_few_in_class(measured),
        _no_rows(observed),
        _cut_at_report(observed),
    )
    for unjudged in unjudged_notes:
        if unjudged:
            note = unjudged if note is None else f"{note}; {unjudged}"
    return Report(
        tuple(findings),
        bigger_machine(observed, findings[0].verdict, thresholds["starved_loader"]),
        observed.steps,
        measured,
        MappingProxyType(features(measured)),
        note,
        # Would longer training help? The training loss carried to 2x and 4x the steps (analysis/forecast.py).
        forecast=forecast(measured.get("train_loss_curve")),
        # Would more data help? The quick references refitted on shares of the examples (analysis/data_forecast.py).
        data_forecast=data_forecast(
            measured.get("data_curve_examples"),
            measured.get("data_curve_val_acc"),
            measured.get("reference_val_examples"),
        ),
        cost=observed.cost,
        stopped=observed.stopped,
        ranks=across,
        read_as=_read_as(observed),
    )


def _judged(observed: Observed, thresholds: Mapping[str, float], across: distributed.Ranks | None) -> Judged:
    """The run's findings in their order and the note on what that left unjudged: analysis/findings.py's `judge`.

    With every fact the doctor's watch reads, and the findings only its own watches make: the checks across ranks
    (`across`) and a non-finite loss. A run its user cut short is judged on its outcome once its loss flattened.
    """
    measured, origin = observed.measurements, observed.nonfinite
    rules = RULES
    if observed.rows_are_positions:  # a sequence flattened by the loop: its checks not judged (NOT_JUDGED_ON_TASK)
        unjudged = {v for _, verdicts in NOT_JUDGED_ON_TASK["sequence"] for v in verdicts}
        rules = [rule for rule in RULES if rule.verdict not in unjudged]
    return judge(
        measured,
        thresholds,
        rules,
        JUDGED_FACTS,
        across_ranks=across.findings if across is not None else (),
        nonfinite=None if origin is None else nonfinite_finding(origin, observed.steps, measured["nonfinite_losses"]),
        from_the_start=origin.what.split()[0] if origin is not None and origin.from_the_start else None,
        cut_short=observed.stopped is not None,
        keep_still_improving=True,
    )


def _read_as(observed: Observed) -> str:
    """One line: the loss the run's loss was computed from and its inputs' shapes, and what the examples are.

    Decided once per run (the loss's inputs on census steps, the example axis from the first batches); "" for a run
    observed before the loss's inputs were read (an older kept observation).
    """
    measured = observed.measurements
    loss, shapes = measured.get("loss_read"), measured.get("loss_shapes")
    if loss is None:
        return ""
    said = f"the loss: {loss} on {shapes}" if loss else "the loss: no torch.nn.functional loss was read"
    if observed.own_evaluations:
        examples = "the doctor's own evaluations not run (the loss reads another prediction than forward()'s)"
    elif observed.rows_are_positions:
        examples = "its rows are positions of the loop's (time, batch) output, flattened"
    elif observed.examples_not_rows:
        examples = f"examples not the inputs' rows ({observed.examples_not_rows})"
    else:
        examples = "examples: the rows of the inputs' first dimension"
    return f"{said}; {examples}"


# The checks a task leaves without what they read, and why: a check that cannot judge a task says so in the report
# (`not_judged` in the JSON, its feature null), never a pass and never a cause it cannot support.
NOT_JUDGED_ON_TASK = {
    "sequence": (
        (
            # shuffled_labels: the model's accuracy alone cannot tell unlearnable labels from text that leaves
            # little to predict (analysis/features.py: learnable_skill).
            "no quick reference fits a label per position",
            ("shuffled_labels", "label_noise", "class_imbalance", "model_too_small"),
        ),
        ("a batch's positions are no independent draws of a label", ("unshuffled_batches",)),
    )
}


def _beyond_the_task(measured: Mapping, positions: bool = False) -> str | None:
    """Which checks this run's task leaves unjudged (their feature not measured), and why; None: none.

    `positions`: the loss's rows are a sequence's positions, flattened by the loop (`output.view(-1, ntokens)`):
    judged as a sequence, whatever its rows' task, and those checks are not judged whatever their feature reads.
    """
    task = "sequence" if positions else measured.get("task")
    values, said = features(measured), []
    for why, verdicts in NOT_JUDGED_ON_TASK.get(task, ()):
        unjudged = [v for v in verdicts if v in VERDICTS and (positions or math.isnan(values[VERDICTS[v].feature]))]
        if unjudged:
            said.append(f"{', '.join(unjudged)} ({why})")
    return f"not judged on {task} outputs: {'; '.join(said)}" if said else None


def _no_rows(observed: Observed) -> str | None:
    """Which checks rest on quick references that no example rows could be fitted with, and why (None: they could)."""
    positions = observed.rows_are_positions or observed.measurements.get("task") == "sequence"  # the task's note
    if not observed.examples_not_rows or observed.own_evaluations or positions:
        return None
    values = features(observed.measurements)
    unjudged = [r.verdict for r in RULES if r.feature in RESTS_ON_REFERENCES and math.isnan(values[r.feature])]
    if not unjudged:
        return None
    return f"not judged: {', '.join(unjudged)} (no quick reference was fitted: {observed.examples_not_rows})"


def _cut_at_report(observed: Observed) -> str | None:
    """Which checks read a fit the report's time budget cut, and where it was cut (None: no fit was cut)."""
    said = []
    for fit, where in observed.cut_at_report.items():
        reads = {f.name for f in FEATURES.values() if set(f.reads) & set(FIT_COLUMNS[fit])}
        unjudged = [rule.verdict for rule in RULES if rule.feature in reads]
        what = f"{', '.join(unjudged)} not judged: " if unjudged else ""
        said.append(f"{what}{fit} was cut at the report's time budget ({where}; Doctor(report_budget=) sets it)")
    return "; ".join(said) or None


def _too_few_examples(measured: Mapping) -> str | None:
    """Which checks rest on quick references scored on too few examples to judge by (None: enough, or none)."""
    why = too_few_for_references(measured)
    if why is None:
        return None
    unjudged = [rule.verdict for rule in RULES if rule.feature in RESTS_ON_REFERENCES]
    return f"not judged: {', '.join(unjudged)}, and whether the run fell short ({why})"


def _too_few_in_class(measured: Mapping) -> str | None:
    """Which checks read one class's validation count that is too small to judge by (None: none, or judged)."""
    why = too_few_in_class(measured)
    if why is None or too_few_for_references(measured) is not None:  # already said, with every reference check
        return None
    reads_a_class = {f.name for f in FEATURES.values() if "prior_shift_class_examples" in f.reads}
    return f"not judged: {', '.join(r.verdict for r in RULES if r.feature in reads_a_class)} ({why})"
