"""The rules: an ordered list of readable checks over the measurements, each naming a verdict.

A rule fires when one measurement crosses a named threshold. `diagnose` lists every rule that fired, in order;
the first is the verdict, and `healthy` is what is left when none fires. The fitted rules read their
thresholds from `analysis/thresholds.json`, written by `make fit` (`analysis.fit`) from the tuned dataset
alone. `NAIVE_RULES` is the first version, with thresholds typed in by hand and memorization at one rate only,
kept so that the report shows what fitting changed. Rules see measurements only, never the planted fault.
"""

import json
import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd

THRESHOLDS_FILE = Path(__file__).resolve().parent / "thresholds.json"
HEALTHY = "healthy"

# Features the rules and the classifiers read: derived from record columns, each with a sentence and
# whether it spans orders of magnitude (then thresholds sit at geometric midpoints and plots use log axes).
FEATURES: dict[str, tuple[str, bool]] = {
    "data_wait_share": ("share of the loop spent waiting for batches", False),
    "no_grad_share": ("share of parameter elements that never got a gradient", False),
    "accumulation_ratio": ("|.grad| over |fresh gradient of the same loss|", True),
    "wrong_mode_share": ("share of training (evaluation) forwards run in eval (training) mode", False),
    "output_prob_share": ("share of output rows handed to the loss that are already probabilities", False),
    "input_rms": ("root mean square of the inputs", True),
    "first_loss_ratio": ("first loss over ln C", True),
    "dead_at_init": ("share of ReLU units never active at initialization", False),
    "dead_after": ("share of ReLU units never active after training", False),
    "activation_growth": ("RMS of the last activations over the first ones', at initialization", True),
    "grad_depth_ratio": ("|gradient| of the first weight matrix over the last one's, at initialization", True),
    "saturated_at_init": ("share of tanh/sigmoid outputs within 1% of their bounds, at initialization", False),
    "label_imbalance": ("most frequent over least frequent training class", True),
    "periodic_spikes": ("loss spikes at the most common interval", False),
    "update_ratio": ("median |update| / |weight| per step", True),
    "update_ratio_peak": ("largest per-step median |update| / |weight|", True),
    "val_acc_x_chance": ("validation accuracy over chance (1/C)", False),
    "train_acc": ("final training accuracy", False),
    "train_val_gap": ("training minus validation accuracy", False),
    "confident_disagreement": ("share of training examples confidently predicted as another class", False),
    "val_train_loss_ratio": ("final validation loss over final training loss", True),
    "memorize_best_loss": ("best final loss memorizing 16 examples (3 rates)", True),
    "memorize_loss_1e-3": ("final loss memorizing 16 examples at 1e-3 only", True),
}


def features(records: pd.DataFrame) -> pd.DataFrame:
    """The FEATURES of each record, from its measurement columns only (NaN where an older record lacks one)."""
    column = partial(_column, records)
    return pd.DataFrame(
        {
            "data_wait_share": records.data_wait_share,
            "no_grad_share": records.params_without_grad_share,
            "accumulation_ratio": records.accumulation_ratio,
            "wrong_mode_share": np.fmax(column("train_in_eval_share"), column("eval_in_train_share")),
            "output_prob_share": column("output_prob_share"),
            "input_rms": column("input_rms"),
            "first_loss_ratio": records.first_loss / records.ln_classes,
            "dead_at_init": records.dead_unit_share_init,
            "dead_after": records.dead_unit_share,
            "activation_growth": column("activation_growth_init"),
            "grad_depth_ratio": column("grad_depth_ratio_init"),
            "saturated_at_init": column("saturated_share_init"),
            "label_imbalance": column("label_imbalance"),
            "periodic_spikes": column("periodic_spikes"),
            "update_ratio": records.update_ratio_median,
            "update_ratio_peak": records.update_ratio_peak,
            "val_acc_x_chance": records.final_val_acc * records.n_classes,
            "train_acc": records.final_train_acc,
            "train_val_gap": records.final_train_acc - records.final_val_acc,
            "confident_disagreement": column("confident_disagreement"),
            "val_train_loss_ratio": records.final_val_loss / records.final_train_loss,
            "memorize_best_loss": records.memorize_best_loss,
            "memorize_loss_1e-3": [
                _loss_at(rates, losses, 1e-3)
                for rates, losses in zip(records.memorize_rates, records.memorize_losses, strict=True)
            ],
        },
        index=records.index,
    ).astype(float)


def _column(records: pd.DataFrame, name: str) -> pd.Series:
    return records[name].astype(float) if name in records else pd.Series(np.nan, index=records.index)


def _loss_at(rates, losses, rate: float) -> float:
    for r, loss in zip(rates, losses, strict=True):
        if math.isclose(r, rate):
            return loss
    return math.nan


@dataclass(frozen=True)
class Rule:
    """Fires when `feature` is above (or below) the threshold named after the verdict."""

    verdict: str
    feature: str
    above: bool
    evidence: str  # filled with the record's columns, its features, {value} and {threshold}
    next_step: str

    def fires(self, value: float, threshold: float) -> bool:
        if math.isnan(value):
            return False
        return value > threshold if self.above else value < threshold

    def margin(self, value: float, threshold: float) -> float:
        """How far the value sits beyond the threshold: a factor for log-scale features, else a difference."""
        if FEATURES[self.feature][1] and value > 0 and threshold > 0:
            ratio = value / threshold
            return ratio if self.above else 1 / ratio
        return value - threshold if self.above else threshold - value


RULES = [
    Rule(
        "starved_loader",
        "data_wait_share",
        True,
        "waited for data {value:.0%} of the loop (threshold {threshold:.0%})",
        "feed the model faster: DataLoader num_workers > 0, pin_memory=True, prefetching, or cache decoded data",
    ),
    Rule(
        "frozen_params",
        "no_grad_share",
        True,
        "{value:.0%} of parameter elements never got a gradient (threshold {threshold:.0%})",
        "look for requires_grad=False, .detach() or torch.no_grad() in forward, and what the optimizer was given",
    ),
    Rule(
        "no_zero_grad",
        "accumulation_ratio",
        True,
        ".grad was {value:.1f}x a fresh gradient of the same loss (threshold {threshold:.1f}x)",
        "call optimizer.zero_grad() once per step (unless accumulating on purpose, then scale the loss)",
    ),
    Rule(
        "wrong_mode",
        "wrong_mode_share",
        True,
        "{value:.0%} of training forwards ran in eval mode, or of evaluation forwards in training mode, in a model"
        " with dropout or BatchNorm (threshold {threshold:.0%})",
        "call model.train() before training steps and model.eval() before validation (and back again)",
    ),
    Rule(
        "double_softmax",
        "output_prob_share",
        True,
        "{value:.0%} of the output rows handed to the loss were already probabilities (threshold {threshold:.0%})",
        "return logits from the model: cross_entropy applies log_softmax itself (or use NLLLoss on log_softmax)",
    ),
    Rule(
        "unscaled_inputs",
        "input_rms",
        True,
        "inputs have an RMS of {value:.3g} (threshold {threshold:.3g}); the first loss was {first_loss:.1f}"
        " against ln {n_classes} = {ln_classes:.2f}",
        "check the input statistics: standardize features, scale pixels to [0, 1]",
    ),
    Rule(
        "dead_relu",
        "dead_at_init",
        True,
        "{value:.0%} of ReLU units never active at initialization (threshold {threshold:.0%})",
        "check the initialization (biases, weight scale); consider LeakyReLU or a lower rate",
    ),
    Rule(
        "exploding_gradients",
        "activation_growth",
        True,
        "at initialization the last activations were {value:.3g}x the first ones' in RMS (threshold"
        " {threshold:.3g}x); the first loss was {first_loss:.3g} against ln C = {ln_classes:.2f}",
        "use a variance-preserving initialization (Kaiming for ReLU), add normalization layers, clip gradients",
    ),
    Rule(
        "vanishing_gradients",
        "grad_depth_ratio",
        False,
        "at initialization the first layer's gradient was {value:.2g}x the last layer's (threshold {threshold:.2g}x)",
        "use ReLU-family activations, residual connections or normalization; check the initialization",
    ),
    Rule(
        "saturated_activations",
        "saturated_at_init",
        True,
        "{value:.0%} of tanh/sigmoid outputs within 1% of their bounds at initialization (threshold {threshold:.0%})",
        "scale the initial weights down (Xavier/Glorot for tanh), standardize inputs, or use a non-saturating"
        " activation",
    ),
    Rule(
        "class_imbalance",
        "label_imbalance",
        True,
        "the most frequent training class was {value:.1f}x the rarest (threshold {threshold:.1f}x)",
        "reweight the loss (weight= in cross_entropy), resample the classes, and report per-class accuracy",
    ),
    Rule(
        "periodic_bad_batch",
        "periodic_spikes",
        True,
        "{value:.0f} loss spikes {loss_spike_period:.0f} steps apart (threshold {threshold:.1f}); spikes at steps"
        " {loss_spike_steps}",
        "inspect the batches at the logged steps (modulo the period): a corrupt shard, file or augmentation",
    ),
    Rule(
        "lr_too_low",
        "update_ratio_peak",
        False,
        "the largest steps moved the weights by {value:.1e} of their size (threshold {threshold:.1e})",
        "raise the learning rate 10x and watch the loss",
    ),
    Rule(
        "lr_too_high",
        "update_ratio_peak",
        True,
        "the largest steps moved the weights by {value:.1e} of their size (threshold {threshold:.1e})",
        "lower the learning rate 10x (or add warm-up)",
    ),
    Rule(
        "shuffled_labels",
        "val_acc_x_chance",
        False,
        "validation accuracy {final_val_acc:.0%} is {value:.1f}x chance (threshold {threshold:.1f}x)"
        " while training runs",
        "check the labels: joins, sorting, shuffling or slicing applied to features and labels separately",
    ),
    Rule(
        "label_noise",
        "confident_disagreement",
        True,
        "the model was sure of another class than the label for {value:.0%} of the training examples late in"
        " training (threshold {threshold:.0%}); training accuracy {final_train_acc:.0%}, validation"
        " {final_val_acc:.0%}",
        "audit a sample of the training examples the model contradicts: their labels are likely wrong",
    ),
    Rule(
        "overfitting",
        "val_train_loss_ratio",
        True,
        "validation loss {final_val_loss:.3f} is {value:.0f}x the training loss {final_train_loss:.2g}"
        " (threshold {threshold:.0f}x)",
        "get more data or augment it, regularize (weight decay, dropout), or stop earlier",
    ),
    Rule(
        "model_too_small",
        "train_acc",
        False,
        "training accuracy only {value:.0%} after training (threshold {threshold:.0%})",
        "give the model more capacity (wider or deeper layers) and check it can fit the training set",
    ),
]
VERDICTS = {rule.verdict: rule for rule in RULES}

_NEXT = {verdict: rule.next_step for verdict, rule in VERDICTS.items()}

# The first version: a practitioner's thresholds typed in by hand, memorization at one rate (1e-3) only,
# and no rule for shuffled labels (a model near chance was taken for a rate too low).
NAIVE_RULES = [
    Rule("starved_loader", "data_wait_share", True, "waited {value:.0%} (> {threshold:.0%})", _NEXT["starved_loader"]),
    Rule("no_zero_grad", "accumulation_ratio", True, ".grad {value:.1f}x fresh (> {threshold})", _NEXT["no_zero_grad"]),
    Rule(
        "unscaled_inputs",
        "first_loss_ratio",
        True,
        "first loss {value:.1f}x ln C (> {threshold})",
        _NEXT["unscaled_inputs"],
    ),
    Rule(
        "dead_relu",
        "memorize_loss_1e-3",
        True,
        "cannot memorize 16 examples at 1e-3: loss {value:.2f} (> {threshold})",
        _NEXT["dead_relu"],
    ),
    Rule(
        "frozen_params",
        "no_grad_share",
        True,
        "{value:.0%} without gradient (> {threshold:.0%})",
        _NEXT["frozen_params"],
    ),
    Rule("lr_too_low", "val_acc_x_chance", False, "accuracy {value:.1f}x chance (< {threshold})", _NEXT["lr_too_low"]),
    Rule("lr_too_high", "update_ratio", True, "update ratio {value:.1e} (> {threshold:.0e})", _NEXT["lr_too_high"]),
    Rule(
        "model_too_small",
        "train_acc",
        False,
        "training accuracy {value:.0%} (< {threshold:.0%})",
        _NEXT["model_too_small"],
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


def load_thresholds(path: str | Path = THRESHOLDS_FILE) -> dict[str, float]:
    """The fitted thresholds, by verdict."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no fitted thresholds at {path}: `make fit` writes them from the records")
    return {verdict: float(value) for verdict, value in json.loads(path.read_text())["thresholds"].items()}


@dataclass(frozen=True)
class Finding:
    """One rule that fired on one record."""

    verdict: str
    evidence: str
    next_step: str
    margin: float  # how far the deciding measurement sits beyond its threshold


def diagnose(record: pd.Series, rules: list[Rule] = RULES, thresholds: dict[str, float] | None = None) -> list[Finding]:
    """Every rule that fires on one record, in order (the first is the verdict); healthy if none fires."""
    thresholds = load_thresholds() if thresholds is None else thresholds
    row = features(record.to_frame().T).iloc[0]
    fields = {**record.to_dict(), **row.to_dict()}
    findings = []
    for rule in rules:
        value, threshold = row[rule.feature], thresholds[rule.verdict]
        if rule.fires(value, threshold):
            evidence = rule.evidence.format(**fields, value=value, threshold=threshold)
            findings.append(Finding(rule.verdict, evidence, rule.next_step, rule.margin(value, threshold)))
    return findings or [Finding(HEALTHY, "no rule fired", "nothing to fix in what the checks measure", math.nan)]


def verdicts(
    records: pd.DataFrame, rules: list[Rule] = RULES, thresholds: dict[str, float] | None = None
) -> pd.DataFrame:
    """For each record: the verdict (first rule to fire) and every verdict that fired, in order."""
    thresholds = load_thresholds() if thresholds is None else thresholds
    table = features(records)
    fired = pd.DataFrame(
        {rule.verdict: [rule.fires(v, thresholds[rule.verdict]) for v in table[rule.feature]] for rule in rules},
        index=records.index,
    )
    names = [rule.verdict for rule in rules]
    fired_lists = fired.apply(lambda row: [n for n in names if row[n]], axis=1)
    return pd.DataFrame(
        {"verdict": fired_lists.map(lambda f: f[0] if f else HEALTHY), "fired": fired_lists}, index=records.index
    )
