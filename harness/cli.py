"""Checks a command line before Hydra sees it, so that bad input gets one line naming the valid choices.

Hydra's own messages for an unknown option or a malformed override span several lines and end in a hint
about HYDRA_FULL_ERROR; a user at 2 a.m. needs the one line that says what to type instead. The check
parses the overrides with Hydra's own parser, compares every option of the grid's groups with the files
that exist (conf/ and any --config-dir), and composes each chosen option once.
"""

from difflib import get_close_matches
from fnmatch import fnmatch
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, RangeSweep
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.records import planted

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
GROUPS = ("fault", "dataset", "device", "model", "optimizer", "sweep")
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
        for d in [CONF_DIR, *config_dirs]
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


def added_keys(base: DictConfig | dict, composed: DictConfig | dict, prefix: str = "") -> list[tuple[str, str | None]]:
    """Keys `composed` has that `base` lacks (the planted `fault` node aside), each with the nearest key base has.

    A fault file is a set of overrides of the recipe: a key the recipe does not have is a misspelling (the cell
    would run healthy under the fault's label) unless the recipe declares it, so `fault=x` composed must have
    exactly the keys of the recipe composed without it.
    """
    found = []
    for key in composed:
        path = f"{prefix}{key}"
        if path == "fault":
            continue  # the planted condition: the one node a fault file adds by design
        if key not in base:
            near = get_close_matches(str(key), [str(k) for k in base], n=1, cutoff=0.6)
            found.append((path, f"{prefix}{near[0]}" if near else None))
        elif isinstance(composed[key], DictConfig | dict) and isinstance(base[key], DictConfig | dict):
            found += added_keys(base[key], composed[key], f"{path}.")
    return found


def unknown_key_message(source: str, base: DictConfig, composed: DictConfig) -> str | None:
    """One line naming the first key `source` sets that the recipe lacks, with the nearest valid key."""
    added = added_keys(base, composed)
    if not added:
        return None
    key, near = added[0]
    hint = f"; did you mean {near!r}?" if near else "; the recipe has no such key (declare it in conf/config.yaml)"
    return f"{source} sets {key!r}, which the recipe does not have{hint}"


def check_command_line(argv: list[str]) -> str | None:
    """Return a one-line description of what is wrong with these Hydra arguments, or None if nothing is."""
    flags, overrides, config_dirs, inspecting = split_arguments(argv)
    if inspecting:
        return None
    other_primary = any(f in flags for f in ("-cn", "--config-name", "-cp", "--config-path"))
    parser = OverridesParser.create()
    chosen: dict[str, list[str]] = {}
    fixed: list[str] = []
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException as error:
            return f"malformed override {text!r}: {_one_line(error)}"
        group = override.key_or_group
        if not override.is_sweep_override():
            values = [override.get_value_element_as_str()]
        elif isinstance(override.value(), Glob) and group in GROUPS:
            # Every option a glob finds exists, but each one is composed below like a named one.
            glob = override.value()
            values = [
                option
                for option in group_options(group, config_dirs, nested=False)
                if any(fnmatch(option, i) for i in glob.include) and not any(fnmatch(option, e) for e in glob.exclude)
            ]
        elif isinstance(override.value(), Glob | RangeSweep):
            continue  # a range is integers
        else:
            values = list(override.sweep_string_iterator())
        if group in GROUPS:
            valid = group_options(group, config_dirs)
            # `fault=[a,b]` chooses two options at once: each one must exist.
            options = [o.strip() for v in values for o in v.strip("[]").split(",")]
            unknown = [v for v in options if v not in valid]
            if unknown:
                return f"unknown {group} {unknown[0]!r}; valid choices: {', '.join(valid)}"
        if len(values) == 1 and not override.is_sweep_override():
            fixed.append(text)
        else:
            chosen[text] = [text.split("=", 1)[0] + "=" + v for v in values]

    if other_primary:
        return None  # another primary config: Hydra checks it itself
    # Compose each chosen group option once (the others at their first choice) to catch unknown keys,
    # wrong types, YAML errors and fault files that do not name themselves.
    searchpath = [f"hydra.searchpath=[{','.join('file://' + str(d) for d in config_dirs)}]"] if config_dirs else []
    firsts = [values[0] for values in chosen.values()]
    trials = [firsts] + [
        [*firsts[:i], v, *firsts[i + 1 :]] for i, values in enumerate(chosen.values()) for v in values[1:]
    ]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for trial in trials:
            try:
                cfg = compose("config", overrides=[*searchpath, *fixed, *trial])
            except (HydraException, OmegaConfBaseException) as error:
                return f"bad configuration ({' '.join(trial + fixed) or 'defaults'}): {_one_line(error)}"
            choices = [o for o in [*fixed, *trial] if o.lstrip("+~").split("=")[0] in GROUPS]
            missing = sorted(OmegaConf.missing_keys(cfg))
            if missing:
                return f"{' '.join(choices) or 'the recipe'} leaves {', '.join(missing)} unset"
            try:
                planted(cfg)
            except ValueError as error:
                return f"{' '.join(choices) or 'the recipe'}: {error}"
            if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool):
                return f"seed must be an integer, got {cfg.seed!r}"
            faults = [o for o in [*fixed, *trial] if o.lstrip("+").split("=")[0] == "fault"]
            if faults:  # the recipe without the fault: every key a fault file sets must already be in it
                others = [o for o in [*fixed, *trial] if o not in faults]
                base = compose("config", overrides=[*searchpath, *others, "~fault"])
                problem = unknown_key_message(" ".join(faults), base, cfg)
                if problem:
                    return problem
    return None
