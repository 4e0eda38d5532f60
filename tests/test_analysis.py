"""The analysis: rules on hand-made records, fitting, loading, and the report built from real records."""

import math
import re
import subprocess
import sys
import warnings

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import DATASETS, FAULTS, ROOT, SHORT, make_config

from analysis.fit import fit_stump, fit_thresholds
from analysis.load import NoRecords, load_records
from analysis.report import build
from analysis.rules import HEALTHY, RULES, diagnose, load_thresholds, verdicts
from harness.cell import run_cell
from harness.records import empty_record, write_record

THRESHOLDS = load_thresholds()


def record(**measurements) -> pd.Series:
    """A hand-made record that looks healthy, with some measurements changed."""
    values = {
        "cell_id": "hand",
        "diagnosis": HEALTHY,
        "dataset": "digits",
        "seed": 0,
        "status": "ok",
        "first_loss": 2.3,
        "ln_classes": math.log(10),
        "n_classes": 10,
        "data_wait_share": 0.05,
        "params_without_grad_share": 0.0,
        "accumulation_ratio": 1.0,
        "dead_unit_share_init": 0.0,
        "dead_unit_share": 0.01,
        "update_ratio_median": 1e-3,
        "update_ratio_peak": 1.5e-2,
        "final_val_acc": 0.97,
        "final_train_acc": 1.0,
        "final_val_loss": 0.13,
        "final_train_loss": 0.01,
        "input_rms": 0.9,
        "label_imbalance": 1.05,
        "output_prob_share": 0.0,
        "train_in_eval_share": 0.0,
        "eval_in_train_share": 0.0,
        "activation_growth_init": 0.45,
        "grad_depth_ratio_init": 0.9,
        "saturated_share_init": math.nan,
        "periodic_spikes": 0,
        "confident_disagreement": 0.0,
        "memorize_best_loss": 0.001,
        "memorize_rates": [1e-4, 1e-3, 1e-2],
        "memorize_losses": [0.5, 0.001, 0.0],
    }
    return pd.Series({**empty_record(), **values, **measurements})


PLANTED = {
    "starved_loader": {"data_wait_share": 0.7},
    "frozen_params": {"params_without_grad_share": 0.92},
    "no_zero_grad": {"accumulation_ratio": 30.0},
    "wrong_mode": {"eval_in_train_share": 1.0},
    "double_softmax": {"output_prob_share": 1.0},
    "unscaled_inputs": {"input_rms": 250.0, "first_loss": 35.0},
    "dead_relu": {"dead_unit_share_init": 1.0},
    "exploding_gradients": {"activation_growth_init": 150.0, "first_loss": 280.0},
    "vanishing_gradients": {"grad_depth_ratio_init": 1e-5},
    "saturated_activations": {"saturated_share_init": 0.6},
    "class_imbalance": {"label_imbalance": 25.0},
    "periodic_bad_batch": {"periodic_spikes": 18, "loss_spike_period": 30.0, "loss_spike_steps": [59, 89, 119]},
    "lr_too_low": {"update_ratio_peak": 2e-5},
    "lr_too_high": {"update_ratio_peak": 1.5},
    "shuffled_labels": {"final_val_acc": 0.11, "final_train_acc": 0.45},
    "label_noise": {"confident_disagreement": 0.22, "final_train_acc": 0.72, "final_val_acc": 0.9},
    "overfitting": {"final_val_loss": 0.4, "final_train_loss": 0.001},
    "model_too_small": {"final_train_acc": 0.78, "final_val_acc": 0.76},
}


def test_every_rule_has_a_hand_made_fault():
    assert set(PLANTED) == {rule.verdict for rule in RULES}


@pytest.mark.parametrize("verdict", PLANTED)
def test_each_rule_names_its_fault_with_numbers_and_a_next_step(verdict):
    findings = diagnose(record(**PLANTED[verdict]), RULES, THRESHOLDS)
    assert findings[0].verdict == verdict
    assert re.search(r"\d", findings[0].evidence) and findings[0].next_step
    assert findings[0].margin > 0


def test_a_healthy_record_is_healthy_and_every_firing_rule_is_listed():
    assert [f.verdict for f in diagnose(record(), RULES, THRESHOLDS)] == [HEALTHY]
    both = record(data_wait_share=0.7, input_rms=250.0, first_loss=35.0)
    findings = diagnose(both, RULES, THRESHOLDS)
    assert [f.verdict for f in findings] == ["starved_loader", "unscaled_inputs"]
    assert "RMS of 250" in findings[1].evidence and "first loss was 35.0 against ln 10 = 2.30" in findings[1].evidence
    table = verdicts(pd.DataFrame([both, record()]), RULES, THRESHOLDS)
    assert table.verdict.tolist() == ["starved_loader", HEALTHY]
    assert table.fired.tolist() == [["starved_loader", "unscaled_inputs"], []]


def test_fitting_recovers_a_planted_threshold():
    values = pd.Series([0.01, 0.02, 0.05, 0.6, 0.7, 0.8])
    positive = pd.Series([False, False, False, True, True, True])
    assert fit_stump(values, positive, above=True, log=False) == pytest.approx((0.05 + 0.6) / 2)
    ratios = pd.Series([1.0, 1.0, 20.0, 40.0])
    assert fit_stump(ratios, pd.Series([False, False, True, True]), above=True, log=True) == pytest.approx(
        math.sqrt(20)
    )
    low = pd.Series([1e-6, 2e-6, 1e-3, 2e-3])
    assert fit_stump(low, pd.Series([True, True, False, False]), above=False, log=True) == pytest.approx(
        math.sqrt(2e-9)
    )


def test_fit_thresholds_separates_hand_made_faults_in_rule_order():
    rows = [record(diagnosis=HEALTHY, seed=s, cell_id=f"h{s}") for s in range(3)]
    for verdict, change in PLANTED.items():
        rows += [record(diagnosis=verdict, seed=s, cell_id=f"{verdict}{s}", **change) for s in range(3)]
    frame = pd.DataFrame(rows)
    thresholds = fit_thresholds(frame)
    assert thresholds["starved_loader"] == pytest.approx((0.05 + 0.7) / 2)
    assert thresholds["no_zero_grad"] == pytest.approx(math.sqrt(30.0))
    assert (verdicts(frame, RULES, thresholds).verdict == frame.diagnosis).all()


def test_load_records_skips_bad_and_foreign_files_and_refuses_duplicates(tmp_path):
    folder = tmp_path / "records"
    good = {**record().to_dict(), "cell_id": "good", "started_at": None}
    write_record(good, folder)
    (folder / "broken.parquet").write_bytes(b"not parquet at all")
    pq.write_table(pa.table({"x": [1, 2]}), folder / "foreign.parquet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        frame = load_records(folder)
    assert frame.cell_id.tolist() == ["good"]
    message = str(caught[0].message)
    assert "broken.parquet" in message and "foreign.parquet" in message
    pq.write_table(pq.read_table(folder / "good.parquet"), folder / "copy.parquet")
    with pytest.raises(ValueError, match=r"duplicate cell ids.*good"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_records(folder)


def test_records_of_an_older_schema_load_with_the_new_columns_empty(tmp_path):
    folder = tmp_path / "records"
    write_record({**record().to_dict(), "cell_id": "old", "started_at": None, "schema_version": 2}, folder)
    path = folder / "old.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["step_time_s", "threads"]), path)
    with pytest.warns(UserWarning, match="1 record.*older schema version"):
        frame = load_records(folder)
    assert frame.cell_id.tolist() == ["old"] and pd.isna(frame.step_time_s[0]) and pd.isna(frame.threads[0])


def test_no_records_says_which_command_makes_them(tmp_path):
    with pytest.raises(NoRecords, match="make sweep"):
        load_records(tmp_path / "nothing")
    result = subprocess.run(
        [sys.executable, "-m", "analysis", "report", str(tmp_path)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2 and result.stderr.startswith("error: no records in") and "make sweep" in result.stderr


@pytest.fixture(scope="module")
def short_grid(tmp_path_factory):
    """One short cell per fault and dataset, written as a sweep writes them."""
    folder = tmp_path_factory.mktemp("grid")
    for dataset in DATASETS:
        for fault in FAULTS:
            write_record(run_cell(make_config(*SHORT, f"fault={fault}", f"dataset={dataset}")), folder)
    return folder


def test_report_builds_and_its_accuracy_lines_match_its_tables(short_grid, tmp_path):
    text, lines = build(load_records(short_grid), tmp_path)
    report = (tmp_path / "report.md").read_text()
    for name in ["measurements.png", *(f"{kind}_{d}.png" for kind in ("confusion", "loss_curves") for d in DATASETS)]:
        assert (tmp_path / name).stat().st_size > 1000, name
    assert "in-sample" in report and "held out" in report and "do not cover" in report
    assert lines == [line for line in text.splitlines() if line.startswith("accuracy ")]
    for line in lines:
        _, dataset, method, score, role, family, steps = line.split()
        assert (family, steps) == ("family=mlp", f"steps={SHORT[0].split('=')[1]}")
        assert role == ("in-sample" if dataset == "digits" else "held-out")
        rows = re.findall(rf"^\| {dataset} \| {role} \| (.+) \|$", report, flags=re.M)
        assert rows, f"no accuracy row for {dataset}"
        column = ["rules", "naive", "tree", "forest"].index(method)
        assert rows[0].split(" | ")[column] == score
        per_fault = report.split(f"## {dataset} ")[1].split("Confusion")[0]
        fault_rows = re.findall(r"^\| \w+ \| (\d+/\d+ .+) \|$", per_fault, flags=re.M)
        hits = [int(row.split(" | ")[column].split("/")[0]) for row in fault_rows]
        verdicts_planted = {make_config(f"fault={f}").fault[f] for f in FAULTS}
        assert len(fault_rows) == len(verdicts_planted) and sum(hits) == int(score.split("/")[0])
