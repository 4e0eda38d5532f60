"""The capacity checks.

Whether the model can represent the data at all.
"""

from analysis.checks.base import Check

MODEL_TOO_SMALL = Check(
    # Capacity evidence, not "fails, cause unknown": neither the run nor a fresh copy trained in a clean loop
    # fits the data, so no change to the run's loop would make this model fit it. Without a model factory
    # (the doctor's model_factory=) the fit is not measured and a run that fell short is unexplained_failure.
    verdict="model_too_small",
    needs_harm=True,
    feature="capacity_fit",
    above=False,
    evidence="the model fits only {value:.0%} as much of its training examples as quick references do, above"
    " the best constant answer (threshold {threshold:.0%}): a fresh copy trained in a clean loop (Adam at"
    " {capacity_rate:.0e}, full batch) on {capacity_examples:.0f} of them reaches {metric_name}"
    " {capacity_score:.2f}, the run itself {train_score}; the model cannot represent the data, however it is"
    " trained; a quick reference's {metric_name} on held-out examples {reference_score}",
    next_step="give the model more capacity (wider or deeper layers) and check it can fit the training set",
    # "Cannot fit" is fitting less than the references; a threshold above 1 would fire on models that fit more.
    bound=1.0,
    order=300,
    parts=("model",),
    fault_types=("layers", "layer_props"),
)

CHECKS = (MODEL_TOO_SMALL,)
