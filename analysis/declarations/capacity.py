"""The capacity family's features: what the model has shown it can fit, against what quick references fit.

Read by the check of analysis/checks/capacity.py.
"""

from analysis.feature import Feature
from analysis.yardsticks import capacity_fit, fit_vs_reference

DECLARED = (
    Feature(
        "fit_vs_reference",
        "training accuracy above the baseline over the references' validation accuracy above it",
        "a quick reference fit on the same data: what is reachable on this task, hard or easy",
        False,
        fit_vs_reference,
        reads=("baseline_val_acc", "final_train_acc", "majority_share", "reference_val_acc"),
    ),
    Feature(
        "capacity_fit",
        "what the model has shown it fits of the training examples (the better of a fresh copy's fit of up to 1024"
        " of them in a clean loop, Adam, full batch, and the run's own training score), over what quick"
        " references fit of them, both above the best constant answer",
        "the references' fit of the training examples (a ridge classifier's training accuracy or 5-NN's"
        " leave-one-out, the better; none without a reference): noisy classes hold both down, a model"
        " with room to spare fits at least as much, one too small for the data less, however it is trained",
        False,
        capacity_fit,
        reads=(
            "capacity_baseline",
            "capacity_score",
            "final_train_acc",
            "logit_floor_share",
            "reference_loo_acc",
            "reference_train_acc",
        ),
    ),
)
