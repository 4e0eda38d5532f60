"""Checks a command line before Hydra sees it, so that bad input gets one line naming the valid choices.

Hydra's own messages for an unknown option or a malformed override span several lines and end in a hint
about HYDRA_FULL_ERROR; a user at 2 a.m. needs the one line that says what to type instead. The check
parses the overrides with Hydra's own parser, compares every option of the grid's groups with the files
that exist (conf/ and any --config-dir), and composes each chosen option once.
"""

import functools
import inspect
from difflib import get_close_matches
from fnmatch import fnmatch
from pathlib import Path
from typing import NamedTuple

import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.utils import _locate  # what instantiate resolves `_target_` with (get_object logs a miss)
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Glob, RangeSweep
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.checks import KNOBS, cell_problems, knob_problems, n_jobs_problem
from harness.recipe import CONF, planted
from harness.records import check_writable

GROUPS = ("fault", "dataset", "device", "model", "optimizer", "sweep")
# Groups whose files may set keys outside their own node (`# @package _global_`): every such key must be one the
# recipe already has, or a misspelling would run silently (a fault's cell healthy under the fault's label).
FILE_GROUPS = ("fault", "dataset", "sweep")
RECIPE_GROUPS = ("dataset", "device", "model", "optimizer")  # the groups of conf/config.yaml's defaults, fault aside
_VALUED_FLAGS = {
    "-cd",
    "--config-dir",
    "-cp",
    "--config-path",
    "-cn",
    "--config-name",
    "-c",
    "--cfg",
    "-p",
    "--package",
}
_INSPECTING = {"-c", "--cfg", "--info", "-i", "--help", "-h", "--hydra-help", "--shell-completion", "-sc"}


def group_options(group: str, config_dirs: list[Path], nested: bool = True) -> list[str]:
    """Names of the options of a config group: its YAML files in conf/ and in every extra config dir.

    Files in subfolders are options too, named by their path (`fault=mild/lr_too_high`, `dataset=zoo/moons2`);
    `nested=False` lists the top level only, which is what `glob(*)` chooses from.
    """
    pattern = "**/*.yaml" if nested else "*.yaml"
    names = {
        p.relative_to(d / group).with_suffix("").as_posix()
        for d in [CONF, *config_dirs]
        for p in (d / group).glob(pattern)
    }
    return sorted(names, key=lambda name: ("/" in name, name))  # the top level first, then the subfolders


def split_arguments(argv: list[str]) -> tuple[list[str], list[str], list[Path], bool]:
    """Split a command line into Hydra's flags (with their values) and the overrides.

    Also returns the extra config dirs, and whether a flag only inspects (--cfg, --info, --help).
    """
    flags, overrides, config_dirs, inspecting = [], [], [], False
    args = iter(argv)
    for arg in args:
        flag, _, attached = arg.partition("=")
        if flag in _INSPECTING:
            inspecting = True
        if flag in _VALUED_FLAGS:
            value = attached or next(args, "")
            flags += [flag, value]
            if flag in ("-cd", "--config-dir"):
                config_dirs.append(Path(value).resolve())
        elif arg.startswith("-"):
            flags.append(arg)
        else:
            overrides.append(arg)
    return flags, overrides, config_dirs, inspecting


def _one_line(error: Exception) -> str:
    noise = ("HYDRA_FULL_ERROR", "To append to your config", "full_key:", "object_type=", "reference_type=")
    text = f"{error}\n{error.__cause__}" if error.__cause__ else str(error)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join([line for line in lines if not line.startswith(noise) and "HYDRA_FULL_ERROR" not in line][:3])


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML syntax error as one line: `file:line:column: what is wrong`."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    what = getattr(error, "problem", None) or str(error).splitlines()[0]
    if mark is None:
        return f"malformed YAML: {what}"
    name = _shown(Path(mark.name))
    return f"malformed YAML in {name}:{mark.line + 1}:{mark.column + 1}: {what}"


def choices(value: str) -> list[str]:
    """The options of one group choice: `a` or `[a,b]` (two faults at once)."""
    return [v.strip() for v in value.strip().strip("[]").split(",") if v.strip()]


def unknown_option(group: str, values: list[str], config_dirs: list[Path]) -> str | None:
    """`unknown <group> <name>; valid choices: ...` for the first of `values` that is no option of `group`.

    `fault=[a,b]` chooses two options at once: each one must exist. Not a config group: None.
    """
    if group not in GROUPS:
        return None
    valid = group_options(group, config_dirs)
    unknown = [o for v in values for o in choices(v) if o not in valid]
    return f"unknown {group} {unknown[0]!r}; valid choices: {', '.join(valid)}" if unknown else None


class AddedKey(NamedTuple):
    """A key a composition has that its base lacks: where, the nearest key the base has, and who lacks it."""

    path: str
    near: str | None
    lacked_by: str | None = None  # None: the recipe; else the callable (`_target_`) that takes no such argument


def added_keys(base: DictConfig | dict, composed: DictConfig | dict, prefix: str = "") -> list[AddedKey]:
    """Keys `composed` has that `base` lacks (the planted `fault` node aside), each with the nearest key base has.

    A fault file is a set of overrides of the recipe: a key the recipe does not have is a misspelling (the cell
    would run healthy under the fault's label) unless the recipe declares it, so `fault=x` composed must have
    exactly the keys of the recipe composed without it. A node with a `_target_` holds that callable's arguments,
    and a fault may set one the recipe leaves at its default: `optimizer: {_target_: torch.optim.SGD, momentum:
    0.9}` over Adam, or `momentum` over plain SGD. Those are found by name in the callable's signature.
    """
    found = []
    target = composed.get("_target_")
    switched = isinstance(target, str) and target != base.get("_target_")
    for key in composed:
        path = f"{prefix}{key}"
        if path == "fault":
            continue  # the planted condition: the one node a fault file adds by design
        if key not in base:
            taken = (target_arguments(target) or frozenset()) if isinstance(target, str) else frozenset()
            if str(key) in taken:
                continue
            near = _nearest(str(key), taken if switched else base, prefix)
            found.append(AddedKey(path, near, target if switched else None))
        elif isinstance(composed[key], DictConfig | dict) and isinstance(base[key], DictConfig | dict):
            found += added_keys(base[key], composed[key], f"{path}.")
    return found


def _nearest(key: str, keys, prefix: str) -> str | None:
    near = get_close_matches(key, [str(k) for k in keys], n=1, cutoff=0.6)
    return f"{prefix}{near[0]}" if near else None


@functools.cache  # a sweep checks the same fault against each choice of the other groups
def target_arguments(target: str) -> frozenset[str] | None:
    """The arguments the callable `target` names, with Hydra's own `_..._` keys; None if it cannot be imported.

    This imports the target's module (torch, for an optimizer: about two seconds), which happens only for a file
    that sets a key its recipe lacks under a `_target_`. Arguments taken only through `**kwargs` are not known
    by name, so a key that reaches the callable only that way still has to be one the recipe has.
    """
    try:
        parameters = inspect.signature(_locate(target)).parameters.values()
    except Exception:  # noqa: BLE001 - not importable, or a callable inspect cannot read
        return None
    named = {
        p.name for p in parameters if p.kind not in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    }
    return frozenset(named | {"_target_", "_partial_", "_args_", "_recursive_", "_convert_"})


def unknown_key_message(
    source: str, base: DictConfig, composed: DictConfig, own: str = "fault", file: Path | str | None = None
) -> str | None:
    """One line naming the first key `source` (in `file`) sets that the recipe lacks, with the nearest valid key.

    `own` is the node the option's group fills (a dataset file's `dataset:`), where any key is the option's own.
    """
    added = [found for found in added_keys(base, composed) if found.path.split(".")[0] not in (own, "hydra")]
    if not added:
        return None
    key, near, lacked_by = added[0]
    where = f" ({_shown(Path(file))})" if file else ""
    if lacked_by:
        missing = target_arguments(lacked_by) is None
        hint = f"; did you mean {near!r}?" if near else "; it cannot be imported" if missing else "; see its arguments"
        return f"{source}{where} sets {key!r}, which {lacked_by} does not take{hint}"
    hint = f"; did you mean {near!r}?" if near else "; the recipe has no such key (declare it in conf/config.yaml)"
    return f"{source}{where} sets {key!r}, which the recipe does not have{hint}"


def same_group_choices(choices_made: DictConfig | dict, overrides: list[str]) -> list[str]:
    """The recipe's group choices a composition made (`hydra.runtime.choices`), as overrides to compose with again.

    A fault file may choose another option itself (`defaults: [override /optimizer: sgd_momentum]`): the recipe
    its keys are checked against must be composed with that choice, or the option's own keys (`momentum`) would
    read as misspellings. Groups the overrides already set are left to them.
    """
    given = {_group(o) for o in overrides}
    return [
        f"{group}={choices_made[group]}"
        for group in RECIPE_GROUPS
        if choices_made.get(group) is not None and group not in given
    ]


def option_file(option: str, config_dirs: list[Path]) -> Path | None:
    """The YAML file of a group option such as `fault=typo` or `+sweep=smoke`; None for two at once or none found."""
    group, _, value = option.lstrip("+~").partition("=")
    names = choices(value)
    if len(names) != 1:
        return None
    # Hydra looks in the primary config folder first, then in each --config-dir.
    found = [d / group / f"{names[0]}.yaml" for d in [CONF, *config_dirs]]
    return next((path for path in found if path.is_file()), None)


def _shown(path: Path) -> Path:
    """A path as the user would type it: relative to the working folder when it lies below it."""
    return path.relative_to(Path.cwd()) if path.is_absolute() and path.is_relative_to(Path.cwd()) else path


def check_command_line(argv: list[str]) -> str | None:
    """Return a one-line description of what is wrong with these Hydra arguments, or None if nothing is."""
    flags, overrides, config_dirs, inspecting = split_arguments(argv)
    if inspecting:
        return None
    other_primary = any(f in flags for f in ("-cn", "--config-name", "-cp", "--config-path"))
    parser = OverridesParser.create()
    chosen: dict[str, list[str]] = {}
    fixed: list[str] = []
    not_a_grid = None  # what to say if a value list (`fault=a,b`) turns out to be given to a single cell
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException as error:
            return f"malformed override {text!r}: {_one_line(error)}"
        if override.is_sweep_override():
            not_a_grid = not_a_grid or not_a_grid_line(text, override)
        values = _values(override, config_dirs)
        if values is None:
            continue  # a range is integers
        problem = unknown_option(override.key_or_group, values, config_dirs)
        if problem:
            return problem
        if len(values) == 1 and not override.is_sweep_override():
            fixed.append(text)
        else:
            chosen[text] = [text.split("=", 1)[0] + "=" + v for v in values]

    if other_primary:
        return None  # another primary config: Hydra checks it itself
    searchpath = searchpath_override(config_dirs)
    sweeping = any(f in flags for f in ("-m", "--multirun")) or any(_group(o) == "sweep" for o in fixed)
    try:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            return _check_compositions(searchpath, fixed, chosen, config_dirs, sweeping, not_a_grid)
    except yaml.YAMLError as error:  # Hydra lets a YAML syntax error through as a 40-line traceback
        return yaml_problem(error)


def _values(override, config_dirs: list[Path]) -> list[str] | None:
    """The values an override gives its key or group, a glob's options included; None for a range (integers)."""
    group = override.key_or_group
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    if isinstance(override.value(), Glob) and group in GROUPS:
        # Every option a glob finds exists, but each one is composed below like a named one.
        glob = override.value()
        return [
            option
            for option in group_options(group, config_dirs, nested=False)
            if any(fnmatch(option, i) for i in glob.include) and not any(fnmatch(option, e) for e in glob.exclude)
        ]
    if isinstance(override.value(), Glob | RangeSweep):
        return None
    return list(override.sweep_string_iterator())


def not_a_grid_line(text: str, override) -> str:
    """What to do instead of giving a value list (`fault=a,b`) to a command that runs one cell.

    Hydra's own answer is "Ambiguous value" in five lines and exit 1; here grids run as `+sweep=NAME` (a file of
    conf/sweep/, which sets Hydra's multirun mode; `make sweep` adds it) or with `-m`, and two faults planted in
    one cell are written as a list.
    """
    key = override.key_or_group
    listed = isinstance(override.value(), ChoiceSweep)  # a glob or a range has no list to write instead
    if key == "fault" and listed:
        instead = f"; fault=[{','.join(override.sweep_string_iterator())}] plants them together in one cell"
    elif listed and KNOBS.get(key, (None, ""))[1].startswith("a list"):  # a knob whose value is a list
        instead = f"; a list value is written {key}=[{','.join(override.sweep_string_iterator())}]"
    else:
        instead = ""
    return (
        f"{text} lists values to sweep, but this command runs one cell: add -m to run one cell per value, or "
        f'+sweep=NAME to run them as that grid\'s {key} axis (make sweep ARGS="{text}"){instead}'
    )


def searchpath_override(config_dirs: list[Path]) -> list[str]:
    """The override that adds the extra config dirs to Hydra's search path when composing (none: no override)."""
    return [f"hydra.searchpath=[{','.join('file://' + str(d) for d in config_dirs)}]"] if config_dirs else []


def _group(override: str) -> str:
    """The key or group of an override line: `+sweep=smoke` -> sweep, `~fault` -> fault."""
    return override.lstrip("+~").split("=")[0]


def _check_compositions(
    searchpath: list[str],
    fixed: list[str],
    chosen: dict[str, list[str]],
    config_dirs: list[Path],
    sweeping: bool,
    not_a_grid: str | None,
) -> str | None:
    """Compose each chosen group option once (the others at their first choice) and check what comes out.

    That catches unknown keys, wrong types, YAML errors, fault files that do not name themselves, keys a fault,
    dataset or sweep file sets that the recipe lacks, knobs out of range, a value list given to a single cell
    (`not_a_grid` says what to do instead) and a sweep's worker count joblib refuses. A single cell's dataset is
    loaded and checked here too, and its records folder tried (Hydra creates its run folder inside it before the
    task starts, and reports a folder it cannot create with a traceback); a sweep's datasets and folders are
    checked by `harness.sweep.run_cells`, for the cells it has left to run.
    """
    firsts = [values[0] for values in chosen.values()]
    trials = [firsts] + [
        [*firsts[:i], v, *firsts[i + 1 :]] for i, values in enumerate(chosen.values()) for v in values[1:]
    ]
    options_checked: set[str] = set()
    for trial in trials:
        overrides = [*fixed, *trial]
        try:
            cfg = compose("config", overrides=[*searchpath, *overrides], return_hydra_config=True)
        except (HydraException, OmegaConfBaseException) as error:
            return f"bad configuration ({' '.join(trial + fixed) or 'defaults'}): {_one_line(error)}"
        hydra_node = cfg.hydra
        cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])
        one_cell = not sweeping and hydra_node.mode != RunMode.MULTIRUN
        problem = (
            (not_a_grid if one_cell else None)
            or ("n_jobs" in hydra_node.sweeper and n_jobs_problem(hydra_node.sweeper.n_jobs))
            or _recipe_problem(cfg, overrides)
            or _files_problem(searchpath, overrides, options_checked, cfg, hydra_node, config_dirs)
        )
        if problem:
            return problem
        problems = cell_problems([cfg]) if one_cell else knob_problems(cfg)
        if problems:
            return "\n".join(problems)
        reason = check_writable(cfg.run.records) if one_cell else None
        if reason:
            return f"records folder {cfg.run.records} cannot be written: {reason}"
    return None


def _recipe_problem(cfg: DictConfig, overrides: list[str]) -> str | None:
    """Keys left unset, a fault that does not name itself, a seed numpy cannot take: checked before the rest."""
    chosen = [o for o in overrides if _group(o) in GROUPS]
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        return f"{' '.join(chosen) or 'the recipe'} leaves {', '.join(missing)} unset"
    try:
        planted(cfg)
    except ValueError as error:
        return f"{' '.join(chosen) or 'the recipe'}: {error}"
    valid_seed, what = KNOBS["seed"]  # first: a single cell's dataset check below splits with this seed
    return None if valid_seed(cfg.seed) else f"seed={cfg.seed!r} is out of range: it must be {what}"


def _files_problem(
    searchpath: list[str],
    overrides: list[str],
    options_checked: set[str],
    cfg: DictConfig,
    hydra_node: DictConfig,
    config_dirs: list[Path],
) -> str | None:
    """A key a fault, dataset or sweep file sets that the recipe lacks, or a sweep file's grid names (each once).

    The recipe a file is checked against is composed without it but with the group choices it made (a fault file
    that switches the optimizer to `sgd_momentum` is checked against the recipe with `sgd_momentum`).
    """
    for option in [o for o in overrides if _group(o) in FILE_GROUPS and o not in options_checked]:
        options_checked.add(option)
        others = [o for o in overrides if o != option] + (["~fault"] if _group(option) == "fault" else [])
        others += same_group_choices(hydra_node.runtime.choices, overrides)
        base = compose("config", overrides=[*searchpath, *others])
        file = option_file(option, config_dirs)
        problem = unknown_key_message(option, base, cfg, own=_group(option), file=file)
        if problem:
            return problem
        if _group(option) == "sweep":
            problem = sweep_problem(option, hydra_node.sweeper, cfg, config_dirs)
            if problem:
                return problem
    return None


def sweep_problem(option: str, sweeper: DictConfig, cfg: DictConfig, config_dirs: list[Path]) -> str | None:
    """What is wrong with the grid a sweep file lists: an unknown option of a group, or a key the recipe lacks.

    A key given with `+` is declared new and left to Hydra.
    """
    lines = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    lines += [str(line) for variant in (sweeper.get("variants") or []) for line in variant]
    lines += [f"fault={name}" for name in (sweeper.get("pairs") or [])]
    parser = OverridesParser.create()
    for line in lines:
        try:
            override = parser.parse_override(line)
        except HydraException as error:
            return f"{option} lists a malformed override {line!r}: {_one_line(error)}"
        key = override.key_or_group
        if key in GROUPS:
            if isinstance(override.value(), Glob | RangeSweep):
                continue  # a glob finds only options that exist
            values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [str(override.value())]
            problem = unknown_option(key, values, config_dirs)
            if problem:
                return f"{option} lists {problem}"
        elif (
            not override.is_add()
            and not key.startswith("hydra.")
            and OmegaConf.select(cfg, key, default=_NONE) is _NONE
        ):
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            near = get_close_matches(leaf, [str(k) for k in node], n=1) if isinstance(node, DictConfig) else []
            hint = f"; did you mean {(parent + '.' if parent else '') + near[0]!r}?" if near else ""
            return f"{option} sweeps {key!r}, which the recipe does not have{hint}"
    return None


_NONE = object()
