"""`diagnose`: a finished run (`Observed`) judged into a `Report`, and the notes on what was not judged.

The fitted rules (analysis/rules.py) come after the facts no threshold is fitted for: a non-finite loss
(doctor/nonfinite.py), most steps skipped by a GradScaler, the facts of the doctor's own watch (padding scored by
the loss), and under torch.distributed the checks across ranks (doctor/distributed.py). What a run's task, its
examples or the report's time budget leave unjudged is said in the report's note, never passed over in silence.
It reads only the `Observed` and the thresholds: it changes nothing, and the same run can be judged again.
"""

import math
from collections.abc import Mapping
from types import MappingProxyType

from analysis.checks import CHECKS
from analysis.checks.numerics import AMP_STEPS_SKIPPED
from analysis.checks.numerics import CHECKS as NUMERIC_CHECKS
from analysis.data_forecast import data_forecast
from analysis.features import FEATURES, RESTS_ON_REFERENCES, features, too_few_for_references, too_few_in_class
from analysis.forecast import forecast
from analysis.rules import GRID_FACTS, HEALTHY, RULES, UNEXPLAINED, VERDICTS, WARNING, Finding, load_thresholds
from analysis.rules import diagnose as rule_findings
from doctor import distributed
from doctor.machine import bigger_machine
from doctor.nonfinite import READS_TRAINED_ACCURACY
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
    rules = RULES
    if observed.rows_are_positions:  # a sequence flattened by the loop: its checks not judged (NOT_JUDGED_ON_TASK)
        unjudged = {v for _, verdicts in NOT_JUDGED_ON_TASK["sequence"] for v in verdicts}
        rules = [rule for rule in RULES if rule.verdict not in unjudged]
    findings, note = _findings(observed, thresholds, rules)
    for fact in reversed(JUDGED_FACTS):  # each goes after the numeric facts, so the first of them ends up first
        found = fact.judge_fact(measured)
        if found is not None:
            findings = _with_fact(findings, found)
    across = distributed.judge(observed.ranks)
    if across is not None and across.findings:  # facts of the setup, ahead of what any one rank's steps show
        findings = [*across.findings, *(f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED))]
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


NUMERIC_FACTS = tuple(check.verdict for check in NUMERIC_CHECKS)  # judged first: nonfinite_loss, amp_steps_skipped
# The facts judged on the measurements, in order: the grid's, then those only the doctor's watch reads for a verdict
# (params_left_out: a whole-run reading of the watched model).
JUDGED_FACTS = [
    *GRID_FACTS,
    *(c for c in CHECKS if c.fact is not None and not c.in_grid and c.verdict not in NUMERIC_FACTS),
]


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


def _findings(
    observed: Observed, thresholds: Mapping[str, float], rules: list = RULES
) -> tuple[list[Finding], str | None]:
    """The findings, and the note saying which rules were not judged (None: all were).

    The fitted rules' findings come after a non-finite loss, or after most steps skipped by the GradScaler, where
    either happened.
    """
    measured, origin = observed.measurements, observed.nonfinite
    # The grid's facts: in diagnose, below. A run its user cut short is judged on its outcome once its loss flattened.
    findings = rule_findings(measured, rules, dict(thresholds), facts=[], cut_short=observed.stopped is not None)
    fitted = [f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED)]
    if origin is not None:
        # Any NaN or inf training loss is the verdict; the fitted rules come after it, judged only where their
        # measurements can still mean something.
        first = nonfinite_finding(origin, observed.steps, measured["nonfinite_losses"])
        if origin.from_the_start:
            note = (
                f"no fitted rule was judged: the {origin.what.split()[0]} were non-finite from the first step, and"
                " every measurement the rules read saw them"
            )
            return [first], note
        note = "not judged on a non-finite run, as they read the trained model's accuracy: " + ", ".join(
            READS_TRAINED_ACCURACY
        )
        return [first, *(f for f in fitted if f.verdict not in READS_TRAINED_ACCURACY)], note
    skipped = AMP_STEPS_SKIPPED.judge_fact(measured)
    if skipped is not None:
        return [skipped, *fitted], None
    return findings, None


def _with_fact(findings: list[Finding], fact: Finding) -> list[Finding]:
    """The findings with a failing fact judged on no fitted threshold (padding_in_loss) after the numeric facts.

    It comes ahead of the fitted rules' findings: it is certain, and every loss they read counts what it names. It
    takes the place of healthy, and of unexplained_failure, whose failure it may explain.
    """
    kept = [f for f in findings if f.verdict not in (HEALTHY, UNEXPLAINED)]
    at = next((i for i, f in enumerate(kept) if f.verdict not in NUMERIC_FACTS or f.kind == WARNING), len(kept))
    return [*kept[:at], fact, *kept[at:]]
