"""A cell's id hashes its recipe's difference from the healthy defaults (harness/recipe.py).

The trap it closes: a knob added at its healthy default used to give every cell a new id, so the old records and the
new sat side by side as two cells. Here the knob is added in a copy of conf/ and the ids are compared.
"""

import shutil

import pytest
from conftest import CONF, make_config
from hydra import compose, initialize_config_dir

import harness.recipe as recipe_module
from harness.recipe import cell_id, healthy_defaults, option_of, recipe, recipe_changes

CELLS = [
    (),
    ("fault=lr_too_high",),
    ("fault=lr_too_high", "dataset=zoo/blobs3", "optimizer=sgd_momentum", "seed=3"),
    ("fault=dead_relu", "model=cnn"),
    ("fault=[lr_too_high,label_noise]",),
    ("+sweep=lm", "fault=lm/no_causal_mask", "model=causal_lm", "dataset=stdlib_text"),
]


def composed_in(conf, overrides):
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize("overrides", CELLS, ids=lambda o: " ".join(o) or "healthy")
def test_the_defaults_are_hydra_s_own_composition_of_the_same_group_options(overrides):
    cfg = make_config(*overrides)
    chosen, _ = recipe_changes(cfg)
    assert set(chosen) == set(recipe_module.GROUPS)  # every node of conf/'s groups found its option
    healthy = make_config(*(f"{group}={option}" for group, option in chosen.items()))
    assert healthy_defaults(tuple(sorted(chosen.items()))) == recipe(healthy)


def test_the_difference_holds_what_the_fault_the_sweep_and_the_command_line_changed():
    chosen, changes = recipe_changes(make_config("fault=lr_too_high", "seed=3", "optimizer=sgd"))
    assert chosen["optimizer"] == "sgd"  # an option without a name is found by its values
    assert changes == {
        "fault.healthy": "<absent>",
        "fault.lr_too_high": "lr_too_high",
        "loop.lr_scale": 100.0,
        "seed": 3,
    }
    assert recipe_changes(make_config())[1] == {}


def test_ids_are_distinct_across_recipes_and_the_same_for_the_same_recipe():
    ids = [cell_id(make_config(*overrides)) for overrides in CELLS]
    assert len(set(ids)) == len(ids)
    assert cell_id(make_config("fault=lr_too_high")) == ids[1]
    # The same changes from two different group options are two recipes: the options are hashed too.
    assert cell_id(make_config("optimizer=sgd")) != cell_id(make_config("optimizer=rmsprop"))


def test_a_node_of_an_option_outside_conf_is_compared_with_the_group_s_default():
    assert option_of("dataset", {"name": "my_own_data", "loader": {}}) is None
    cfg = make_config("dataset.name=my_own_data")
    chosen, changes = recipe_changes(cfg)
    assert "dataset" not in chosen and changes == {"dataset.name": "my_own_data"}


def test_a_knob_added_at_its_healthy_default_re_ids_no_cell(tmp_path, monkeypatch):
    before = {overrides: cell_id(make_config(*overrides)) for overrides in CELLS}
    conf = tmp_path / "conf"
    shutil.copytree(CONF, conf)
    config = (conf / "config.yaml").read_text()
    (conf / "config.yaml").write_text(config.replace("  lr_scale: 1.0", "  lr_scale: 1.0\n  throwaway_knob: 0.0", 1))
    mlp = (conf / "model" / "mlp.yaml").read_text()
    (conf / "model" / "mlp.yaml").write_text(mlp + "throwaway_width: null\n")
    monkeypatch.setattr(recipe_module, "CONF", conf)
    recipe_module._options.cache_clear()
    recipe_module.healthy_defaults.cache_clear()
    try:
        for overrides, before_id in before.items():
            cfg = composed_in(conf, overrides)
            assert cfg.loop.throwaway_knob == 0.0
            assert cell_id(cfg) == before_id, overrides
        # The knob set away from its default is a change, and a new id.
        moved = composed_in(conf, ("fault=lr_too_high", "loop.throwaway_knob=1.0"))
        assert cell_id(moved) != before[("fault=lr_too_high",)]
    finally:
        recipe_module._options.cache_clear()
        recipe_module.healthy_defaults.cache_clear()
