"""The recipe of a cell: what it computes (the config without `run`), the faults planted in it, and its id.

A cell's id is its readable name plus a hash of what its recipe changes from the healthy defaults.

Hashing the whole resolved recipe gave every cell a new id whenever a knob was added, even at its healthy default
(which changes no cell): the old records and the new then sat side by side as two cells, and a grid counted each
healthy seed twice. So the id hashes only the recipe's difference from the defaults of conf/: `conf/config.yaml`
composed with the same group options (dataset, model, optimizer, device) and the healthy fault, as Hydra composes
it. A knob added at its default is in both, and changes no id; any value that differs (a fault's knob, a sweep
file's batch size, `seed=3`) is in the difference, and the group options chosen are hashed too, so two recipes with
one id are one recipe.

A group node names its option by its `name` (conf/dataset/, conf/model/, conf/device/ files declare one); an
option without a name (conf/optimizer/) is the file whose values the node holds. A node of an option not in conf/
(a user's `--config-dir`) is compared with the group's default option, which keeps the id exact, only not stable
under a knob added to that option.
"""

import hashlib
import json
from functools import cache
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

CONF = Path(__file__).resolve().parent.parent / "conf"  # the recipes: conf/config.yaml and its groups
# The config groups whose option makes a node of the recipe; fault files and sweep files are `_global_` overrides,
# whose values are part of the difference.
GROUPS = tuple(sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("fault", "sweep")))
ABSENT = "<absent>"  # a default key the recipe lacks (a value cannot be this: resolved YAML holds no such string)


def recipe(cfg: DictConfig) -> dict:
    """The resolved config without the `run` node: what the cell computes, not how it is run."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("run", None)
    return plain


def recipe_yaml(cfg: DictConfig) -> str:
    """The recipe as YAML, keys sorted: what a record keeps of its config."""
    return OmegaConf.to_yaml(OmegaConf.create(recipe(cfg)), sort_keys=True)


def planted(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """The planted faults (one, or two with `fault=[a,b]`) and the verdicts that should name them, in order."""
    faults = cfg.get("fault") or {}
    if {"name", "diagnosis"} & set(faults):
        raise ValueError("a fault file names itself as `fault: {<name>: <verdict>}`, not with name/diagnosis keys")
    if not faults or not all(isinstance(v, str) and v for v in faults.values()):
        raise ValueError("no fault chosen: a fault file adds `fault: {<name>: <verdict>}`, e.g. {healthy: healthy}")
    return list(faults), list(faults.values())


def severity(cfg: DictConfig) -> str:
    """The size of the planted fault: the fault file's `severity`, else planted (none for a healthy control)."""
    if cfg.get("severity"):
        return str(cfg.severity)
    return "none" if set((cfg.get("fault") or {}).values()) == {"healthy"} else "planted"


def cell_id(cfg: DictConfig) -> str:
    """Readable name plus a hash of the group options and of the recipe's difference from their healthy defaults."""
    chosen, changes = recipe_changes(cfg)
    digest = hashlib.sha1(json.dumps([chosen, changes], sort_keys=True).encode()).hexdigest()[:10]
    return f"{'+'.join(planted(cfg)[0])}-{cfg.dataset.name}-{cfg.device.name}-s{cfg.seed}-{digest}"


def recipe_changes(cfg: DictConfig) -> tuple[dict[str, str], dict[str, Any]]:
    """The group options the recipe was composed from, and each value (by dotted key) that differs from theirs.

    A key of the defaults the recipe lacks is in the difference as ABSENT.
    """
    values = recipe(cfg)
    chosen = {group: option for group in GROUPS if (option := option_of(group, values.get(group)))}
    defaults = leaves(healthy_defaults(tuple(sorted(chosen.items()))))
    mine = leaves(values)
    changes = {key: value for key, value in mine.items() if key not in defaults or defaults[key] != value}
    changes |= {key: ABSENT for key in defaults if key not in mine}
    return chosen, changes


def option_of(group: str, node: Any) -> str | None:
    """The conf/<group>/ option a recipe's node came from: by the name it declares, else by its values."""
    if not isinstance(node, dict):
        return None
    options = _options(group)
    if "name" in node:
        return next((option for option, values in options.items() if values.get("name") == node["name"]), None)
    return next((option for option, values in options.items() if values == node), None)


@cache
def _options(group: str) -> dict[str, dict]:
    """Each option file of a group, by its option name (zoo/blobs3), as written (its own defaults list left out)."""
    found = {}
    for path in sorted((CONF / group).rglob("*.yaml")):
        values = OmegaConf.to_container(OmegaConf.load(path))
        if isinstance(values, dict):
            values.pop("defaults", None)
            found[path.relative_to(CONF / group).with_suffix("").as_posix()] = values
    return found


@cache
def healthy_defaults(chosen: tuple[tuple[str, str], ...]) -> dict:
    """conf/config.yaml composed with these group options and the healthy fault, as Hydra composes it, resolved.

    Hydra's config loader over conf/ alone: the same whether a sweep's own process, a worker or a test asks, and
    whatever a running Hydra application holds (its search path may hold a user's `--config-dir`).
    """
    from hydra._internal.config_loader_impl import ConfigLoaderImpl  # the loader every Hydra application uses
    from hydra._internal.utils import create_config_search_path
    from hydra.types import RunMode

    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(str(CONF)))
    overrides = [f"{group}={option}" for group, option in chosen]
    full = loader.load_configuration("config", overrides=overrides, run_mode=RunMode.RUN)
    with_hydra = OmegaConf.to_container(full, resolve=False)
    with_hydra.pop("hydra", None)
    return recipe(OmegaConf.create(with_hydra))


def leaves(values: dict, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted key: value}; lists are values (a list knob is one knob)."""
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            flat |= leaves(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat
