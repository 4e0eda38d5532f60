"""The naive rules: the first version, raw readings and thresholds typed in by hand, kept for comparison.

The report scores them beside the fitted rules (analysis/score.py), to show what fitting and normalizing changed.
They read the naive features (analysis/declarations/naive.py), have no outcome gate (every one that fires fails)
and no facts, and say the same next steps as the fitted checks of the same verdicts.
"""

from analysis.checks.base import Rule
from analysis.rules import VERDICTS

_NEXT = {verdict: rule.next_step for verdict, rule in VERDICTS.items()}

# The first version: a practitioner's thresholds typed in by hand, memorization at one rate (1e-3) only,
# and no rule for shuffled labels (a model near chance was taken for a rate too low).
NAIVE_RULES = [
    Rule(
        needs_harm=False,
        verdict="starved_loader",
        feature="data_wait_share",
        above=True,
        evidence="waited {value:.0%} (> {threshold:.0%})",
        next_step=_NEXT["starved_loader"],
    ),
    Rule(
        needs_harm=False,
        verdict="no_zero_grad",
        feature="accumulation_ratio",
        above=True,
        evidence=".grad {value:.1f}x fresh (> {threshold})",
        next_step=_NEXT["no_zero_grad"],
    ),
    Rule(
        needs_harm=False,
        verdict="unscaled_inputs",
        feature="first_loss_ratio",
        above=True,
        evidence="first loss {value:.1f}x ln C (> {threshold})",
        next_step=_NEXT["unscaled_inputs"],
    ),
    Rule(
        needs_harm=False,
        verdict="dead_relu",
        feature="memorize_loss_1e-3",
        above=True,
        evidence="cannot memorize 16 examples at 1e-3: loss {value:.2f} (> {threshold})",
        next_step=_NEXT["dead_relu"],
    ),
    Rule(
        needs_harm=False,
        verdict="frozen_params",
        feature="no_grad_share",
        above=True,
        evidence="{value:.0%} without gradient (> {threshold:.0%})",
        next_step=_NEXT["frozen_params"],
    ),
    Rule(
        needs_harm=False,
        verdict="lr_too_low",
        feature="val_acc_x_chance",
        above=False,
        evidence="accuracy {value:.1f}x chance (< {threshold})",
        next_step=_NEXT["lr_too_low"],
    ),
    Rule(
        needs_harm=False,
        verdict="lr_too_high",
        feature="update_ratio",
        above=True,
        evidence="update ratio {value:.1e} (> {threshold:.0e})",
        next_step=_NEXT["lr_too_high"],
    ),
    Rule(
        needs_harm=False,
        verdict="model_too_small",
        feature="train_acc",
        above=False,
        evidence="training accuracy {value:.0%} (< {threshold:.0%})",
        next_step=_NEXT["model_too_small"],
    ),
]
NAIVE_THRESHOLDS = {
    "starved_loader": 0.5,
    "no_zero_grad": 2.0,
    "unscaled_inputs": 3.0,
    "dead_relu": 0.1,
    "frozen_params": 0.5,
    "lr_too_low": 2.0,
    "lr_too_high": 1e-2,  # the rule of thumb: about 1e-3 is healthy
    "model_too_small": 0.9,
}
