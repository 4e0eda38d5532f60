"""The generated tables of docs/ match the code and conf/ they are generated from (`make docs` rewrites them)."""

import pytest
from conftest import CONF, FAULTS, SIZES

from analysis import docs
from analysis.__main__ import main


def test_the_generated_pages_are_up_to_date():
    assert docs.stale() == [], "run `make docs`: these pages no longer match the code and conf/"


@pytest.fixture(scope="module")
def faults_page() -> str:
    return docs.faults_page()


@pytest.mark.parametrize("fault", FAULTS + SIZES)
def test_every_fault_file_has_its_row_with_its_verdict_and_knobs(fault, faults_page):
    verdict, knobs, comment = docs._fault_file(CONF / "fault" / f"{fault}.yaml")
    assert f"| `{fault}` | {verdict} | " in faults_page
    assert comment and "@package" not in comment
    assert knobs != "nothing" or fault == "healthy"  # every fault changes some knob of the healthy recipe


def test_a_stale_page_is_named_and_make_docs_rewrites_it(tmp_path):
    assert docs.write(tmp_path) == list(docs.PAGES)  # a new folder: every page written
    (tmp_path / "rules.md").write_text("typed by hand\n")
    assert docs.stale(tmp_path) == ["rules.md"]
    assert docs.write(tmp_path) == ["rules.md"] and docs.stale(tmp_path) == []
    assert main(["docs", "--check"]) == 0  # the committed pages


def test_the_knobs_read_as_the_yaml_writes_them():
    verdict, knobs, _ = docs._fault_file(CONF / "fault" / "amp_clip_before_unscale.yaml")
    assert verdict == "`over_clipped`"
    assert knobs == "`loop.amp: true`, `loop.clip_norm: 1.0`, `loop.clip_before_unscale: true`"
