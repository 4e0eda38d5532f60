"""`import doctor` is light: torch and the doctor, not the libraries the grid and its analysis need (issue 33)."""

import json
import subprocess
import sys

import pytest
from conftest import ROOT

# What the grid, its records and its analysis need, and a user's training script should not pay for at import.
NOT_AT_IMPORT = ("pandas", "pyarrow", "omegaconf", "hydra", "sklearn", "scipy", "matplotlib")


def loaded_after(statement: str) -> list[str]:
    """Which of NOT_AT_IMPORT a fresh interpreter has loaded after running `statement`."""
    code = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {NOT_AT_IMPORT!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "statement",
    ["import doctor", "from doctor import Doctor, Report, probe", "import doctor.machine", "import analysis"],
)
def test_importing_the_doctor_loads_none_of_the_analysis_libraries(statement):
    assert loaded_after(statement) == []


def test_the_analysis_package_still_offers_its_two_names_and_says_what_it_has():
    import analysis

    assert analysis.load_records.__module__ == "analysis.load" and analysis.diagnose.__module__ == "analysis.rules"
    with pytest.raises(AttributeError, match="it offers diagnose, load_records"):
        analysis.fit_everything  # noqa: B018


def test_the_schema_reads_its_kinds_from_the_column_declarations():
    from harness.columns import COLUMNS, list_of
    from harness.records import SCHEMA

    assert [field.name for field in SCHEMA][: len(COLUMNS)] == [name for name, _, _ in COLUMNS]
    assert str(SCHEMA.field("grad_missing").type) == "list<item: bool>"
    with pytest.raises(ValueError, match="unknown column kind 'float'; known: float64"):
        list_of("float")
