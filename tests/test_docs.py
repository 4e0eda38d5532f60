"""The generated tables of docs/ match the code and conf/ they are generated from (`make docs` rewrites them)."""

import functools
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import CONF, FAULTS, NESTED, ROOT

from analysis import docs
from analysis.rules import load_thresholds
from doctor import doc_examples, machine, pages
from doctor.pages import main
from harness.records import SCHEMA_ID, empty_record, write_record

DOCS = ROOT / "docs"


def test_the_generated_pages_are_up_to_date():
    assert pages.stale() == [], "run `make docs`: these pages no longer match the code and conf/"


@pytest.fixture(scope="module")
def faults_page() -> str:
    return docs.faults_page()


@pytest.mark.parametrize("fault", FAULTS + NESTED)
def test_every_fault_file_has_its_row_with_its_verdict_and_knobs(fault, faults_page):
    verdict, knobs, comment = docs._fault_file(CONF / "fault" / f"{fault}.yaml")
    assert f"| `{fault}` | {verdict} | " in faults_page
    assert comment and "@package" not in comment
    assert knobs != "nothing" or fault == "healthy"  # every fault changes some knob of the healthy recipe


def test_a_stale_page_is_named_and_make_docs_rewrites_it(tmp_path):
    assert pages.write(tmp_path) == list(docs.PAGES)  # a new folder: every page written
    (tmp_path / "rules.md").write_text("typed by hand\n")
    assert pages.stale(tmp_path) == ["rules.md"]
    assert pages.write(tmp_path) == ["rules.md"] and pages.stale(tmp_path) == []
    assert main(["--check"]) == 0  # the committed pages


def test_the_knobs_read_as_the_yaml_writes_them():
    verdict, knobs, _ = docs._fault_file(CONF / "fault" / "amp_clip_before_unscale.yaml")
    assert verdict == "`over_clipped`"
    assert knobs == "`loop.amp: true`, `loop.clip_norm: 1.0`, `loop.clip_before_unscale: true`"


# The doctor's example reports in docs/doctor.md: rendered from kept runs (doctor/doc_examples.py).


def refitted(steps: int) -> dict[str, float]:
    """The committed thresholds with starved_loader's doubled: what a refit could leave behind."""
    thresholds = load_thresholds(steps)
    return {**thresholds, "starved_loader": 2 * thresholds["starved_loader"]}


def test_a_threshold_changed_makes_the_example_reports_stale_and_make_docs_shows_the_new_one():
    makers = {doc_examples.KIND: functools.partial(doc_examples.block, thresholds=refitted)}
    assert docs.stale(makers=makers) == ["doctor.md"]
    kept = json.loads(doc_examples.kept_path("healthy_cnn").read_text())
    doubled = refitted(kept["observed"]["steps"])["starved_loader"]
    text = doc_examples.block(["healthy_cnn"], thresholds=refitted)
    assert f"(the rules call {doubled:.2g} starved)" in text
    assert f"(the rules call {doubled:.2g} starved)" not in (DOCS / "doctor.md").read_text()


def test_the_example_blocks_show_each_kept_run_with_its_command_and_where_it_ran():
    page = (DOCS / "doctor.md").read_text()
    words = " ".join(page.split())  # the provenance sentence is wrapped
    shown = docs.block_arguments(doc_examples.KIND)
    assert shown == ["cnn_no_zero_grad", "starved_loader", "healthy_cnn", "wide_dead_start"]
    for name in shown:
        kept = json.loads(doc_examples.kept_path(name).read_text())
        assert f"$ python -m doctor examples/{name}.py\n{doc_examples.render(kept)}\n" in page
        assert f"at commit {kept['recorded']['commit']} on {kept['recorded']['date']}" in words


TINY_RECIPE = '''"""A tiny recipe: the doctor's probe loop on a 2-class problem, for a quick recording."""
import torch
from torch import nn

STEPS = 30
loss = nn.CrossEntropyLoss()
X = torch.randn(256, 4, generator=torch.Generator().manual_seed(0))
Y = (X[:, 0] > 0).long()


def model():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def batches():
    return [(X[i : i + 32], Y[i : i + 32]) for i in range(0, 256, 32)]


def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)
'''


@pytest.fixture
def tiny_example(tmp_path, monkeypatch) -> Path:
    """An examples folder holding one tiny recipe, and an empty folder for kept runs, in place of the project's."""
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tiny.py").write_text(TINY_RECIPE)
    monkeypatch.setattr(doc_examples, "RECIPES", tmp_path / "examples")
    monkeypatch.setattr(doc_examples, "KEPT", tmp_path / "kept")
    return tmp_path


@pytest.mark.slow  # the doctor's end-of-run fits (memorization, capacity) take most of half a minute here
def test_a_kept_run_is_what_the_run_measured_and_renders_as_the_run_printed(tiny_example):
    kept, printed = doc_examples.record_here(tiny_example / "examples" / "tiny.py")
    assert kept["observed"]["steps"] == 30 and not kept["own_loop"] and kept["recipe"].endswith("tiny.py")
    assert printed.startswith("verdict: ") and printed == doc_examples.render(json.loads(json.dumps(kept)))
    assert kept["command"] == f"python -m doctor {tiny_example / 'examples' / 'tiny.py'}"
    assert kept["device_study"] == machine.device_study_line()


@pytest.mark.slow
def test_recording_runs_each_example_in_a_fresh_process_and_keeps_it(tiny_example, capsys):
    assert doc_examples.record(["tiny"]) == [tiny_example / "kept" / "tiny.observed.json"]
    kept = json.loads((tiny_example / "kept" / "tiny.observed.json").read_text())
    verdict = doc_examples.render(kept).splitlines()[0]
    assert capsys.readouterr().out == f"recorded {tiny_example / 'kept' / 'tiny.observed.json'}: {verdict}\n"


def test_a_block_in_a_hand_written_page_is_made_again_and_the_rest_left_alone(tmp_path):
    before, after = "# A page\n\nHand-written.\n\n", "\nStill hand-written.\n"
    marked = "<!-- generated: doctor-reports healthy_cnn -->\n{}<!-- end generated -->\n"
    (tmp_path / "page.md").write_text(before + marked.format("typed by hand\n") + after)
    assert pages.stale(tmp_path) == [*docs.PAGES, "page.md"]
    pages.write(tmp_path)
    body = doc_examples.block(["healthy_cnn"])
    assert (tmp_path / "page.md").read_text() == before + marked.format(body) + after
    assert body.startswith("Recorded at commit ") and "\n\n```\n$ python -m doctor examples/healthy_cnn.py\n" in body
    assert pages.stale(tmp_path) == []


@pytest.mark.parametrize(
    ("page", "error", "message"),
    [
        (
            "<!-- generated: doctor-reports absent -->\nx\n<!-- end generated -->\n",
            FileNotFoundError,
            "no kept run .*absent.observed.json for the example 'absent': `python -m doctor.pages --record-examples"
            " absent`",
        ),
        (
            "<!-- generated: tables -->\nx\n<!-- end generated -->\n",
            ValueError,
            "page.md: a generated block of unknown kind 'tables' \\(known: doctor-reports\\)",
        ),
        ("<!-- generated: doctor-reports -->\nx\n<!-- end generated -->\n", ValueError, "block names no example"),
    ],
)
def test_a_block_that_cannot_be_made_is_refused_naming_the_page_or_the_command(page, error, message, tiny_example):
    (tiny_example / "page.md").write_text(page)
    with pytest.raises(error, match=message):
        pages.stale(tiny_example)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"recipe": "examples/gone.py"}, FileNotFoundError, "examples/gone.py has no recipe there any more"),
        ({"format": 2}, ValueError, "a kept run of format 2; this doctor reads format 1"),
    ],
)
def test_a_kept_run_that_cannot_be_rendered_as_it_ran_is_refused(change, error, message):
    kept = json.loads(doc_examples.kept_path("healthy_cnn").read_text())
    with pytest.raises(error, match=message):
        doc_examples.render({**kept, **change})


def test_the_command_line_says_what_is_missing_in_one_line_and_exits_2(tiny_example, capsys):
    assert main(["--record-examples", "absent"]) == 2
    assert capsys.readouterr().err == (
        f"error: no example recipe {tiny_example / 'examples' / 'absent.py'} to record"
        f" (the examples: {tiny_example / 'examples'})\n"
    )
    assert main(["--check"]) == 2  # the kept runs the committed page shows are not in the moved folder
    assert "error: no kept run" in capsys.readouterr().err


# The quick start's Python (README.md) runs on a records folder, foreign files and all.


def test_the_quick_starts_python_loads_a_records_folder_and_leaves_a_foreign_table_out(tmp_path, monkeypatch):
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Quick start", 1)[1].split("## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", quick_start, re.DOTALL)[1]
    assert "load_records(" in code and "read_parquet(" not in code
    folder = tmp_path / "runs" / "default"
    for i, fault in enumerate(["healthy", "healthy", "lr_too_high"]):
        write_record(
            {
                **empty_record(),
                "cell_id": f"c{i}",
                "status": "ok",
                "schema_id": SCHEMA_ID,
                "fault": fault,
                "dataset": "digits",
                "final_val_acc": 0.5 + 0.1 * i,
            },
            folder,
        )
    pq.write_table(pa.table({"x": [1, 2]}), folder / "mine.parquet")  # a user's own table dropped in the folder
    monkeypatch.chdir(tmp_path)
    scope = {}
    with pytest.warns(UserWarning, match=r"skipped files in runs/default: 1 not a record \(mine.parquet\)"):
        exec(code, scope)  # the README's own lines, as a user runs them
    assert len(scope["df"]) == 3
    assert scope["df"].groupby(["fault", "dataset"]).final_val_acc.mean().round(2).to_dict() == {
        ("healthy", "digits"): 0.55,
        ("lr_too_high", "digits"): 0.7,
    }


@pytest.mark.parametrize(
    ("term", "anchor"),
    [("quick reference", "quick-references"), ("zoo", "zoo"), ("step budget", "step-budget"), ("census", "census")],
)
def test_the_readme_links_each_term_to_its_definition_where_it_first_uses_it(term, anchor):
    readme = " ".join((ROOT / "README.md").read_text().split())  # a link may be wrapped over two lines
    first = readme.lower().find(term)
    if first < 0:
        pytest.skip(f"README.md does not use {term!r}")
    link = re.match(r"\[([^\]]*)\]\(([^)]*)\)", readme[first - 1 :])
    assert link and link[2] == f"docs/terms.md#{anchor}", (
        f"README.md first says {term!r} without linking its definition"
    )
    heading = anchor.replace("-", " ").capitalize()  # the heading GitHub makes the anchor from
    assert f"\n## {heading}\n" in (ROOT / "docs" / "terms.md").read_text()


def test_the_readme_is_read_in_two_minutes():
    # Issue 52: what it is, the two commands, the doctor's three lines, a small table, where to read on; the history
    # of past changes and the caveats live in docs/results.md.
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120
