"""The data family's features: the batches' and the classes' mix, the labels, and whether more data would help.

Read by the checks of analysis/checks/data.py; `val_loss_rise` by none (kept in the feature table).
"""

from analysis.feature import Feature, column
from analysis.loss_curves import periodic_share, val_loss_rise
from analysis.yardsticks import data_gain, label_noise_z, learnable_skill, prior_shift

DECLARED = (
    Feature(
        "batch_label_mix",
        "mean entropy of each batch's labels over that of batches drawn at random from the labels seen",
        "a shuffled batch of the same size from the same labels: 1 for shuffled data, whatever the class mix",
        False,
        lambda m: column(m, "batch_label_mix"),
        reads=("batch_label_mix",),
    ),
    Feature(
        "label_imbalance",
        "most frequent over least frequent training class",
        "the rarest class's count",
        True,
        lambda m: column(m, "label_imbalance"),
        reads=("label_imbalance",),
    ),
    Feature(
        "prior_shift",
        "the class most under-represented in training: its validation share over its training share",
        "validation's class mix: a problem that is uneven by nature is uneven in validation too (without"
        " validation: not judged)",
        True,
        prior_shift,
        reads=("prior_shift", "prior_shift_class_examples"),
    ),
    Feature(
        "periodic_spike_share",
        "loss spikes at the most common interval, over the number that interval fits in the run",
        "the run's length: a rarer bad batch leaves fewer spikes, but as large a share of the ones it can",
        False,
        periodic_share,
        reads=("loss_spike_period", "periodic_spikes", "steps"),
    ),
    Feature(
        "learnable_skill",
        "the better of the model's and the references' validation skill",
        "the class prior (not 1/C: a 2-class problem cannot reach 4.5x chance); the references vouch for a"
        " learnable task that a broken model does not learn",
        False,
        learnable_skill,
        reads=("baseline_val_acc", "final_val_acc", "majority_share", "reference_val_acc", "task"),
    ),
    Feature(
        "label_noise_z",
        "how many standard errors quick references err more on the training labels than on validation",
        "the references' own error on validation and its sampling error: a hard task errs on both alike, wrong"
        " training labels on one",
        False,
        label_noise_z,
        reads=(
            "reference_examples",
            "reference_knn_val_acc",
            "reference_linear_val_acc",
            "reference_loo_acc",
            "reference_train_acc",
            "reference_val_examples",
        ),
    ),
    Feature(
        "train_val_gap",
        "training minus validation accuracy at the end",
        "the run's own validation accuracy: the gap between what it fits and what it generalizes",
        False,
        lambda m: column(m, "final_train_acc") - column(m, "final_val_acc"),
        reads=("final_train_acc", "final_val_acc"),
    ),
    Feature(
        "data_gain",
        "validation skill quick references are forecast to gain from twice the training examples",
        "the room above the baseline, on the run's own data learning curve (the references refitted on shares of"
        " its examples)",
        False,
        data_gain,
        reads=(
            "baseline_val_acc",
            "data_curve_examples",
            "data_curve_val_acc",
            "majority_share",
            "reference_val_examples",
        ),
    ),
    Feature(
        "val_loss_rise",
        "final validation loss over the lowest one seen",
        "the run's own best validation loss",
        True,
        val_loss_rise,
        reads=("final_val_loss", "val_loss_curve"),
    ),
)
