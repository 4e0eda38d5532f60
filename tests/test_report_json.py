"""The report as JSON (`--json`, Report.to_dict): real reports hold to docs/report.schema.json, and it refuses others.

Every finding carries what its rule judged (feature, value, threshold, direction) as the rule judged it, and its
margin in the one unit the JSON states; the schema is strict enough that a report missing any of it fails.
"""

import copy
import json
import math

import jsonschema
import pytest
from conftest import ROOT
from report_runs import CASES, run
from test_doctor_bad_input import write

from analysis.checks.numerics import CHECKS as FACTS
from analysis.features import FEATURES
from analysis.rules import HEALTHY, UNEXPLAINED, VERDICTS, load_thresholds
from doctor.__main__ import main
from doctor.report import MARGIN_UNIT, SCHEMA_VERSION

SCHEMA = json.loads((ROOT / "docs" / "report.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
JUDGED = ("feature", "value", "threshold", "direction", "margin")  # null together, on findings judged on no threshold


def as_read(report) -> dict:
    """The report's JSON as a program reads it back (what the command line writes)."""
    return json.loads(json.dumps(report.to_dict()))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["properties"]["schema_version"]["const"] == SCHEMA_VERSION == 1
    assert SCHEMA["properties"]["margin_unit"]["const"] == MARGIN_UNIT


@pytest.mark.parametrize("case", CASES)
def test_real_reports_validate_against_the_schema(case):
    report = run(case)
    document = as_read(report)
    VALIDATOR.validate(document)
    assert report.headline == CASES[case][1], str(report)
    assert document["schema_version"] == 1 and document["margin_unit"] == MARGIN_UNIT
    assert [f["kind"] for f in document["findings"]] == [f.kind for f in report.findings]


def _judged_against(finding, report) -> tuple[float, float, bool]:
    """The value, threshold and direction the finding's check reads on this run, looked up independently."""
    facts = {check.verdict: check for check in FACTS}
    if finding["verdict"] in facts:  # an unfitted fact: a record column against a fixed threshold
        check = facts[finding["verdict"]]
        return float(report.measurements[check.feature]), check.fact, check.above
    rule = VERDICTS[finding["verdict"]]
    assert finding["feature"] == rule.feature and rule.feature in FEATURES
    return report.features[rule.feature], load_thresholds(report.steps)[rule.verdict], rule.above


@pytest.mark.parametrize("case", CASES)
def test_each_finding_carries_what_its_rule_judged_and_its_margin_in_the_stated_unit(case):
    report = run(case)
    for finding in as_read(report)["findings"]:
        if finding["verdict"] in (HEALTHY, UNEXPLAINED):
            assert all(finding[key] is None for key in JUDGED), finding
            continue
        value, threshold, above = _judged_against(finding, report)
        assert finding["value"] == value and finding["threshold"] == threshold, finding
        assert finding["direction"] == ("above" if above else "below")
        past = value - threshold if above else threshold - value
        assert math.isclose(finding["margin"], past) and finding["margin"] > 0, finding


def test_the_text_report_keeps_its_own_margin_wording():
    """The JSON's margin is in one unit; the text's stays a factor for log-scale features and a difference else."""
    high, stuck = str(run("a rate too high")), str(run("no zero_grad"))
    assert "x past its threshold]" in high  # steps_without_progress spans orders of magnitude
    assert "+0.52 past its threshold]" in stuck  # grad_carried_share 1.00 against 0.48: a difference


def broken(change) -> dict:
    """A real report's JSON (a run with warnings: every kind of finding) with one thing changed."""
    document = copy.deepcopy(as_read(run("dead ReLUs at the start, overcome")))
    change(document)
    return document


def _drop(key):
    return lambda d: d["findings"][1].pop(key)


def _set(key, value, finding=1):
    return lambda d: d["findings"][finding].__setitem__(key, value)


# Reports the schema must refuse, each with the change that breaks it.
REFUSED = {
    "a finding without its value": _drop("value"),
    "a finding without its threshold": _drop("threshold"),
    "a finding without its feature": _drop("feature"),
    "a finding without its direction": _drop("direction"),
    "a finding without its margin": _drop("margin"),
    "a judged finding whose value is null": _set("value", None),
    "a judged finding whose margin is null": _set("margin", None),
    "a direction that is neither above nor below": _set("direction", "sideways"),
    "a kind that is neither failing nor warning": _set("kind", "info"),
    "a field the schema does not know in a finding": _set("confidence", 0.9),
    "healthy carrying a value": _set("value", 1.0, finding=0),
    "schema version 2": lambda d: d.__setitem__("schema_version", 2),
    "schema version as a string": lambda d: d.__setitem__("schema_version", "1"),
    "no schema version": lambda d: d.pop("schema_version"),
    "another margin unit": lambda d: d.__setitem__("margin_unit", "x past its threshold"),
    "a field the schema does not know at the top": lambda d: d.__setitem__("cost", 0.03),
    "no findings": lambda d: d.__setitem__("findings", []),
    "a feature that is not a number": lambda d: d["features"].__setitem__("input_rms", "large"),
    "a checklist line without its detail": lambda d: d["bigger_machine"]["checks"][0].pop("detail"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_the_schema_refuses_a_report_that_breaks_it(case):
    with pytest.raises(jsonschema.ValidationError):
        VALIDATOR.validate(broken(REFUSED[case]))


def test_the_unchanged_report_the_refusals_start_from_is_valid():
    VALIDATOR.validate(broken(lambda d: None))


def test_the_command_line_writes_json_that_validates_with_the_recipe_places(tmp_path, capsys):
    recipe = write(tmp_path, "nan_inputs", 'X[3, 0] = float("nan")\n')  # the bad-input recipe, one NaN input
    out = tmp_path / "report.json"
    assert main([str(recipe), "--json", str(out)]) == 1
    capsys.readouterr()
    document = json.loads(out.read_text())
    VALIDATOR.validate(document)
    (finding,) = [f for f in document["findings"] if f["verdict"] == "nonfinite_loss"]
    assert finding["feature"] == "nonfinite_losses" and finding["threshold"] == 0.0 and finding["direction"] == "above"
    assert finding["value"] == finding["margin"] == 30  # every loss after the NaN batch of the first step: NaN


def test_the_docs_describe_every_field_of_a_finding():
    """docs/doctor.md says what each field of a finding means, and points at the schema."""
    text = (ROOT / "docs" / "doctor.md").read_text()
    section = text[text.index("### The report as JSON") : text.index("### Watching, finishing, diagnosing")]
    assert "(report.schema.json)" in section  # the link, from docs/ to the schema beside it
    for field in [*SCHEMA["$defs"]["finding"]["properties"], "schema_version", "margin_unit"]:
        assert f"`{field}`" in section, field
