"""The record's columns: each one's name, its kind and what it means, declared once and without pyarrow.

harness/records.py turns these into the explicit pyarrow schema the parquet files are written with, and
analysis/docs.py into docs/records.md; the rules' features (analysis/features.py) read the names from here, so
judging a run (`import doctor`) never has to load pyarrow. A kind is one of the names below, or `list_of(kind)`.
Bump harness.records.SCHEMA_VERSION whenever a column changes meaning or kind.
"""

F64, I64, I32, STR, BOOL = "float64", "int64", "int32", "string", "bool"
TIMESTAMP = "timestamp[us, UTC]"  # when a cell started
KINDS = (F64, I64, I32, STR, BOOL, TIMESTAMP)


def list_of(kind: str) -> str:
    """The kind of a column that holds a list of `kind` values (a curve, one value per parameter, ...)."""
    if kind not in KINDS:
        raise ValueError(f"unknown column kind {kind!r}; known: {', '.join(KINDS)}")
    return f"list<{kind}>"


COLUMNS: list[tuple[str, str, str]] = [
    # identity: what was run
    ("cell_id", STR, "readable key plus a hash of the resolved recipe"),
    ("fault", STR, "the condition planted, as a label: its conf/fault/ option name (names joined by + for two)"),
    ("faults", list_of(STR), "the conf/fault/ options planted: one, or two at once"),
    ("diagnosis", STR, "the verdict the rules should give when one fault is planted (null for two); scoring only"),
    ("verdicts", list_of(STR), "the verdicts that should name the planted faults, one per fault; scoring only"),
    ("severity", STR, "size of the planted fault: mild, planted or extreme (none for the healthy controls)"),
    ("dataset", STR, "conf/dataset/ option name"),
    ("model", STR, "conf/model/ option name"),
    ("seed", I64, "seed of the split, initialization, batch order and probes"),
    ("device", STR, "cpu or cuda"),
    ("status", STR, "ok, failed or skipped"),
    ("error", STR, "why the cell failed or was skipped; null when ok"),
    # run metadata
    ("schema_version", I32, "version of this schema"),
    ("started_at", TIMESTAMP, "when the cell started"),
    ("wall_s", F64, "seconds the whole cell took"),
    ("torch_version", STR, "torch.__version__"),
    ("python_version", STR, "platform.python_version()"),
    ("host", STR, "machine that ran the cell"),
    ("device_name", STR, "GPU name, or the CPU architecture"),
    ("threads", I64, "torch threads the cell ran with"),
    ("config_yaml", STR, "the resolved recipe (config without run.*) as YAML"),
    # the problem
    ("n_classes", I64, "number of classes C"),
    ("n_train", I64, "training examples"),
    ("n_val", I64, "validation examples"),
    ("steps", I64, "training steps the measurements rest on (backward passes seen)"),
    ("task", STR, "multiclass, onehot, binary, multilabel or regression, read from targets and output"),
    ("output_layer", STR, "the model's last module without children, `name (Type)`: where the output comes from"),
    (
        "loss_kind",
        STR,
        "what the loss computes, named from one batch: cross_entropy, nll, bce_logits, bce, mse, l1, other",
    ),
    # first loss
    ("first_loss", F64, "loss of the first batch, before any update"),
    ("ln_classes", F64, "ln C: the first loss of a model that guesses uniformly"),
    # memorization
    ("memorize_rates", list_of(F64), "Adam rates tried on the fresh model"),
    ("memorize_losses", list_of(F64), "final loss on the memorized examples, per rate"),
    ("memorize_best_loss", F64, "lowest finite final loss over the rates"),
    ("memorize_best_rate", F64, "rate that reached it"),
    # capacity
    ("capacity_score", F64, "score (accuracy, R², per-label accuracy) of a fresh model on the examples it fitted"),
    ("capacity_baseline", F64, "what the best constant answer scores on those examples"),
    ("capacity_rate", F64, "the Adam rate that reached that score (the better of capacity.rates)"),
    ("capacity_examples", I64, "training examples the fresh model fitted, full batch, capacity.steps steps"),
    # gradient census (per parameter tensor: medians over the census steps)
    ("census_steps", list_of(I64), "steps at which the census was taken"),
    ("param_names", list_of(STR), "parameter tensors, in model order"),
    ("grad_norm", list_of(F64), "per parameter: median L2 norm of .grad"),
    ("grad_max", list_of(F64), "per parameter: median largest |.grad|"),
    ("grad_zero_share", list_of(F64), "per parameter: median share of exact zeros in .grad"),
    ("grad_missing", list_of(BOOL), "per parameter: .grad was None at every census"),
    ("grad_norm_curve", list_of(F64), "global gradient norm at each census step"),
    ("grad_zero_share_total", F64, "median share of exact zeros over all gradient entries"),
    ("params_without_grad", I64, "parameter tensors that never got a gradient"),
    ("params_without_grad_share", F64, "share of parameter elements that never got a gradient"),
    ("accumulation_ratio", F64, "median |.grad| / |fresh gradient of the same loss| after step 0 (1 = zeroed)"),
    ("accumulation_ratio_curve", list_of(F64), "that ratio at each census step"),
    ("backwards_per_step", F64, "median backward passes per optimizer step (k when accumulating over k batches)"),
    ("optimizer_steps", I64, "optimizer steps taken"),
    ("grad_carried_share", F64, "share of optimizer steps whose next backward found .grad not cleared"),
    (
        "grad_kept_at_step",
        F64,
        "median over the optimizer steps after each census: gradient norm at the step over its (unscaled) norm after"
        " the last backward (1 = not clipped)",
    ),
    ("clipped_step_share", F64, "share of those steps whose gradient norm was cut (by clipping) at the step"),
    ("lr_built", F64, "the optimizer's rate before any schedule (param group 0's initial_lr, else its first lr)"),
    ("lr_peak_share", F64, "the highest rate any optimizer step used, over lr_built"),
    ("lr_last_share", F64, "the last optimizer step's rate, over lr_built"),
    (
        "lr_decayed_share",
        F64,
        "share of optimizer steps whose rate was under 5% of the highest rate a step had used before it",
    ),
    ("amp_scale_min", F64, "the GradScaler's smallest scale (read at census steps and at the end; none: NaN)"),
    ("amp_scale_last", F64, "the GradScaler's scale at the end"),
    ("amp_skipped_share", F64, "share of optimizer steps the GradScaler skipped for inf/NaN gradients (scale halved)"),
    ("update_ratio", list_of(F64), "per parameter: median |step update| / |weight| at census steps"),
    (
        "update_ratio_median",
        F64,
        "median update ratio over weight matrices (all parameters if none) that got gradients",
    ),
    ("update_ratio_curve", list_of(F64), "at each census step: the median update ratio over those matrices"),
    ("update_ratio_peak", F64, "largest value of that curve"),
    ("weight_norm_ratio", F64, "joint norm of the weight matrices at the last census step over the first one's"),
    (
        "unmoved_share",
        F64,
        "share of parameter elements with a gradient at a census step that no update measured at one moved at all",
    ),
    ("grad_depth_ratio_init", F64, "|.grad| of the first weight matrix over the last one's, at the first census"),
    ("grad_depth_ratio", F64, "median of that ratio over the census steps"),
    # dead units
    ("dead_unit_share_init", F64, "share of ReLU units never active on the probe batch, at initialization"),
    ("dead_unit_share", F64, "the same after training"),
    ("dead_unit_share_layers", list_of(F64), "after training, per ReLU module"),
    # the activations, inputs, labels and outputs the loop hands over
    ("saturated_share_init", F64, "share of Tanh/Sigmoid outputs within 1% of their bounds, at initialization"),
    ("saturated_share", F64, "the same after training"),
    ("activation_growth_init", F64, "RMS of the last activation module's output over the first's, at init"),
    ("input_rms", F64, "root mean square of the first batch's inputs (standardized data: about 1)"),
    ("label_imbalance", F64, "most frequent class over least frequent among the training labels seen"),
    (
        "batch_label_mix",
        F64,
        "mean entropy of each batch's labels over that of random batches of the same size from the labels seen",
    ),
    ("majority_share", F64, "share of the most frequent class among the training labels seen (the class prior)"),
    (
        "targets_changed_share",
        F64,
        "share of target rows the loss received (census steps) that differ from the batch's (NaN: loss not a Module)",
    ),
    (
        "output_prob_share",
        F64,
        "median share of output rows that are probabilities, handed to a loss that applies a softmax",
    ),
    (
        "output_spread",
        F64,
        "std of the output over the probe batch's examples over its RMS (0: the same for every input)",
    ),
    ("target_reach_gap", F64, "share of the probe batch's targets the output cannot produce (NaN for class indices)"),
    (
        "logit_reach_span",
        F64,
        "for a loss that applies its own softmax: how far apart the outputs can get (max - min), with the inputs"
        " and the output layer scaled up to 1000x; NaN for other losses and for rows that always sum to 1",
    ),
    (
        "confident_disagreement",
        F64,
        "median over the later half of the census steps: share of the batch whose label the model contradicts"
        " (another class ranked first, the label given p < 0.1)",
    ),
    ("confident_disagreement_peak", F64, "the largest share of a census batch confidently contradicted so far"),
    ("train_in_eval_share", F64, "share of training forwards run in eval mode (0 without dropout/BatchNorm)"),
    ("eval_in_train_share", F64, "share of evaluation forwards run in training mode (0 without them)"),
    # data wait
    ("data_wait_s", F64, "seconds the loop waited for batches"),
    ("loop_s", F64, "seconds of the training loop"),
    ("data_wait_share", F64, "data_wait_s / loop_s"),
    # where a step's time goes (harness/timing.py), after loop.timing_warmup steps
    ("step_time_s", F64, "seconds per training step, synchronized with the GPU"),
    ("copy_share", F64, "share of the loop spent copying batches to the device"),
    (
        "gpu_busy_share",
        F64,
        "GPU time from the start to the end of each step over wall time (upper bound); NaN on CPU",
    ),
    ("peak_memory_bytes", I64, "CUDA peak allocation; on the CPU, the process's largest resident set seen"),
    # curves
    ("train_loss_curve", list_of(F64), "training loss at every step"),
    ("nonfinite_losses", I64, "steps whose training loss was NaN or infinite"),
    ("loss_spikes", I64, "how many steps' loss jumped far out of its recent range"),
    ("loss_spike_steps", list_of(I64), "steps (batch indices) whose loss jumped far out of its recent range"),
    ("loss_spike_period", F64, "most common gap between consecutive spikes"),
    ("periodic_spikes", I64, "how many gaps between consecutive spikes equal that period"),
    ("val_steps", list_of(I64), "steps at which validation ran (0 = before training)"),
    ("val_loss_curve", list_of(F64), "validation loss at val_steps"),
    ("val_acc_curve", list_of(F64), "validation accuracy at val_steps"),
    # final
    ("final_train_loss", F64, "training-set loss after the last step (eval mode)"),
    ("final_train_acc", F64, "training-set accuracy after the last step"),
    ("final_val_loss", F64, "validation loss after the last step"),
    ("final_val_acc", F64, "validation accuracy after the last step"),
    # the run's own yardsticks (harness/reference.py), from the first training examples and validation
    ("baseline_val_acc", F64, "validation accuracy of always answering the most frequent training label"),
    ("reference_val_acc", F64, "best validation accuracy of a ridge classifier and 5-NN on the same examples"),
    ("reference_train_acc", F64, "the ridge classifier's accuracy on its own training examples"),
    ("reference_linear_val_acc", F64, "the ridge classifier's validation accuracy"),
    ("reference_loo_acc", F64, "5-NN leave-one-out accuracy on the reference's training examples"),
    ("reference_knn_val_acc", F64, "5-NN accuracy on validation, trained on those examples"),
    ("prior_shift", F64, "most under-represented training class: its validation share over its training share"),
    ("reference_examples", I64, "distinct training examples the references were fitted on"),
    ("reference_val_examples", I64, "held-out examples the references were scored on"),
    ("data_curve_examples", list_of(I64), "data learning curve: training examples the references were refitted on"),
    ("data_curve_val_acc", list_of(F64), "data learning curve: the references' validation accuracy at each size"),
]
# The measurements that move as a run goes on, taken again at every step budget (loop.budgets) as if the run
# had stopped there; the record's own columns of these names are the snapshot at the run's end.
CHECKPOINT_COLUMNS = [
    "steps",
    "first_loss",
    "nonfinite_losses",
    "grad_zero_share_total",
    "params_without_grad",
    "params_without_grad_share",
    "accumulation_ratio",
    "backwards_per_step",
    "optimizer_steps",
    "grad_carried_share",
    "grad_kept_at_step",
    "clipped_step_share",
    "lr_built",
    "lr_peak_share",
    "lr_last_share",
    "lr_decayed_share",
    "amp_scale_min",
    "amp_scale_last",
    "amp_skipped_share",
    "update_ratio_median",
    "update_ratio_peak",
    "weight_norm_ratio",
    "unmoved_share",
    "grad_depth_ratio_init",
    "grad_depth_ratio",
    "dead_unit_share_init",
    "dead_unit_share",
    "saturated_share_init",
    "saturated_share",
    "activation_growth_init",
    "input_rms",
    "label_imbalance",
    "batch_label_mix",
    "majority_share",
    "targets_changed_share",
    "output_prob_share",
    "output_spread",
    "target_reach_gap",
    "logit_reach_span",
    "confident_disagreement",
    "confident_disagreement_peak",
    "train_in_eval_share",
    "eval_in_train_share",
    "loss_spikes",
    "loss_spike_period",
    "periodic_spikes",
    "data_wait_s",
    "loop_s",
    "data_wait_share",
    "final_train_loss",
    "final_train_acc",
    "final_val_loss",
    "final_val_acc",
]

NAMES = {name for name, _, _ in COLUMNS}
_unknown = [name for name in CHECKPOINT_COLUMNS if name not in NAMES]
if _unknown:  # a snapshot column must be one of the record's own (its kind is read from there)
    raise ValueError(f"CHECKPOINT_COLUMNS names {_unknown}, not columns of the record")
