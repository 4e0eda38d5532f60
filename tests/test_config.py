"""The config groups: every fault, dataset and device file composes and says what it is."""

import pytest
import torch
from conftest import CONF, DATASETS, DEVICES, FAULTS, LM, LM_FAULTS, LM_SIZES, SIZES, ZOO, make_config
from hydra.utils import instantiate
from omegaconf import OmegaConf

from analysis.rules import GRID_FACTS, HEALTHY, RULES, UNEXPLAINED
from harness.checks import KNOBS, declared_ranges
from harness.recipe import leaves, planted, recipe_yaml


def planted_in(fault: str, *overrides: str):
    """The config of a cell planting `fault`: a language-model fault (conf/fault/lm/) in its own family."""
    return make_config(*(LM if fault.startswith("lm/") else []), f"fault={fault}", *overrides)


def test_the_grid_axes_are_all_there():
    # Every verdict the grid can give (a rule's, a fact's it judges, or `unexplained_failure` where the outcome gate
    # is open and nothing names why) is planted by some fault file, and the fault files plant nothing else.
    planted_verdicts = {verdict for fault in FAULTS + LM_FAULTS for verdict in planted_in(fault).fault.values()}
    assert planted_verdicts == {rule.verdict for rule in [*RULES, *GRID_FACTS]} | {HEALTHY, UNEXPLAINED}
    assert DATASETS == ["digits", "sequence", "stdlib_text", "synthetic"]
    assert DEVICES == ["cpu", "cuda"]


@pytest.mark.parametrize("fault", FAULTS + LM_FAULTS)
def test_fault_file_names_itself_and_its_verdict(fault):
    cfg = planted_in(fault)
    name = fault.rsplit("/", 1)[-1]
    assert list(cfg.fault) == [name]
    assert isinstance(cfg.fault[name], str) and cfg.fault[name]
    assert planted(cfg) == ([name], [cfg.fault[name]])
    assert not OmegaConf.missing_keys(cfg)


def test_two_faults_compose_into_one_cell_with_both_verdicts():
    cfg = make_config("fault=[lr_too_high,starved_loader]")
    assert planted(cfg) == (["lr_too_high", "starved_loader"], ["lr_too_high", "starved_loader"])
    assert cfg.loop.lr_scale == 100 and cfg.data.batch_latency == 3  # both changes are in the recipe


@pytest.mark.parametrize("fault", [f for f in FAULTS + LM_FAULTS if f != "healthy"])
def test_a_fault_is_an_override_of_the_healthy_recipe(fault):
    def recipe(name):
        values = OmegaConf.to_container(
            planted_in(name)
            if name == fault
            else make_config(*(LM if fault.startswith("lm/") else []), f"fault={name}"),
            resolve=True,
        )
        values.pop("fault")
        return values

    assert recipe(fault) != recipe("healthy"), f"{fault} changes nothing in the recipe"


@pytest.mark.parametrize("fault", FAULTS + LM_FAULTS)
def test_fault_file_documents_mechanism_and_signature(fault):
    comments = [line for line in (CONF / "fault" / f"{fault}.yaml").read_text().splitlines() if line.startswith("#")]
    assert comments[0] == "# @package _global_"
    assert len(" ".join(comments[1:])) > 60, "say what is broken and which measurement should reveal it"


def _changes(fault: str) -> dict:
    """The keys of the recipe a fault file changes, with their new values."""

    def flat(values, prefix=""):
        out = {}
        for key, value in values.items():
            out.update(flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value})
        return out

    family = LM if fault.startswith("lm/") else []
    healthy = flat(OmegaConf.to_container(make_config(*family, "fault=healthy"), resolve=True))
    values = flat(OmegaConf.to_container(make_config(*family, f"fault={fault}"), resolve=True))
    return {k: v for k, v in values.items() if not k.startswith(("fault.", "severity")) and healthy.get(k) != v}


def _set_in_file(fault: str) -> set[str]:
    """The recipe keys a fault file sets (dotted), whatever their values."""

    def keys(values, prefix=""):
        for key, value in values.items():
            yield from keys(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"]

    values = OmegaConf.to_container(OmegaConf.load(CONF / "fault" / f"{fault}.yaml"))
    return {k for k in keys(values) if not k.startswith(("fault.", "severity"))}


@pytest.mark.slow
@pytest.mark.parametrize("size", SIZES + LM_SIZES)
def test_every_other_size_is_the_same_fault_with_another_value_of_the_same_knobs(size):
    *folder, severity, name = size.split("/")
    fault = "/".join([*folder, name])  # lm/mild/x is a size of lm/x
    cfg = planted_in(size)
    assert cfg.severity == severity and list(cfg.fault) == [f"{name}_{severity}"]
    assert cfg.fault[f"{name}_{severity}"] == planted_in(fault).fault[name], "same verdict"
    planted, other = _changes(fault), _changes(size)
    # The size's file sets every knob the fault's changes (one may set it to the recipe's own value: the mild
    # post-LN fault is post-LN at the recipe's 2 layers), and the recipe it makes differs from the fault's.
    assert _set_in_file(size) >= set(planted) - {"model.hidden"} and other != planted, "same knobs, other values"
    comments = [line for line in (CONF / "fault" / f"{size}.yaml").read_text().splitlines() if line.startswith("#")]
    assert comments[0] == "# @package _global_" and f"conf/fault/{fault}.yaml" in comments[1]


def test_the_planted_size_records_as_planted_and_a_control_as_none():
    from harness.recipe import severity

    assert severity(make_config("fault=lr_too_high")) == "planted"
    assert severity(make_config("fault=healthy_dropout")) == "none"
    assert severity(make_config("fault=extreme/lr_too_high")) == "extreme"


@pytest.mark.parametrize("dataset", [d for d in DATASETS + ZOO if "text" not in make_config(f"dataset={d}").dataset])
def test_dataset_loader_returns_features_and_labels(dataset):
    cfg = make_config(f"dataset={dataset}")
    features, labels = instantiate(cfg.dataset.loader)
    assert features.ndim == 2 and len(features) == len(labels) >= 200
    assert cfg.dataset.name == dataset.replace("zoo/", "zoo_")


@pytest.mark.parametrize("device", DEVICES)
def test_device_file_names_a_torch_device(device):
    assert torch.device(make_config(f"device={device}").device.name).type == device


def test_run_settings_do_not_change_the_cell_id():
    a = make_config("run.records=/tmp/a", "run.threads=2", "run.force=true")
    b = make_config()
    assert recipe_yaml(a) == recipe_yaml(b)
    assert recipe_yaml(make_config("seed=1")) != recipe_yaml(b)


@pytest.mark.parametrize("sweep", sorted(p.stem for p in (CONF / "sweep").glob("*.yaml")))
def test_named_grids_compose(sweep):
    cfg = make_config(f"+sweep={sweep}")
    assert set(cfg.run) >= {"records", "threads", "time_limit_s", "force"}


def numeric_or_boolean(value) -> bool:
    return isinstance(value, bool | int | float) or (
        isinstance(value, list) and value and isinstance(value[0], int | float)
    )


@pytest.mark.parametrize("path", ["config.yaml", *(f"model/{p.name}" for p in sorted((CONF / "model").glob("*.yaml")))])
def test_every_numeric_or_boolean_knob_declares_its_range_where_it_is_declared(path):
    # The trap: a knob added without a range accepted any value, so a typo ran the whole grid with nonsense.
    values = OmegaConf.to_container(OmegaConf.load(CONF / path))
    prefix = "model." if path.startswith("model/") else ""
    skipped = {"defaults", "hydra", "fault", "severity"}
    knobs = {f"{prefix}{k}": v for k, v in leaves(values).items() if k.split(".")[0] not in skipped}
    unranged = sorted(key for key, value in knobs.items() if numeric_or_boolean(value) and key not in KNOBS)
    assert unranged == [], f"write each one's range first in its comment, e.g. `# {{integer >= 1}} ...` ({path})"
    for key, value in knobs.items():  # and each default is in its own range
        if key in KNOBS and value is not None:
            assert KNOBS[key][0](value), f"{key}={value!r} is not {KNOBS[key][1]}"


def test_a_range_of_no_known_form_is_refused_naming_the_forms(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("loop:\n  steps: 600  # {a positive integer} the run's length\n")
    with pytest.raises(ValueError, match=r"config.yaml:2 loop.steps: the range \{a positive integer\} is of no known"):
        declared_ranges(config)
    config.write_text("data:\n  order: shuffled  # {one of ORDERS} how\n  batch: 4  # {integer >= 1}\n")
    with pytest.raises(ValueError, match=r"one of: .*BATCH_ORDERS"):
        declared_ranges(config)
    config.write_text(
        "data:\n  batch: 4  # {integer >= 1} examples\n  # {in (0, 1)} a comment line\nseed: 1  # {seed}\n"
    )
    assert list(declared_ranges(config)) == ["data.batch", "seed"]
