"""Too good to be true, and a model that reads nothing: what the labels and the model take from the inputs.

Three facts, judged ahead of the fitted rules in the grid and by the doctor alike, each failing whatever the score:

`IGNORES_INPUTS`: nothing the model computes moves when its inputs change (harness/instruments/inputs.py:
`altered_input_effect`, the largest change of what its first layer is handed and of its output, with the probe
batch's inputs zeroed or shuffled across the batch, over their RMS). Its threshold, 1e-6, is a fact: a model that
reads its inputs hands its first layer other values when they are zeroed (a change about their own size, 1) whatever
it has learned and whether or not its units are alive; one that does not read them computes on the same values,
so nothing moves, to the bit (0; two identical calls that differ make the reading NaN). The loss ratio the brief of
the test names (`altered_input_loss_ratio`: the loss with altered inputs over the loss with the real ones, near 1
when the loss does not depend on them) is shown, not judged: a model that has not learned yet, and one whose units
all died (dead_relu, constant_output), sit at the prior's loss too, so a ratio near 1 cannot say which; and the
prior's loss is not below an uninformed guess's on balanced classes, so gating the ratio on "learned beyond the
prior" would gate out the fault itself. Judged first among the data facts: a model that reads no input makes a
leak in them moot.

`LABEL_LEAK`: one input column predicts the held-out labels by itself, almost perfectly, and better than every other
column together (harness/leak.py: `leak_column_z`, McNemar's paired z between a one-column nearest-centroid
classifier and the quick references on the rest, read only where the column is right on at least 95% of the
held-out examples). Its threshold, 2 standard errors, is argued, not fitted: on honest data one column predicts far
worse than all the others (digits and the generated problems: the best column 26 to 32% against the rest's 83 to
98%, about -17 standard errors, so the reading is NaN: no column comes near 95%), and a column that merely matches
the rest (z about 0) is a task whose signal sits in one feature; 2 is the outcome gate's "beyond noise". A leaked
column beats the rest on every example the rest gets wrong: z is the square root of their count (the grid's digits
cells, where the rest misses 9 to 18 of 450: 3.0 to 4.2; the generated problem: 9.3 to 9.5).

`VALIDATION_COPIES`: validation examples that are exact copies of training examples, with the training label
(harness/leak.py: `val_copy_answered_share`, the share of validation examples that copying a training label
answers). Its threshold, a tenth, is argued: a split of distinct examples holds none (digits and the generated
problems: 0 in every seed), a split made after oversampling or augmenting, or an evaluation set that overlaps
training, holds them in proportion to the duplication; over a tenth, the validation score counts a tenth of its
examples as lookups of examples the model trained on. Inputs of a few discrete values (tabular data with identical
rows) may hold copies of their own: the evidence shows the references' accuracy on the other examples beside the
copies'.
"""

from analysis.checks.base import BY_DEFINITION, Check

IGNORES_INPUTS = Check(
    verdict="ignores_inputs",
    needs_harm=False,
    feature="altered_input_effect",
    above=False,
    evidence="with the probe batch's inputs zeroed or shuffled across the batch, neither what the model's first"
    " layer is handed nor its output moved ({value:.1g} of their RMS; under {threshold:.0e} is the fault: a model"
    " that reads its inputs moves them by about their own size), and {altered_loss_line}: the model never reads its"
    " inputs, so it can learn only the class prior",
    next_step="check that forward hands its argument to the first layer: no placeholder, zeros or constant in its"
    " place, no mask or preprocessing step that zeros every feature, no stored tensor read instead of the batch",
    # A fact, after the loss's inputs (4, 6, 7); ahead of the leak facts: a model that reads no input makes them moot.
    order=8,
    fact=1e-6,
    in_grid=True,  # the grid's cells probe their model too (harness/instruments/inputs.py)
    parts=("model",),
    fault_types=("layers",),
    harm=BY_DEFINITION,
)

LABEL_LEAK = Check(
    verdict="label_leak",
    needs_harm=False,
    feature="leak_column_z",
    above=True,
    evidence="input column {leak_column:.0f} alone predicts {leak_column_acc:.0%} of the held-out labels (a"
    " one-feature nearest-centroid classifier), while quick references on every other column reach"
    " {leak_rest_acc:.0%}: {value:.1f} standard errors better than all the rest together (over {threshold:.0f} is"
    " the fault: on honest data one column predicts far worse than the others): the label can be read off that"
    " column, so the validation score is not the task's",
    next_step="find where that column comes from: a feature computed from the target, or recorded after it (an id,"
    " a timestamp, a total that includes it); drop it or compute it from what is known before the label, and"
    " split the data before any step that sees the labels",
    order=9,  # a fact, after ignores_inputs (8)
    fact=2.0,
    in_grid=True,  # the grid's cells fit it from their kept examples (harness/leak.py)
    parts=("batches", "validation"),
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,
)

VALIDATION_COPIES = Check(
    verdict="validation_copies",
    needs_harm=False,
    feature="val_copy_answered_share",
    above=True,
    evidence="{val_copy_share:.0%} of the validation examples are exact copies of training examples, and copying the"
    " training example's label answers {val_copy_label_acc:.0%} of them: {value:.0%} of all validation examples"
    " (over {threshold:.0%} is the fault: a split of distinct examples holds none); {copies_against_rest}, so the"
    " validation score counts examples the model trained on",
    next_step="deduplicate before splitting, and split before oversampling or augmenting: no validation example may"
    " be a copy of a training example (keep near-duplicates and an example's variants in the same split)",
    order=11,  # a fact, after label_leak (9; 10 is starved_loader's): a leaked column is named first, copies or not
    fact=0.1,
    in_grid=True,
    parts=("validation",),
    fault_types=("training_data_quality",),
    harm=BY_DEFINITION,
)

CHECKS = (IGNORES_INPUTS, LABEL_LEAK, VALIDATION_COPIES)
