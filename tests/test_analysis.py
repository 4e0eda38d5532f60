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
from conftest import FAULTS, ROOT, SHORT, make_config
from hand_records import PLANTED, THRESHOLDS, record
from joblib import Parallel, delayed

from analysis.features import features
from analysis.fit import NothingToFit, fit_stump, fit_thresholds
from analysis.harm import harmful
from analysis.load import NoRecords, load_records
from analysis.report import build
from analysis.rules import HEALTHY, RULES, diagnose, load_thresholds, verdicts
from harness.cell import run_cell
from harness.records import write_record

REPORTED = ("digits", "synthetic")  # the report's grid: the tuned dataset and a held-out one


def test_every_rule_has_a_hand_made_fault():
    assert set(PLANTED) == {rule.verdict for rule in RULES}


@pytest.mark.parametrize("verdict", PLANTED)
def test_each_rule_names_its_fault_with_numbers_and_a_next_step(verdict):
    planted = record(**PLANTED[verdict])
    # judged with its own budget's thresholds, as the doctor judges a run (still_improving's is a 100-step run)
    findings = diagnose(planted, RULES, load_thresholds(int(planted["steps"])))
    assert findings[0].verdict == verdict
    assert re.search(r"\d", findings[0].evidence) and findings[0].next_step
    assert findings[0].margin > 0


def test_a_healthy_record_is_healthy_and_every_firing_rule_is_listed():
    assert [f.verdict for f in diagnose(record(), RULES, THRESHOLDS)] == [HEALTHY]
    both = record(data_wait_s=3.0, loop_s=4.0, input_rms=250.0, first_loss=35.0)
    findings = diagnose(both, RULES, THRESHOLDS)
    assert [f.verdict for f in findings] == ["starved_loader", "unscaled_inputs"]
    assert "RMS of 250" in findings[1].evidence and "first loss was 35 against ln C = 2.30" in findings[1].evidence
    table = verdicts(pd.DataFrame([both, record()]), RULES, THRESHOLDS)
    assert table.verdict.tolist() == ["starved_loader", HEALTHY]
    assert table.fired.tolist() == [["starved_loader"], []]
    # The run learned as well as the references: the large inputs are a warning, not a failing finding.
    assert table.warnings.tolist() == [["unscaled_inputs"], []]
    assert [f.kind for f in findings] == ["failing", "warning"]


def test_the_zoo_command_prints_the_reports_parts_as_text():
    from analysis import zoo

    twin = {"config_yaml": "loop: {steps: 600}\n", "model": "mlp", "device": "cpu", "n_val": 1000}
    records = pd.DataFrame(
        [
            record(**twin, fault=HEALTHY, severity="none", final_val_acc=0.90),
            record(**twin, fault="lr_too_low", diagnosis="lr_too_low", severity="planted", final_val_acc=0.5),
            record(**twin, fault="dead_relu", diagnosis="dead_relu", severity="planted", final_val_acc=0.90),
        ]
    )
    table = records[["dataset", "fault", "severity", "diagnosis"]].assign(
        family="mlp",
        steps=600,
        harmful=[True, True, False],  # the dead_relu cell learned as well as its twin
        improving=[False, False, False],
        rules=[HEALTHY, HEALTHY, HEALTHY],
        forest=[HEALTHY, "lr_too_low", "lr_too_low"],
    )
    kept = {"dead_relu": "no cell of its fault in these records (leaving out zoo/blobs)"}
    assert "\n".join(zoo.printout(table, records, kept)).splitlines() == [
        "the zoo: digits and 0 generated problems, each judged by rules and a forest fitted without it "
        "(leave-one-problem-out), at each step budget",
        " steps method false alarms false alarms, finished runs mild      planted extreme planted, harm-aware",
        "   600  rules   0/1 (0.0%)                  0/1 (0.0%)  0/0   0/1 (0.0%)     0/0         1/2 (50.0%)",
        "   600 forest   0/1 (0.0%)                  0/1 (0.0%)  0/0 1/1 (100.0%)     0/0         1/2 (50.0%)",
        "",
        "Per fault and size at 600 steps (rules):",
        "   planted planted",
        "lr_too_low     0/1",
        "",
        "Misses at 600 steps (rules), by planted verdict and verdict given:",
        " diagnosis severity   rules  cells",
        "lr_too_low  planted healthy      1",
        "",
        "Fault cells left out because the fault did no measurable harm (analysis/harm.py):",
        "    fault severity  cells  harmless",
        "dead_relu  planted      1         1",
        "",
        "Rules some fold could not fit kept a threshold they were not fitted on there:",
        "- no cell of its fault in these records (leaving out zoo/blobs): dead_relu",
        "",
        "false-alarms digits 0/1 steps=600",
        "false-alarms-finished digits 0/1 steps=600",
        "accuracy digits rules 1/1 leave-one-problem-out family=mlp steps=600 severity=none",
        "accuracy digits forest 1/1 leave-one-problem-out family=mlp steps=600 severity=none",
        "accuracy digits rules 0/1 leave-one-problem-out family=mlp steps=600 severity=planted",
        # harm-aware: the harmless dead_relu cell is right when called healthy (rules), wrong when misnamed (forest)
        "accuracy-harm-aware digits rules 1/2 leave-one-problem-out family=mlp steps=600 severity=planted",
        "accuracy digits forest 1/1 leave-one-problem-out family=mlp steps=600 severity=planted",
        "accuracy-harm-aware digits forest 1/2 leave-one-problem-out family=mlp steps=600 severity=planted",
    ]
    markdown = zoo.describe(table, records, kept)
    for part in zoo.parts(table, records, kept):  # the same parts in the report, as markdown
        assert part.heading is None or part.heading in markdown


def test_a_fault_counts_as_harmful_only_against_its_healthy_twin():
    from analysis.zoo import harmless_counts

    config = "optimizer: {name: adam, lr: 0.001}\ndata: {batch_size: 32}\nloop: {steps: 600}\n"
    twin = {"config_yaml": config, "model": "mlp", "device": "cpu", "n_val": 1000}
    rows = [
        record(**twin, fault=HEALTHY, severity="none", final_val_acc=0.90, loop_s=1.0),
        record(**twin, fault="lr_too_low_mild", diagnosis="lr_too_low", severity="mild", final_val_acc=0.895),
        record(**twin, fault="lr_too_low", diagnosis="lr_too_low", severity="planted", final_val_acc=0.5),
        record(**twin, fault="starved_loader_mild", diagnosis="starved_loader", severity="mild", loop_s=1.2),
        record(**twin, fault="starved_loader", diagnosis="starved_loader", severity="planted", loop_s=2.0),
        record(**twin, fault="eval_in_train_mode", diagnosis="wrong_mode", severity="planted", final_val_acc=0.9),
        # another seed has no healthy twin here: nothing to compare with, so it is kept
        record(**{**twin, "seed": 1}, fault="lr_too_high_mild", diagnosis="lr_too_high", severity="mild"),
    ]
    records = pd.DataFrame(rows).reset_index(drop=True)
    assert harmful(records).tolist() == [True, False, True, False, True, True, True]
    counts = harmless_counts(records).set_index("fault")
    assert counts.harmless.to_dict() == {
        "eval_in_train_mode": 0,
        "lr_too_high_mild": 0,
        "lr_too_low": 0,
        "lr_too_low_mild": 1,
        "starved_loader": 0,
        "starved_loader_mild": 1,
    }


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


def test_a_rule_that_sees_only_its_own_fault_fires_on_all_and_one_past_every_value_on_none():
    # A cut past an extreme value: twice or half of it when positive, one unit further at or under zero.
    everyone = pd.Series([True] * 3)
    assert fit_stump(pd.Series([0.2, 0.5, 0.9]), everyone, above=True, log=False) == 0.1  # half the weakest
    assert fit_stump(pd.Series([-3.0, -1.0, 0.0]), everyone, above=False, log=False) == 1.0  # fires on all three
    assert fit_stump(pd.Series([2e-4, 1e-3, 5e-3]), everyone, above=False, log=True) == 1e-2
    top_only = pd.Series([False, False, True])  # a below rule's fault at the top: no cut separates it
    assert fit_stump(pd.Series([-3.0, -1.0, 0.0]), top_only, above=False, log=False) == -4.0  # fires on none


def test_a_rule_that_cannot_separate_fires_on_nothing_and_one_with_no_fault_keeps_its_fallback():
    values = pd.Series([0.1, 0.2, 0.3, 0.4])
    mixed = pd.Series([True, False, False, False])  # its only fault sits below the healthy ones
    assert fit_stump(values, mixed, above=True, log=False) == 0.8  # firing on nothing (1 error): past the highest
    assert fit_stump(values, pd.Series([False] * 4), above=True, log=False) is None
    frame = pd.DataFrame([record(diagnosis=HEALTHY, cell_id=f"h{s}", seed=s) for s in range(3)])
    fallback = {rule.verdict: 0.5 for rule in RULES}
    fit = fit_thresholds(frame, fallback=fallback)
    assert fit.thresholds == fallback
    assert fit.kept == dict.fromkeys(fallback, "no cell of its fault in these records")
    committed = fit_thresholds(frame).thresholds  # no fallback given: the committed ones
    assert committed == load_thresholds(int(frame.steps.max()))
    with pytest.raises(NothingToFit, match=r"the starved_loader rule cannot be fitted \(no cell of its fault"):
        fit_thresholds(frame, fallback={})


def test_fit_thresholds_separates_hand_made_faults_in_rule_order():
    rows = [record(diagnosis=HEALTHY, seed=s, cell_id=f"h{s}") for s in range(3)]
    for verdict, change in PLANTED.items():
        rows += [record(diagnosis=verdict, seed=s, cell_id=f"{verdict}{s}", **change) for s in range(3)]
    frame = pd.DataFrame(rows)
    fit = fit_thresholds(frame)
    thresholds = fit.thresholds
    assert fit.kept == {}  # every rule had its fault among these records
    assert thresholds["starved_loader"] == pytest.approx(math.sqrt(0.05 / 0.95 * 3.0))  # geometric: a ratio
    assert thresholds["no_zero_grad"] == pytest.approx(0.5)  # arithmetic, a share: halfway between 0 and 1
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
    write_record({**record().to_dict(), "cell_id": "old", "started_at": None, "schema_id": "older"}, folder)
    path = folder / "old.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["step_time_s", "threads"]), path)
    with pytest.warns(UserWarning, match="1 record.*older schema"):
        frame = load_records(folder)
    assert frame.cell_id.tolist() == ["old"] and pd.isna(frame.step_time_s[0]) and pd.isna(frame.threads[0])


def test_records_before_version_12_get_their_planted_faults_as_lists(tmp_path):
    folder = tmp_path / "records"
    for key, fault, diagnosis in (("one", "eval_left_on", "wrong_mode"), ("two", "a+b", "va+vb")):
        values = {"cell_id": key, "fault": fault, "diagnosis": diagnosis, "started_at": None, "schema_id": "11"}
        write_record({**record().to_dict(), **values}, folder)
        path = folder / f"{key}.parquet"
        pq.write_table(pq.read_table(path).drop_columns(["faults", "verdicts"]), path)
    with pytest.warns(UserWarning, match="2 record.*older schema"):
        frame = load_records(folder).set_index("cell_id")
    assert [list(frame.faults[k]) for k in ("one", "two")] == [["eval_left_on"], ["a", "b"]]
    assert [list(frame.verdicts[k]) for k in ("one", "two")] == [["wrong_mode"], ["va", "vb"]]
    assert frame.diagnosis.one == "wrong_mode" and pd.isna(frame.diagnosis.two)


def test_records_of_an_older_schema_are_left_out_beside_current_ones(tmp_path):
    # A measurement may mean something else now: old and new beside each other would mix two meanings.
    folder = tmp_path / "records"
    write_record({**record().to_dict(), "cell_id": "old", "started_at": None, "schema_id": "older"}, folder)
    write_record({**record().to_dict(), "cell_id": "new", "started_at": None}, folder)
    with pytest.warns(UserWarning, match="1 record.*older schema and are left out, beside 1"):
        frame = load_records(folder)
    assert frame.cell_id.tolist() == ["new"]


def test_one_record_file_loads_alone_and_a_foreign_file_is_named(tmp_path):
    folder = tmp_path / "records"
    for key in ("one", "two"):
        write_record({**record().to_dict(), "cell_id": key, "started_at": None}, folder)
    assert load_records(folder / "two.parquet").cell_id.tolist() == ["two"]
    (tmp_path / "notes.parquet").write_text("not parquet")
    with pytest.raises(NoRecords, match=r"notes\.parquet is no record of this project"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        load_records(tmp_path / "notes.parquet")


@pytest.mark.slow
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
    configs = [make_config(*SHORT, f"fault={fault}", f"dataset={d}") for d in REPORTED for fault in FAULTS]
    for written in Parallel(n_jobs=2)(delayed(run_cell)(cfg) for cfg in configs):  # the cells set their own threads
        write_record(written, folder)
    return folder


@pytest.mark.slow
def test_report_builds_and_its_accuracy_lines_match_its_tables(short_grid, tmp_path):
    records = load_records(short_grid)
    text, lines = build(records, tmp_path, early=False)
    kept = records[harmful(records)]  # a fault that did no harm in 40 steps is left out of the scores
    report = (tmp_path / "report.md").read_text()
    for name in ["measurements.png", *(f"{kind}_{d}.png" for kind in ("confusion", "loss_curves") for d in REPORTED)]:
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
        verdicts_planted = set(kept.diagnosis[kept.dataset == dataset])
        assert len(fault_rows) == len(verdicts_planted) and sum(hits) == int(score.split("/")[0])
    assert ("Left out" in report) == (len(kept) < len(records))


def test_the_rules_page_carries_the_rules_table_as_the_code_prints_it():
    from analysis.rules import rules_table

    assert rules_table() in (ROOT / "docs" / "rules.md").read_text(), "run `make docs`: docs/rules.md is stale"


def slice_of(short_grid, folder, faults, datasets=REPORTED, seeds=(0,), status="ok"):
    """A records folder holding a slice of the short grid: these faults and datasets, each record copied per seed."""
    rows = [pq.read_table(path).to_pylist()[0] for path in sorted(short_grid.glob("*.parquet"))]
    chosen = [row for row in rows if row["fault"] in faults and row["dataset"] in datasets]
    for seed in seeds:
        for row in chosen:
            write_record({**row, "seed": seed, "cell_id": f"{row['cell_id']}-copy{seed}", "status": status}, folder)
    return folder


def analysis_main(capsys, *argv):
    from analysis.__main__ import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow
def test_a_report_on_a_slice_says_which_rules_kept_their_committed_thresholds(short_grid, tmp_path, capsys):
    folder = slice_of(short_grid, tmp_path / "slice", ["healthy", "lr_too_high"], seeds=(0, 1, 2))
    code, out, err = analysis_main(capsys, "report", folder, "--out", tmp_path / "report", "--zoo", folder)
    assert code == 0, err
    assert "leave-one-seed-out on digits: rules " in out
    kept = {line.split(": ")[1]: line.split(": ")[2] for line in out.splitlines() if line.startswith("kept committed")}
    records = load_records(folder)
    scored_here = set(records.diagnosis[(records.dataset == "digits") & harmful(records)])  # 40 steps: some do no harm
    absent = {r.verdict for r in RULES} - scored_here
    assert {v for v, why in kept.items() if why == "no cell of its fault in these records"} == absent
    assert set(kept) - absent <= {"lr_too_high"}  # fitted, unless an earlier rule named every such cell
    report = (tmp_path / "report" / "report.md").read_text()
    assert "kept their committed thresholds:\n\n- no cell of its fault in these records: starved_loader, " in report
    assert "No zoo scores from " in report and "leave-one-problem-out needs ok records of at least two" in report


@pytest.mark.slow
def test_a_report_on_one_seed_or_without_digits_leaves_out_what_it_cannot_score(short_grid, tmp_path, capsys):
    one_seed = slice_of(short_grid, tmp_path / "one", ["healthy", "no_zero_grad"])
    code, out, err = analysis_main(capsys, "report", one_seed, "--out", tmp_path / "r1")
    assert code == 0, err
    assert "One seed of digits only: no leave-one-seed-out score (it needs at least two seeds)" in out
    held_out = slice_of(short_grid, tmp_path / "synthetic", ["healthy", "no_zero_grad"], datasets=["synthetic"])
    code, out, err = analysis_main(capsys, "report", held_out, "--out", tmp_path / "r2")
    assert code == 0, err
    assert out.startswith("| dataset | role | rules | naive |\n")  # no tree or forest: nothing to fit them on
    assert "No digits records here: the tree and forest (fitted on them) are left out" in out
    code, out, err = analysis_main(capsys, "families", one_seed, "--out", tmp_path / "r3")
    assert code == 0, err
    assert "No rules-refit score for mlp: leave-one-seed-out needs two seeds." in out.splitlines()
    assert not [line for line in out.splitlines() if line.startswith("accuracy digits rules-refit")]


@pytest.mark.slow
def test_fit_on_a_slice_fits_what_it_can_and_names_the_rest(short_grid, tmp_path, capsys):
    import json

    folder = slice_of(short_grid, tmp_path / "slice", ["healthy", "lr_too_low"], datasets=["digits"], seeds=(0, 1))
    code, out, err = analysis_main(capsys, "fit", folder, "--thresholds", tmp_path / "t.json")
    assert code == 0, err
    kept = [line for line in out.splitlines() if line.startswith("kept ")]
    assert "kept starved_loader steps=40: no cell of its fault in these records; keeps the committed threshold" in kept
    assert not [line for line in kept if line.startswith("kept lr_too_low ")]  # its fault is here: fitted
    fitted = json.loads((tmp_path / "t.json").read_text())["budgets"]["40"]
    assert fitted["starved_loader"] == pytest.approx(load_thresholds(40)["starved_loader"], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "zoo", "fit", "early", "families", "pairs"])
def test_no_command_crashes_on_a_folder_of_failed_cells_or_a_single_problem(short_grid, tmp_path, capsys, command):
    failed = slice_of(short_grid, tmp_path / "failed", ["healthy", "lr_too_high"], status="failed")
    single = slice_of(short_grid, tmp_path / "single", ["healthy", "lr_too_high"], datasets=["digits"])
    for folder in (failed, single):
        extra = {"fit": ["--thresholds", tmp_path / "t.json"], "report": ["--out", tmp_path / "r"]}.get(command, [])
        code, _, err = analysis_main(capsys, command, folder, *extra)
        assert code in (0, 2), err
        if code == 2:  # nothing this command can score: one line saying why
            assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("share", "span", "value"),
    [
        (1.0, math.nan, 1.0),  # a softmax: rows sum to 1 under the reach probe too, so no span is measured
        (0.6, 1.0, 0.0),  # two saturated sigmoids: many rows sum to 1 by chance, the probe finds rows that do not
        (0.0, 3.4e4, 0.0),  # a linear head
        (math.nan, math.nan, math.nan),  # not measured
    ],
)
def test_output_prob_share_counts_only_outputs_the_reach_probe_finds_always_sum_to_1(share, span, value):
    measured = features({"output_prob_share": share, "logit_reach_span": span})["output_prob_share"]
    assert measured == value or (math.isnan(value) and math.isnan(measured))


def test_an_unknown_classifier_is_refused_with_the_choices():
    from analysis.score import CLASSIFIERS, classifier

    assert set(CLASSIFIERS) == {"tree", "forest"}
    assert type(classifier("tree")).__name__ == "DecisionTreeClassifier"
    with pytest.raises(ValueError, match=r"unknown classifier 'forrest': the choices are tree, forest"):
        classifier("forrest")
