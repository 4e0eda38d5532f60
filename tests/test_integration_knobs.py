"""Each integration's own settings for the checks' advice (doctor/integrations/__init__.py: `knobs`, `with_knobs`)."""

import dataclasses
import math

import pytest

from analysis.checks import CHECKS
from analysis.checks.base import Finding
from doctor.integrations import knobs, with_knobs
from doctor.report import Report

VERDICTS = {check.verdict for check in CHECKS}


def integration_knobs() -> dict:
    """Every integration's knobs that can be imported here (each imports its library)."""
    found = {}
    lightning = pytest.importorskip("lightning")
    assert lightning
    from doctor.integrations.lightning import LIGHTNING_KNOBS

    found["Lightning"] = LIGHTNING_KNOBS
    pytest.importorskip("transformers")
    from doctor.integrations.huggingface import TRAINER_KNOBS

    found["the Trainer"] = TRAINER_KNOBS
    return found


def test_a_knob_for_no_check_is_refused_naming_the_verdicts():
    with pytest.raises(ValueError, match=r"Lightning knobs for lr_too_hgh: not a check's verdict \(.*lr_too_high"):
        knobs("Lightning", {"lr_too_hgh": "in Lightning: ..."})


def test_every_integration_names_its_setting_for_the_rate_and_the_length_and_says_where():
    for integration, advice in integration_knobs().items():
        assert set(advice) <= VERDICTS
        assert {"lr_too_high", "lr_too_low", "still_improving", "starved_loader"} <= set(advice), integration
        assert all(text.startswith("in ") for text in advice.values()), integration


def test_the_knob_follows_the_checks_own_advice_on_its_verdict_only():
    finding = Finding("lr_too_high", "the loss rose", "lower the learning rate 10x", 3.0)
    other = Finding("label_noise", "contradicted", "audit the labels", 2.0)
    report = Report((finding, other), checklist=None, steps=10, measurements={}, features={}, note=None)
    knobbed = with_knobs(report, {"lr_too_high": "in the Trainer: TrainingArguments(learning_rate=) 10x smaller"})
    assert knobbed.findings[0].next_step == (
        "lower the learning rate 10x; in the Trainer: TrainingArguments(learning_rate=) 10x smaller"
    )
    assert knobbed.findings[1] == other and report.findings[0] == finding  # the rest, and the original, unchanged
    assert dataclasses.replace(knobbed, findings=report.findings) == report
    assert not math.isnan(knobbed.findings[0].margin)
