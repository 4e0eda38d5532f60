"""`Report`: what the doctor found on one run, and its two renderings, the text report and the JSON one.

A report is a value (`diagnose`, doctor/diagnosis.py, builds it; nothing changes it). `str(report)` is the text
the command line prints; `report.to_dict()` is the JSON `--json` writes, in the shape docs/report.schema.json holds
(`SCHEMA_VERSION`), with every finding's margin in one unit (`MARGIN_UNIT`).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from analysis.data_forecast import DataForecast
from analysis.features import FEATURES
from analysis.forecast import Forecast
from analysis.rules import HEALTHY, RULES, UNEXPLAINED, WARNING, Finding
from doctor import distributed
from doctor.machine import Checklist
from harness.instruments.budget import Cost


@dataclass(frozen=True)
class Report:
    """What the doctor found: the verdict, the other failing findings and the warnings, and the bigger-machine check.

    `findings` lists the verdict first (the first failing finding, or `healthy` / `unexplained_failure` when
    none is failing), then the other failing findings in rule order, then the warnings: oddities the run did not
    pay for (analysis/rules.py). `note` says which rules were not judged, and why (on a run whose loss went NaN
    or inf). `places`, set when the run came from a recipe file (doctor/recipe.py), gives per verdict the
    recipe's lines its next step is about. `stopped` says why the run ended before its loop did (a step or time
    budget, Ctrl-C). `ranks`, under torch.distributed, holds the checks across ranks (doctor/distributed.py), whose
    failing findings lead `findings`. A report is a value: `diagnose` builds it, nothing changes it.
    """

    findings: tuple[Finding, ...]
    checklist: Checklist
    steps: int
    measurements: Mapping  # keyed like a grid record's columns
    features: Mapping  # the rules' features, computed from the measurements
    note: str | None = None
    places: Mapping[str, list[str]] = field(default_factory=dict)  # verdict -> recipe lines (doctor.recipe.run)
    # Would longer training help? The training loss carried to 2x and 4x the steps (analysis/forecast.py).
    forecast: Forecast | None = None
    # Would more data help? The quick references refitted on shares of the examples (analysis/data_forecast.py).
    data_forecast: DataForecast | None = None
    cost: Cost | None = None  # what the doctor cost on the loop, and the steps it watched in full
    stopped: str | None = None  # why the run stopped before its loop ended: a step or time budget, or Ctrl-C
    ranks: distributed.Ranks | None = None  # the checks across the ranks of a distributed run (None: one process)
    read_as: str = ""  # what the loss received and what the examples are, as the doctor read them ("": not read)

    @property
    def verdict(self) -> str:
        return self.findings[0].verdict

    @property
    def failing(self) -> list[Finding]:
        """The failing findings, the verdict first (none on a healthy run)."""
        return [f for f in self.findings if f.kind != WARNING and f.verdict != HEALTHY]

    @property
    def warnings(self) -> list[Finding]:
        """Oddities the run did not pay for: listed under the verdict, never the verdict."""
        return [f for f in self.findings if f.kind == WARNING]

    @property
    def headline(self) -> str:
        """The verdict with its warnings counted: 'healthy', 'healthy, 2 warnings', 'dead_relu, 1 warning'."""
        n = len(self.warnings)
        return self.verdict + (f", {n} warning{'s' * (n != 1)}" if n else "")

    def to_dict(self) -> dict:
        """The report as JSON-ready values, in the shape docs/report.schema.json holds (`SCHEMA_VERSION`).

        Each finding carries what its rule judged (analysis/checks/base.py, Finding): the feature, its value, the
        threshold and the direction, and `margin` in one unit for every finding (`MARGIN_UNIT`); null where a
        finding was judged on no threshold (healthy, unexplained_failure) or a value was not measured.
        """
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "steps": self.steps,
            "margin_unit": MARGIN_UNIT,
            "stopped": self.stopped,  # null: the loop ran to its end
            "findings": [_finding_dict(f) for f in self.findings],
            "warnings": len(self.warnings),
            "not_judged": self.note,
            "forecast": None
            if self.forecast is None
            else {
                "metric": "training loss",
                "form": self.forecast.form,
                "now": self.forecast.now,
                "at": [
                    {
                        "steps": steps,
                        "value": value,
                        "plus_minus_90": half,
                        "range_90": list(self.forecast.range_at(steps)),
                    }
                    for steps, (value, half) in self.forecast.at.items()
                ],
            },
            "data_forecast": None
            if self.data_forecast is None
            else {
                "metric": "quick references' held-out accuracy",
                "examples": list(self.data_forecast.examples),
                "accuracies": list(self.data_forecast.accuracies),
                "at_twice_the_examples": self.data_forecast.doubled,
                "gain": self.data_forecast.gain,
            },
            "places": dict(self.places),  # only findings of this report have places
            "bigger_machine": self.checklist.to_dict(),
            "cost": None if self.cost is None else self.cost.to_dict(),
            "ranks": None if self.ranks is None else self.ranks.to_dict(),
            "features": {k: _plain(float(v)) for k, v in self.features.items()},
        }

    def __str__(self) -> str:
        failing, warnings = [f for f in self.findings if f.kind != WARNING], self.warnings
        stopped = f"; {self.stopped}" if self.stopped else ""
        lines = [f"verdict: {self.headline}  (from {self.steps} training steps{stopped})"]
        for i, finding in enumerate(failing, 1):
            lines += self._finding_lines(f"  {i}. ", finding)
        if self.verdict not in (HEALTHY, UNEXPLAINED) and len(failing) == 1 and self.note is None:
            lines.append("  (no other rule fired)")
        elif len(failing) > 1:
            lines.append("  (later findings can follow from the first: fix it and run the doctor again)")
        if self.note is not None:
            lines.append(f"  ({self.note})")
        if self.read_as:
            lines.append(f"read as: {self.read_as}")
        if warnings:
            lines.append("warnings (oddities this run did not pay for; worth a look, not the cause of a failure):")
            for finding in warnings:
                lines += self._finding_lines("  - ", finding)
        if self.forecast is not None:
            lines.append(f"would longer training help? {self.forecast.summary()}")
        if self.data_forecast is not None:
            lines.append(f"would more data help? {self.data_forecast.line()}")
        copy = self.clean_copy_line()
        if copy is not None:
            lines.append(f"what does this model reach in a clean loop? {copy}")
        if self.ranks is not None:
            lines.append(self.ranks.heading())
            lines += [f"  {line.mark} {line.check}: {line.detail}" for line in self.ranks.lines]
        lines.append("is a bigger machine the answer?")
        lines += [f"  {c.mark} {c.check}: {c.detail}" for c in self.checklist.checks]
        lines.append(f"  => {self.checklist.conclusion}")
        if self.cost is not None:
            lines.append(f"the doctor's cost: {self.cost.line()}")
        return "\n".join(lines)

    def clean_copy_line(self) -> str | None:
        """The clean copy of the model against the run, in accuracy (None where no copy was scored on validation).

        Said, not judged: healthy recipes do not all reach a full-batch Adam fit (analysis/outcome_gate.py:
        OutcomeGate), so a run short of its copy is a reading to look at, not a verdict, unless the thresholds give
        the copy a tolerance.
        """
        if math.isnan(float(self.features.get("copy_skill", math.nan))):
            return None
        m = self.measurements
        own = m.get("final_val_acc", math.nan)
        return (
            f"a fresh copy from the model factory, fitted in a clean loop (Adam, full batch) on"
            f" {m['capacity_examples']} of the training examples, reaches {m['capacity_val_score']:.0%} on"
            f" {m['capacity_val_examples']} validation examples; this run reached {own:.0%}"
        )

    def _finding_lines(self, bullet: str, finding: Finding) -> list[str]:
        sure = "" if math.isnan(finding.margin) else f"  [{_margin(finding)}]"
        indent = " " * len(bullet)
        lines = [f"{bullet}{finding.verdict}: {finding.evidence}{sure}", f"{indent}next: {finding.next_step}"]
        return lines + [f"{indent}where: {place}" for place in self.places.get(finding.verdict, [])]

    def plot(self, path, thresholds: dict[str, float] | None = None):
        """Write one PNG figure of what the verdict rests on to `path` and return the path (doctor/plot.py).

        One panel per failing finding (its feature against the threshold it was judged with, over the run or at
        the step it was read), gradient norms per parameter and per census, the update-to-weight ratio and the
        data-wait share against the thresholds of the rules that read them (`thresholds`, default: the fitted
        ones of the budget nearest to the run's steps), and last the loss curve and its spikes. matplotlib is
        imported only here.
        """
        from doctor.plot import plot_report

        return plot_report(self, path, thresholds)


# The version of to_dict()'s shape (docs/report.schema.json): raised whenever a field changes meaning or goes.
SCHEMA_VERSION = 1
# The one unit of every finding's JSON `margin` (Finding.past_threshold): the text report's margin is a factor
# for log-scale features and a difference for the others, two units a program would have to tell apart.
MARGIN_UNIT = (
    "the feature's own units past the threshold: value - threshold where the finding fires above it,"
    " threshold - value where it fires below"
)


def _plain(value):
    """A value for JSON: None for NaN (not measured, or not judged)."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _finding_dict(finding: Finding) -> dict:
    """One finding as JSON-ready values: what the rule judged, as it judged it (None where it judged no threshold)."""
    return {
        "verdict": finding.verdict,
        "kind": finding.kind,
        "feature": finding.feature,
        "value": _plain(finding.value),
        "threshold": _plain(finding.threshold),
        "direction": finding.direction,
        "margin": _plain(finding.past_threshold),
        "evidence": finding.evidence,
        "next_step": finding.next_step,
    }


def _margin(finding: Finding) -> str:
    rule = next(r for r in RULES if r.verdict == finding.verdict)
    if FEATURES[rule.feature].log:
        return f"{finding.margin:.1f}x past its threshold"
    return f"{finding.margin:+.2f} past its threshold"
