"""What one check is: a rule over one feature, and everything else the project says about that check.

A `Rule` fires when one feature (analysis/features.py) crosses the threshold named after its verdict. A `Check`
is a rule together with what the rest of the project needs to know of it, so that it lives in one place:

- its order among the checks (the first failing finding is the verdict, so order is a decision of the check's);
- `parts`: which of a recipe file's names its next step is about (the doctor's "where:" lines, doctor/recipe.py);
- `fault_types`: which of DeepFD's fault types its verdict names (the real-bug benchmark, benchmarks/realbugs);
- `harm`: how the grid tells whether its planted fault measurably hurt (analysis/harm.py);
- `fact`: for the few checks whose threshold is a fact and not fitted (a NaN loss is a NaN loss), that
  threshold; such a check reads a record column, not a feature, and is judged ahead of the fitted rules;
- `place`: for a fact, where its finding stands among a run's findings (`Place`: the one statement of their order).

Each is validated when the check is built: an unknown feature, column, recipe part or harm kind raises at import,
naming the known ones, instead of a rule silently reading NaN.
"""

import difflib
import math
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from analysis.checks.evidence import EVIDENCE_VALUES, Evidence
from analysis.features import FEATURES
from harness.columns import NAMES as COLUMNS

# What an evidence sentence may show: the rule's own value and threshold, a record column, a feature, or an
# evidence value (analysis/checks/evidence.py).
SHOWABLE = {"value", "threshold", *COLUMNS, *FEATURES, *EVIDENCE_VALUES}

HEALTHY = "healthy"  # the verdict when no finding fails and the outcome shows no harm
UNEXPLAINED = "unexplained_failure"  # the verdict when the outcome shows harm and no check names why

FAILING, WARNING = "failing", "warning"  # the two kinds of finding


class Place(IntEnum):
    """Where a finding stands in one run's list of findings, first to last: the one statement of their order.

    analysis/findings.py (`judge`) puts every finding of a run at its place, for a grid record (analysis/rules.py:
    `diagnose`, and `verdicts` on many records) and for the doctor's run alike; the first finding is the verdict.

    - ACROSS_RANKS: facts of the setup across torch.distributed ranks (doctor/distributed.py finds them): ahead of
      what any one rank's steps show;
    - NONFINITE: a non-finite training loss (its watch: harness/instruments/nonfinite.py). The numeric facts are then
      not judged, nor the fitted rules that read the trained model's accuracy: a model that outputs NaN has none
      (nor any fitted rule where the inputs or the weights were non-finite from the first step);
    - NUMERIC: the other numeric facts (most steps skipped by a GradScaler);
    - FACT: the other facts (a threshold that is a fact, on a record column: padding scored by the loss): certain,
      and every loss the fitted rules read counts what they name;
    - FAILING: the fitted rules that fail (one that `needs_harm` only where the outcome gate is open);
    - WITHOUT_FAILURE: only where nothing above fails, the verdict without a failure (analysis/outcome_gate.py):
      `still_improving`, `unexplained_failure` or `healthy`;
    - WARNING: the fitted rules the run overcame (the outcome gate shut).

    Within a place, findings stand in the order of the checks (`Check.order`: the lists judged are in that order)
    or, for those a caller's own watch found, in the order it found them.
    """

    ACROSS_RANKS = 0
    NONFINITE = 1
    NUMERIC = 2
    FACT = 3
    FAILING = 4
    WITHOUT_FAILURE = 5
    WARNING = 6

    @property
    def fails(self) -> bool:
        """Whether a finding at this place fails: it can be the verdict, and no verdict without a failure is given."""
        return self < Place.WITHOUT_FAILURE


FACT_PLACES = (Place.NONFINITE, Place.NUMERIC, Place.FACT)  # the places a fact may declare

# The names a recipe file may define that a next step can be about (doctor/recipe.py reads their lines).
RECIPE_PARTS = ("model", "batches", "loss", "optimizer", "train", "STEPS", "validation")
# DeepFD's fault types (benchmarks/realbugs/subjects.csv, deepfd_labels).
FAULT_TYPES = (
    "lr",
    "opt",
    "epoch",
    "act",
    "loss",
    "init",
    "missing_prep",
    "layers",
    "layer_props",
    "training_data_quality",
)


def _unknown(what: str, name: str, known) -> ValueError:
    """An error naming the unknown `name` and the nearest known ones (all of them where there are few)."""
    known = sorted(known)
    near = difflib.get_close_matches(name, known, n=5) if len(known) > 12 else known
    return ValueError(f"unknown {what} {name!r}; {'nearest' if len(known) > 12 else 'known'}: {', '.join(near)}")


@dataclass(frozen=True)
class Rule:
    """Fires when `feature` is above (or, with above=False, below) the threshold named after the verdict."""

    verdict: str
    feature: str
    above: bool
    # True: a structural oddity or a risk, failing only when the outcome gate is open (else a warning).
    # False: wrong whatever the run reached, failing on its own evidence.
    needs_harm: bool
    evidence: str  # filled with the run's measurements, its features, {value} and {threshold}
    next_step: str
    # A value the fitted threshold never passes, where the rule's own sentence ends (model_too_small: training
    # accuracy short of the references' means a value under 1; a fit above 1 would fire on runs that are not).
    bound: float | None = None
    # An evidence value (analysis/checks/evidence.py) that words the next step from what the run measured (the
    # loader's settings); where it is empty, or None here, the next step is `next_step`.
    advice: str | None = None

    def bounded(self, threshold: float) -> float:
        """The threshold held at the rule's bound, if it has one."""
        if self.bound is None:
            return threshold
        return min(threshold, self.bound) if not self.above else max(threshold, self.bound)

    def next_step_for(self, fields: Mapping) -> str:
        """The next step for one run: the `advice` value its measurements make, else `next_step`."""
        return (fields[self.advice] if self.advice is not None else "") or self.next_step

    def fires(self, value: float, threshold: float) -> bool:
        if math.isnan(value):
            return False
        return value > threshold if self.above else value < threshold

    def judged(self, value: float, threshold: float) -> dict:
        """What a finding of this rule keeps of its judgement: Finding's feature, value, threshold and above."""
        return {"feature": self.feature, "value": float(value), "threshold": float(threshold), "above": self.above}

    def margin(self, value: float, threshold: float) -> float:
        """How far the value sits beyond the threshold: a factor for log-scale features, else a difference."""
        if FEATURES[self.feature].log and value > 0 and threshold > 0:
            ratio = value / threshold
            return ratio if self.above else 1 / ratio
        return value - threshold if self.above else threshold - value


@dataclass(frozen=True)
class Finding:
    """One rule that fired on one run (or the verdict when none is failing: healthy, unexplained_failure).

    `feature`, `value`, `threshold` and `above` are what the rule judged, kept as it judged them: the feature's name
    (for an unfitted fact, the record column it reads), its value on this run, the threshold it crossed, and
    whether the rule fires above it (False: below). None and NaN on healthy and unexplained_failure, which no one
    threshold decides.
    """

    verdict: str
    evidence: str
    next_step: str
    margin: float  # how far past its threshold, as the text report says it: a factor for log-scale features
    kind: str = FAILING  # FAILING: the run's verdict can rest on it; WARNING: an oddity the run did not pay for
    feature: str | None = None
    value: float = math.nan
    threshold: float = math.nan
    above: bool | None = None

    @property
    def direction(self) -> str | None:
        """'above' or 'below': which side of its threshold the finding fires on (None: judged on no threshold)."""
        return None if self.above is None else "above" if self.above else "below"

    @property
    def past_threshold(self) -> float:
        """How far the value lies past the threshold, in the feature's own units: positive on the side that fires.

        One unit for every finding (the margin above is a factor for log-scale features); NaN where not judged.
        """
        if self.above is None:
            return math.nan
        return self.value - self.threshold if self.above else self.threshold - self.value


@dataclass(frozen=True)
class Harm:
    """How the grid tells whether a planted fault measurably hurt, against its healthy twin (analysis/harm.py).

    `accuracy`: validation accuracy measurably below the twin's. `definition`: the loop is wrong whatever the
    accuracy says, harmful in every cell; with `from_classes`, only where the problem has at least that many
    classes (on accuracy below). `time`: the training loop at least `slower` times as long as the twin's.
    """

    kind: str = "accuracy"
    slower: float | None = None
    from_classes: int | None = None

    KINDS = ("accuracy", "definition", "time")

    def __post_init__(self):
        if self.kind not in self.KINDS:
            raise _unknown("harm kind", self.kind, self.KINDS)
        if (self.kind == "time") != (self.slower is not None):
            raise ValueError("a harm read on time, and only that, gives `slower`: how many times the twin's loop")
        if self.from_classes is not None and self.kind != "definition":
            raise ValueError("`from_classes` qualifies a harm by definition")


ON_ACCURACY = Harm()
BY_DEFINITION = Harm("definition")


@dataclass(frozen=True)
class Check(Rule):
    """One check: its rule, and its order, recipe parts, real-bug fault types, harm test and (rarely) fact."""

    order: int = 0  # the checks are judged in increasing order; the first failing one is the verdict
    parts: tuple[str, ...] = ()
    fault_types: tuple[str, ...] = ()
    harm: Harm = field(default=ON_ACCURACY)
    fact: float | None = None  # a threshold that is a fact, not fitted; `feature` then names a record column
    # A fact's place among a run's findings (`Place`: NONFINITE, NUMERIC or FACT; None: FACT). A fitted rule declares
    # none: its finding is FAILING or a WARNING, as the outcome gate says.
    place: Place | None = None
    # A fact the grid's cells measure too, so that the grid's verdicts judge it (analysis/rules.py: GRID_FACTS);
    # the others read what only the doctor's own watch finds (analysis/checks/numerics.py).
    in_grid: bool = False
    # Names the evidence shows that whoever judges the check supplies (the doctor's non-finite watch: where the
    # first NaN came from), beside a record's columns, the features and the evidence values.
    supplied: tuple[str, ...] = ()

    def __post_init__(self):
        for name in self.shown():
            if name not in SHOWABLE and name not in self.supplied:
                raise _unknown(f"value in the evidence of check {self.verdict}:", name, SHOWABLE)
        if self.advice is not None and self.advice not in EVIDENCE_VALUES:
            raise _unknown(f"advice of check {self.verdict}:", self.advice, EVIDENCE_VALUES)
        if self.fitted and self.feature not in FEATURES:
            raise _unknown(f"feature for check {self.verdict}:", self.feature, FEATURES)
        if not self.fitted and self.feature not in COLUMNS:
            raise _unknown(f"record column for check {self.verdict}:", self.feature, COLUMNS)
        if self.in_grid and self.fitted:
            raise ValueError(
                f"check {self.verdict}: in_grid is for a fact (a fitted rule is judged in the grid anyway)"
            )
        if self.place is not None and (self.fitted or self.place not in FACT_PLACES):
            raise ValueError(f"check {self.verdict}: only a fact declares its place, one of {FACT_PLACES}")
        for part in self.parts:
            if part not in RECIPE_PARTS:
                raise _unknown(f"recipe part for check {self.verdict}:", part, RECIPE_PARTS)
        for kind in self.fault_types:
            if kind not in FAULT_TYPES:
                raise _unknown(f"fault type for check {self.verdict}:", kind, FAULT_TYPES)

    def shown(self) -> list[str]:
        """The names the evidence sentence shows, in order ({value} and {threshold} among them)."""
        return [name for _, name, _, _ in string.Formatter().parse(self.evidence) if name]

    @property
    def fitted(self) -> bool:
        """Whether `make fit` fits the threshold (else it is `fact`)."""
        return self.fact is None

    @property
    def fact_place(self) -> Place:
        """Where this fact's finding stands among a run's findings (`place`, FACT where it declares none)."""
        return Place.FACT if self.place is None else self.place

    def judge_fact(self, measured: Mapping) -> Finding | None:
        """An unfitted check on one run's measurements (keyed like a record): its finding where it fires."""
        if self.fitted:
            raise ValueError(f"{self.verdict} has a fitted threshold: analysis.rules.diagnose judges it")
        value = measured.get(self.feature)
        if value is None or not self.fires(float(value), self.fact):
            return None
        evidence = Evidence(measured, {}).sentence(self.evidence, value, self.fact)
        return self.finding(evidence, float(value))

    def finding(self, evidence: str, value: float) -> Finding:
        """The finding of this fact on a run where it fired: no factor margin (a fact is not fitted), what it judged."""
        return Finding(self.verdict, evidence, self.next_step, math.nan, **self.judged(value, self.fact))
