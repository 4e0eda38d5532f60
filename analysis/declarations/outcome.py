"""The outcome's features: did the run learn what it could, and was it still learning when it stopped.

Read by the outcome gate (analysis/outcome_gate.py: `OutcomeGate.reads`), which no check of analysis/checks/ is; the
evidence sentences show them too. `late_drop_share` is the still-learning reading `still_improving` read before the
forecast (analysis/fit.py), kept in the feature table.
"""

from analysis.feature import Feature, column
from analysis.loss_curves import late_drop_share, late_fall_share, late_fall_z, late_val_fall_z, loss_left
from analysis.yardsticks import (
    COPY_GAP_READS,
    copy_gap,
    copy_skill,
    copy_z,
    own_skill,
    prior_baseline,
    shortfall_z,
    skill_above,
    skill_shortfall,
)

DECLARED = (
    Feature(
        "late_drop_share",
        "share of the training loss's whole fall that came in the run's last fifth",
        "the run's own fall and length: the same share on a 20-step and a 20 000-step run",
        False,
        late_drop_share,
        reads=("train_loss_curve",),
    ),
    Feature(
        "late_fall_z",
        "the training loss's fall across the run's last quarter (two halves' medians), in standard errors",
        "the run's own step-to-step noise in that stretch: the same reading on a 20-step and a 20 000-step run",
        False,
        late_fall_z,
        reads=("train_loss_curve",),
    ),
    Feature(
        "late_val_fall_z",
        "the validation loss's fall across the run's last quarter (two halves' medians), in standard errors; NaN"
        " under 6 validation reads there",
        "the run's own read-to-read noise in that stretch: the same reading on any run length",
        False,
        late_val_fall_z,
        reads=("val_steps", "val_loss_curve"),
    ),
    Feature(
        "late_fall_share",
        "the training loss's fall across the run's last quarter over its whole fall (0: it never fell)",
        "the run's own fall: a share, the same on any loss and run length",
        False,
        late_fall_share,
        reads=("train_loss_curve",),
    ),
    Feature(
        "val_skill",
        "validation accuracy above the baseline, as a share of the room above it",
        "the class prior (always answering the most frequent training label)",
        False,
        lambda m: skill_above(column(m, "final_val_acc"), prior_baseline(m)),
        reads=("baseline_val_acc", "final_val_acc", "majority_share"),
    ),
    Feature(
        "reference_skill",
        "the references' validation accuracy above the baseline, as a share of the room above it",
        "the class prior",
        False,
        lambda m: skill_above(column(m, "reference_val_acc"), prior_baseline(m)),
        reads=("baseline_val_acc", "majority_share", "reference_val_acc"),
    ),
    Feature(
        "own_skill",
        "the run's skill in its task's metric (validation, else training): accuracy above the class prior as a"
        " share of the room above it; R² for regression",
        "the class prior (R²: always predicting the mean)",
        False,
        own_skill,
        reads=("baseline_val_acc", "final_train_acc", "final_val_acc", "majority_share", "task"),
    ),
    Feature(
        "skill_shortfall",
        "the share of the references' validation skill the run's own skill falls short of (the outcome gate's"
        " measurement)",
        "a quick reference fit on the same data: what this task allows, hard or easy (0: as good, 1: learned nothing)",
        False,
        skill_shortfall,
        reads=("baseline_val_acc", "final_train_acc", "final_val_acc", "majority_share", "reference_val_acc", "task"),
    ),
    Feature(
        "shortfall_z",
        "how many standard errors the run's accuracy lies below the references' on the same validation examples",
        "the sampling error of both accuracies on that many examples: a few points are nothing on 50 examples",
        False,
        shortfall_z,
        reads=("final_train_acc", "final_val_acc", "reference_val_acc", "reference_val_examples"),
    ),
    Feature(
        "copy_skill",
        "a clean copy of the run's model (the capacity fit's fresh copy: Adam, full batch, up to 1024 training"
        " examples) scored on validation: accuracy above the baseline, as a share of the room above it",
        "the class prior",
        False,
        copy_skill,
        reads=("baseline_val_acc", "capacity_val_examples", "capacity_val_score", "majority_share", "task"),
    ),
    Feature(
        "copy_gap",
        "the clean copy's validation skill less the run's own (the outcome gate's second measurement)",
        "the same model on the same data in a clean loop: what this model reaches here, whatever the references can",
        False,
        copy_gap,
        reads=COPY_GAP_READS,
    ),
    Feature(
        "copy_z",
        "how many standard errors the run's accuracy lies below the clean copy's on the copy's validation examples",
        "the sampling error of both accuracies on that many examples",
        False,
        copy_z,
        reads=COPY_GAP_READS,
    ),
    Feature(
        "loss_left",
        "final training loss over the first one",
        "the run's own first loss",
        False,
        loss_left,
        reads=("final_train_loss", "first_loss"),
    ),
)
