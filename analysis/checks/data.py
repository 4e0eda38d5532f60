"""The data checks.

The data: its order, its class balance, bad batches, labels nothing can learn or that are wrong, and a gap between
training and validation.
"""

from analysis.checks.base import BY_DEFINITION, Check

UNSHUFFLED_BATCHES = Check(
    verdict="unshuffled_batches",
    needs_harm=False,
    feature="batch_label_mix",
    above=False,
    evidence="the batches held few of the classes: their labels' entropy was {value:.0%} of a shuffled batch's of"
    " the same size from the same labels (threshold {threshold:.0%})",
    next_step="shuffle the training examples every epoch (DataLoader(..., shuffle=True)): data sorted by class and"
    " fed in order trains on one class at a time and forgets the others",
    order=190,
    parts=("batches",),
    # the order the data is fed in
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,
)

CLASS_IMBALANCE = Check(
    verdict="class_imbalance",
    needs_harm=False,
    feature="prior_shift",
    above=True,
    evidence="the class most under-represented in training is {value:.1f}x as frequent in validation (threshold"
    " {threshold:.1f}x)",
    next_step="reweight the loss (weight= in cross_entropy), resample the classes, and report per-class accuracy",
    order=200,
    parts=("batches",),
    fault_types=("training_data_quality",),
)

PERIODIC_BAD_BATCH = Check(
    verdict="periodic_bad_batch",
    needs_harm=False,
    feature="periodic_spike_share",
    above=True,
    evidence="{periodic_spikes_seen:.0f} loss spikes {loss_spike_period:.0f} steps apart, {value:.0%} of the"
    " batches that period puts in the run (threshold {threshold:.0%}); spikes at steps {loss_spike_steps}",
    next_step="inspect the batches at the logged steps (modulo the period): a corrupt shard, file or augmentation",
    order=210,
    parts=("batches",),
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,
)

SHUFFLED_LABELS = Check(
    verdict="shuffled_labels",
    needs_harm=False,
    feature="learnable_skill",
    above=False,
    evidence="neither the model (validation {metric_name} {val_score}) nor a quick reference on the same"
    " examples ({reference_score}) beats always answering the most frequent label ({baseline_score}) by"
    " more than {value:.0%} of the room above it (threshold {threshold:.0%})",
    next_step="check the labels: joins, sorting, shuffling or slicing applied to features and labels separately",
    order=270,
    parts=("batches",),
    fault_types=("training_data_quality",),
)

LABEL_NOISE = Check(
    verdict="label_noise",
    needs_harm=False,
    feature="label_noise_z",
    above=True,
    evidence="quick references on the same examples disagree with the training labels more than with validation:"
    " 5 nearest neighbours outvote {loo_error:.0%} of the training labels against {knn_val_error:.0%} of the"
    " validation ones, a ridge classifier misses {ridge_train_error:.0%} against {ridge_val_error:.0%}; {value:.1f}"
    " standard errors (threshold {threshold:.1f})",
    next_step="audit a sample of the training examples the model contradicts: their labels are likely wrong",
    order=280,
    parts=("batches",),
    fault_types=("training_data_quality",),
)

OVERFITTING = Check(
    # The gap alone decides; the data learning curve is evidence for the next step. Read with the forecast gain
    # (`python -m analysis data-curve runs/zoo`), the rule raised false alarms on the zoo's small problems more
    # than it named planted overfitting: a problem small by nature has a rising curve too.
    verdict="overfitting",
    needs_harm=True,
    feature="train_val_gap",
    above=True,
    evidence="training {metric_name} {train_score} against validation {val_score}: a gap of {value:.2f}"
    " (threshold {threshold:.2f}); would more data help? {data_line}",
    next_step="get more data or augment it (check that no filter or slice dropped part of it), regularize"
    " (weight decay, dropout), or stop earlier",
    order=290,
    parts=("batches", "model"),
    fault_types=("training_data_quality",),
)

CHECKS = (
    UNSHUFFLED_BATCHES,
    CLASS_IMBALANCE,
    PERIODIC_BAD_BATCH,
    SHUFFLED_LABELS,
    LABEL_NOISE,
    OVERFITTING,
)
