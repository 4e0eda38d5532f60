"""Sequence outputs under the Hugging Face Trainer and Lightning: real `transformers` models, built from small configs.

A one-layer GPT-2 (a causal language model, which shifts its labels itself: the logits at t are scored against
label t + 1) and a one-layer BERT tagger (a tag per token, no shift), random weights, nothing downloaded, trained
on Python's own standard library source (tests/test_sequence_outputs.py's corpus: whole files for training, others
for validation). Batches are what a collator makes: sequences of 16 to 64 characters padded to 64, the padding
dropped by the attention mask and labelled -100. Each model is run healthy, at a rate that diverges (AdamW at
1.0), and with its padding counted in the loss (the padding's labels left as the pad token or tag, not -100), under
the Trainer and, for GPT-2, inside a LightningModule; the verdicts are checked, and so is that the doctor reads
the causal shift from the model's own loss (and no shift for the tagger). Each library is an optional extra:
where one is missing its tests skip.
"""

import io
import json
import math
import os
import tokenize
from pathlib import Path

import pytest
import torch
from conftest import ROOT
from test_sequence_outputs import TRAIN_FILES, VALIDATION_FILES, text

from doctor import Doctor
from harness.instruments.padding import POSITIONS, SHARE
from harness.targets import shifted

for name, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true"}.items():
    os.environ.setdefault(name, value)

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    # Lightning 2.6 builds torch's LeafSpec, which torch 2.13 deprecates: its warning, not the doctor's.
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated:FutureWarning"),
]

LENGTH = 64  # positions per sequence (GPT-2's n_positions, BERT's max_position_embeddings)
BATCH = 16
PAD = 0  # the pad token: byte 0 never occurs in Python source
SHORTEST = 16  # each sequence keeps 16 to LENGTH tokens; the rest is padding


@pytest.fixture
def hf():
    pytest.importorskip("accelerate")
    return pytest.importorskip("transformers")


@pytest.fixture
def pl():
    return pytest.importorskip("lightning.pytorch")


# The planted faults and their verdicts: a rate that diverges (AdamW at 1.0), and the padding's labels left as the
# pad token or tag. The padding fault runs by default for each integration, the rate with the slow tests.
FAULTS = [pytest.param("rate", "lr_too_high", marks=pytest.mark.slow), ("padding", "padding_in_loss")]


# ----- the data: windows of the standard library's source, padded as a collator pads them ------------------------
def windows(tokens: torch.Tensor, count: int, seed: int, tags: torch.Tensor | None = None):
    """`count` random LENGTH-long windows of the text (and of its tags, if given)."""
    starts = torch.randint(0, len(tokens) - LENGTH, (count,), generator=torch.Generator().manual_seed(seed))
    at = starts.unsqueeze(1) + torch.arange(LENGTH)
    return tokens[at], (tags[at] if tags is not None else None)


def padded(ids: torch.Tensor, labels: torch.Tensor, seed: int, padding_scored: bool = False) -> dict:
    """Each sequence cut to 16 to LENGTH tokens and padded: input PAD and attention 0 there.

    The padding's labels are -100 (what the loss ignores), or, with `padding_scored`, the pad token (tag 0): the
    fault of a collator that pads the labels as it pads the inputs.
    """
    lengths = torch.randint(SHORTEST, LENGTH + 1, (len(ids),), generator=torch.Generator().manual_seed(seed))
    kept = torch.arange(LENGTH).unsqueeze(0) < lengths.unsqueeze(1)
    ids = ids.masked_fill(~kept, PAD)
    labels = labels.masked_fill(~kept, PAD if padding_scored else -100)
    return {"input_ids": ids, "attention_mask": kept.long(), "labels": labels}


class Rows(torch.utils.data.Dataset):
    """A dict of (n, LENGTH) tensors as a Trainer dataset: one dict per sequence, as a tokenizer's output."""

    def __init__(self, columns: dict):
        self.columns = columns

    def __len__(self):
        return len(self.columns["input_ids"])

    def __getitem__(self, index):
        return {key: column[index] for key, column in self.columns.items()}


def language_data(count: int, padding_scored: bool = False) -> tuple[Rows, list[dict]]:
    """Training sequences and one validation batch for a causal LM: its labels are its inputs (the model shifts)."""
    ids, _ = windows(text(TRAIN_FILES), count, seed=0)
    val_ids, _ = windows(text(VALIDATION_FILES), 128, seed=1)
    training = padded(ids, ids.clone(), seed=2, padding_scored=padding_scored)
    return Rows(training), [padded(val_ids, val_ids.clone(), seed=3, padding_scored=padding_scored)]


# Python's own tokenizer tags each character of the source: a tagger must read the context (is this inside a string
# or a comment?), on real text, with no label the doctor's thresholds ever saw.
TAGS = {tokenize.NAME: 1, tokenize.OP: 2, tokenize.NUMBER: 3, tokenize.STRING: 4, tokenize.COMMENT: 5}  # else 0


def tagged(names) -> tuple[torch.Tensor, torch.Tensor]:
    """The characters of these standard library files (code points over 255 as 255) and each one's token's tag."""
    library = Path(os.path.dirname(os.__file__))
    ids, tags = [], []
    for name in names:
        source = (library / name).read_text()
        line_starts = [0]
        for line in source.splitlines(keepends=True):
            line_starts.append(line_starts[-1] + len(line))
        tag = [0] * len(source)
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            start = line_starts[token.start[0] - 1] + token.start[1]
            end = line_starts[token.end[0] - 1] + token.end[1]
            tag[start:end] = [TAGS.get(token.type, 0)] * (end - start)
        ids += [min(ord(c), 255) for c in source]
        tags += tag
    return torch.tensor(ids), torch.tensor(tags)


def tagging_data(count: int, padding_scored: bool = False) -> tuple[Rows, list[dict]]:
    """Training sequences and one validation batch for the tagger: a tag per character."""
    characters, tags = tagged(TRAIN_FILES)
    ids, tags = windows(characters, count, seed=0, tags=tags)
    characters, val_tags = tagged(VALIDATION_FILES)
    val_ids, val_tags = windows(characters, 128, seed=1, tags=val_tags)
    training = padded(ids, tags, seed=2, padding_scored=padding_scored)
    return Rows(training), [padded(val_ids, val_tags, seed=3, padding_scored=padding_scored)]


# ----- the models ----------------------------------------------------------------------------------------------------
def gpt2(hf):
    """A one-layer GPT-2, 64 wide, over bytes: random weights from its config."""
    torch.manual_seed(0)
    config = hf.GPT2Config(
        n_layer=1, n_embd=64, n_head=4, vocab_size=256, n_positions=LENGTH, bos_token_id=PAD, eos_token_id=PAD
    )
    return hf.GPT2LMHeadModel(config)


def bert_config(hf, **options):
    """A one-layer BERT, 64 wide, over characters (random weights: built from its config, no download)."""
    torch.manual_seed(0)
    return hf.BertConfig(
        vocab_size=256,
        hidden_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=LENGTH,
        pad_token_id=PAD,
        **options,
    )


def bert_tagger(hf):
    """A BERT token classifier, one of 6 tags per character."""
    return hf.BertForTokenClassification(bert_config(hf, num_labels=len(TAGS) + 1))


def bert_without_decoder_mask(hf):
    """BERT's language-model head trained on next bytes without `is_decoder=True`: its attention reads the whole window.

    The model shifts its labels itself, as GPT-2 does, but as an encoder it masks nothing: each position reads the
    byte it must predict (the bug Hugging Face's warning about `is_decoder` is for).
    """
    return hf.BertLMHeadModel(bert_config(hf, is_decoder=False))


def trainer_run(hf, tmp_path, model, data, lr: float, steps: int):
    """The Trainer on `model` for `steps` steps of AdamW at `lr`, the doctor's callback watching; returns it."""
    from doctor.integrations.huggingface import DoctorTrainerCallback

    training, validation = data
    doctor = DoctorTrainerCallback(validation=validation)
    args = hf.TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        learning_rate=lr,
        lr_scheduler_type="constant",
        save_strategy="no",
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
    )
    hf.Trainer(model=model, args=args, train_dataset=training, callbacks=[doctor]).train()
    return doctor


def shifted_accuracy(model, batch: dict) -> float:
    """The causal LM's accuracy on a batch, computed here: the logits at t against label t + 1, -100 left out."""
    with torch.no_grad():
        model.eval()
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    kept = labels != -100
    return float((logits[:, :-1].argmax(dim=2)[kept] == labels[kept]).double().mean())


def test_targets_shifted_to_the_positions_that_answer_them():
    labels = torch.tensor([[5, 6, 7, -100], [1, 2, 3, 4]])
    assert shifted(labels, 1, fill=-100).tolist() == [[6, 7, -100, -100], [2, 3, 4, -100]]


def test_the_padding_watch_counts_scored_positions_under_a_dropped_mask():
    from analysis.checks.language import PADDING_IN_LOSS
    from harness.instruments.padding import PADDED, PaddingWatch

    watch = PaddingWatch(classes=10, ignore_index=-100)
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    watch.see({"input_ids": mask, "attention_mask": mask}, torch.tensor([[1, 2, -100, -100], [1, 2, 3, 4]]))
    watch.see({"input_ids": mask, "attention_mask": mask}, torch.tensor([[1, 2, 0, -100], [1, 2, 3, 4]]))
    watch.see({"input_ids": mask, "attention_mask": torch.ones_like(mask)}, torch.zeros_like(mask))  # no padding
    watch.see(mask, torch.zeros_like(mask))  # no attention mask: not read
    measured = watch.measurements()
    assert measured == {PADDED: 2, SHARE: 0.5, POSITIONS: 1 / 21}  # scored: 6, 7 and 8 positions
    assert PADDING_IN_LOSS.judge_fact(measured) is None  # half the padded batches: not most
    watch.see({"input_ids": mask, "attention_mask": mask}, torch.tensor([[1, 2, 0, 0], [1, 2, 3, 4]]))
    found = PADDING_IN_LOSS.judge_fact(watch.measurements())
    assert found.verdict == "padding_in_loss" and found.value == pytest.approx(2 / 3) and found.threshold == 0.5
    # A loss that ignores the pad label itself, inside a function whose ignore_index the doctor cannot read, scores
    # no padding: the labels under the mask are tried on it.
    recent = [({"attention_mask": mask}, torch.tensor([[1, 2, 0, 0], [1, 2, 3, 4]]))]
    ignoring = lambda out, y: torch.nn.functional.cross_entropy(out, y, ignore_index=0)  # noqa: E731
    assert watch.measurements(recent, ignoring)[SHARE] == 0.0
    assert watch.measurements(recent, torch.nn.functional.cross_entropy)[SHARE] == pytest.approx(2 / 3)
    # With the causal shift the targets answer the next position: the mask is read at the label's own position.
    causal = PaddingWatch(classes=10, ignore_index=-100, shift=1)
    causal.see({"attention_mask": torch.tensor([[1, 1, 0]])}, shifted(torch.tensor([[1, 2, -100]]), 1, -100))
    assert causal.measurements()[SHARE] == 0.0
    causal.see({"attention_mask": torch.tensor([[1, 1, 0]])}, shifted(torch.tensor([[1, 2, 0]]), 1, -100))
    assert causal.measurements()[SHARE] == 0.5


# ----- a plain loop: the doctor told where the attention mask is, or finding it in a dict batch ------------------
def plain_loop(hf, padding_scored: bool, steps: int = 40, **options):
    """GPT-2 in a plain loop on dict batches: the model computes its own (shifted) loss from the batch's labels."""
    rows = language_data(steps * BATCH, padding_scored=padding_scored)[0].columns
    batches = [{key: column[i : i + BATCH] for key, column in rows.items()} for i in range(0, steps * BATCH, BATCH)]
    model = gpt2(hf)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    doctor = Doctor(model, optimizer, torch.nn.CrossEntropyLoss(), **options)
    for batch in doctor.watch(batches):
        loss = model(**batch).loss
        optimizer.zero_grad()
        loss.backward()
        doctor.after_backward(loss)
        optimizer.step()
    return doctor.report()


@pytest.mark.slow  # a GPT-2 loop under the doctor (3-4 s)
@pytest.mark.parametrize(
    "told", [{}, {"inputs": ("input_ids", "attention_mask"), "targets": "labels"}], ids=["found", "told"]
)
def test_a_plain_loop_gets_the_shift_and_the_padding_finding(hf, told, tmp_path):
    report = plain_loop(hf, padding_scored=True, **told)
    m = report.measurements
    assert m["target_shift"] == 1 and m["padded_batches"] == 40 and m[SHARE] == 1.0
    assert report.verdict == "padding_in_loss", str(report)
    assert "padding_in_loss" in str(report).splitlines()[0]
    # The report as JSON holds to its schema, the finding carrying what it judged.
    jsonschema = pytest.importorskip("jsonschema")
    document = json.loads(json.dumps(report.to_dict()))
    jsonschema.Draft202012Validator(json.loads((ROOT / "docs" / "report.schema.json").read_text())).validate(document)
    first = document["findings"][0]
    assert (first["feature"], first["value"], first["threshold"], first["direction"]) == (SHARE, 1.0, 0.5, "above")
    assert first["margin"] == pytest.approx(0.5)
    assert report.plot(tmp_path / "padding.png").stat().st_size > 0  # its panel drawn like any finding's
    clean = plain_loop(hf, padding_scored=False, **told)
    assert clean.measurements[SHARE] == 0.0 and "padding_in_loss" not in [f.verdict for f in clean.findings]


@pytest.mark.slow  # a GPT-2 loop under the doctor (3-4 s)
def test_memorization_trains_on_the_shifted_targets_and_no_capacity_fit_runs(hf):
    report = plain_loop(
        hf, False, steps=20, model_factory=lambda: gpt2(hf), memorize_steps=60, capacity_examples=32, capacity_steps=30
    )
    m = report.measurements
    assert m["target_shift"] == 1 and len(m["memorize_losses"]) == 3
    # 16 sequences of next tokens memorized: the best rate's loss (on the shifted targets) far under ln V.
    assert m["memorize_best_loss"] < 0.5 * math.log(256), m["memorize_losses"]
    # Nothing reads a capacity fit on a sequence task: it is not run (it cost 334 s after a 3.8 s GPT-2 run).
    assert m["capacity_examples"] == 0 and math.isnan(m["capacity_score"])
    assert "no clean copy" in report.cost.line()


@pytest.mark.slow  # a whole fit through the integration (5-12 s)
# ----- the Hugging Face Trainer ---------------------------------------------------------------------------------------
def test_trainer_on_gpt2_reads_the_causal_shift_and_a_healthy_run_is_healthy(hf, tmp_path):
    data = language_data(300 * BATCH)
    model = gpt2(hf)
    doctor = trainer_run(hf, tmp_path, model, data, lr=3e-3, steps=300)
    report = doctor.report
    m = report.measurements
    assert m["task"] == "sequence" and m["target_shift"] == 1, str(report)
    assert doctor.loss_used.checked  # the implied loss, shifted, reproduced GPT-2's own loss
    assert m["final_val_acc"] == pytest.approx(shifted_accuracy(model, data[1][0]))  # scored on the next token
    assert m["padded_batches"] == 300 and m[SHARE] == 0.0  # every batch padded, no padding scored
    assert m["final_val_acc"] > m["baseline_val_acc"] + 0.03, str(report)  # learning: above the most frequent label
    assert m["future_token_effect"] == 0  # its causal mask: no output moves with later tokens
    assert report.verdict == "healthy", str(report)


@pytest.mark.slow  # a whole fit through the integration (5-12 s)
def test_trainer_on_a_bert_tagger_reads_no_shift_and_a_healthy_run_is_healthy(hf, tmp_path):
    data = tagging_data(300 * BATCH)
    doctor = trainer_run(hf, tmp_path, bert_tagger(hf), data, lr=3e-3, steps=300)
    report = doctor.report
    m = report.measurements
    assert m["task"] == "sequence" and m["target_shift"] == 0 and doctor.loss_used.checked, str(report)
    assert m["final_val_acc"] > m["baseline_val_acc"] + 0.03, str(report)  # learning: above the most frequent label
    assert math.isnan(m["future_token_effect"])  # tags are not the next tokens: reading later ones is its design
    assert report.verdict == "healthy", str(report)


def test_trainer_on_bert_as_a_causal_lm_without_its_decoder_mask_names_future_visible(hf, tmp_path):
    # The probe reads the model, not what it has learned: 30 steps show it.
    doctor = trainer_run(hf, tmp_path, bert_without_decoder_mask(hf), language_data(30 * BATCH), lr=3e-3, steps=30)
    report = doctor.report
    m = report.measurements
    assert m["target_shift"] == 1 and doctor.loss_used.checked, str(report)  # it shifts its labels, as GPT-2 does
    assert m["future_token_effect"] > 0.01, str(report)
    assert report.verdict == "future_visible", str(report)


# Each model with the data it trains on: GPT-2 on next-byte windows, the BERT tagger on Python's token types.
TRAINER_MODELS = {"gpt2": (gpt2, language_data), "bert tagger": (bert_tagger, tagging_data)}


@pytest.mark.slow  # a whole fit through the integration (5-12 s)
@pytest.mark.parametrize("fault, verdict", FAULTS)
@pytest.mark.parametrize("name", TRAINER_MODELS)
def test_the_trainer_names_a_planted_fault(hf, tmp_path, name, fault, verdict):
    build, make_data = TRAINER_MODELS[name]
    data = make_data(300 * BATCH, padding_scored=fault == "padding")
    doctor = trainer_run(hf, tmp_path, build(hf), data, lr=1.0 if fault == "rate" else 3e-3, steps=300)
    report = doctor.report
    assert report.verdict == verdict, str(report)


# ----- Lightning ------------------------------------------------------------------------------------------------------
def lightning_run(pl, model, data, lr: float, steps: int):
    """A LightningModule wrapping `model`, fitted for `steps` steps of AdamW at `lr` under the callback; returns it.

    Its forward returns the model's output, the loss included when it is given the labels, as such modules do.
    """
    from doctor.integrations.lightning import DoctorCallback

    class CausalLM(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None, labels=None):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

        def training_step(self, batch, _index):
            return self(**batch).loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=lr)

    training, validation = data
    doctor = DoctorCallback(validation=validation)
    trainer = pl.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[doctor],
    )
    loader = torch.utils.data.DataLoader(training, batch_size=BATCH, shuffle=True)
    trainer.fit(CausalLM(), loader)
    return doctor


@pytest.mark.slow  # a whole fit through the integration (5-12 s)
def test_lightning_wrapping_gpt2_reads_the_causal_shift_and_a_healthy_run_is_healthy(pl, hf):
    data = language_data(300 * BATCH)
    model = gpt2(hf)
    doctor = lightning_run(pl, model, data, lr=3e-3, steps=300)
    report = doctor.report
    m = report.measurements
    assert m["task"] == "sequence" and m["target_shift"] == 1 and doctor.loss_used.checked, str(report)
    assert m["final_val_acc"] == pytest.approx(shifted_accuracy(model, data[1][0]))
    assert m["final_val_acc"] > m["baseline_val_acc"] + 0.03, str(report)  # learning: above the most frequent label
    assert report.verdict == "healthy", str(report)


@pytest.mark.slow  # a whole fit through the integration (5-12 s)
@pytest.mark.parametrize("fault, verdict", FAULTS)
def test_lightning_wrapping_gpt2_names_a_planted_fault(pl, hf, fault, verdict):
    data = language_data(300 * BATCH, padding_scored=fault == "padding")
    doctor = lightning_run(pl, gpt2(hf), data, lr=1.0 if fault == "rate" else 3e-3, steps=300)
    report = doctor.report
    assert report.verdict == verdict, str(report)


def test_lightning_shifting_the_labels_in_training_step_is_refused_in_one_line_and_the_fit_goes_on(pl, hf, caplog):
    from doctor.integrations.lightning import DoctorCallback

    model = gpt2(hf)

    class ShiftsItself(pl.LightningModule):  # forward never sees the labels: the shift is the loop's own
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

        def training_step(self, batch, _index):
            logits = self(batch["input_ids"], batch["attention_mask"])
            return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), batch["labels"][:, 1:].flatten())

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3)

    doctor = DoctorCallback()
    trainer = pl.Trainer(
        max_steps=5,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=[doctor],
    )
    training, _ = language_data(5 * BATCH)
    with caplog.at_level("WARNING", logger="doctor"):
        trainer.fit(ShiftsItself(), torch.utils.data.DataLoader(training, batch_size=BATCH))
    assert trainer.global_step == 5 and doctor.report is None
    assert "against the next position's target" in doctor.cannot_judge and "already shifted" in doctor.cannot_judge
    assert len([r for r in caplog.records if r.name == "doctor"]) == 1
