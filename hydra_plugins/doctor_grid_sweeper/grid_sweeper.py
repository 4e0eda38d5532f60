"""The grid sweeper (`hydra/sweeper=grid`): expands a Hydra grid and runs its cells with `harness.sweep`.

It reads the same `hydra.sweeper.params` and command-line sweeps as Hydra's basic sweeper and composes the
very same config for every job, but it is built for many short cells:
- it composes once per distinct combination of config-group choices (fault, dataset, ...) and applies the
  plain value overrides (seed=3, ...) with Hydra's own override code, instead of a full composition per job
  (about 50 ms each) in the parent and again in a worker;
- it decides in the parent which cells are already done, so a resumed sweep launches only what is missing;
- it runs the cells on joblib workers directly (`n_jobs`, `backend`), with one progress bar and one summary;
- `pairs` plants two faults per cell: every pair of the listed fault options that do not set the same key;
- `variants` crosses the grid with a list of override bundles instead of a full product (the zoo: each
  bundle is one healthy recipe, say `[optimizer=sgd, model.hidden=[32]]`, or one problem with its own recipe);
- a group's `glob` in `params` may reach into its subfolders (`fault: glob([*,mild/*,extreme/*])`, the zoo's
  every fault at every size): Hydra's own glob chooses among a group's top-level files only, so the sweeper lists
  such a glob's options itself, from the same config search path, and a fault file added to any of those folders
  joins the grid without an edit to it.
Hydra's own sweeper and launchers stay available: `hydra/sweeper=basic hydra/launcher=joblib` runs every
cell as a Hydra job (slower per cell, but any Hydra launcher, e.g. a SLURM one, can then be used).

Hydra has no public API for these shortcuts, so the sweeper uses private ones, pinned by `hydra-core==1.3.8` in
pyproject.toml and held to Hydra's public `compose()` for every cell of every conf/sweep/ file by
tests/test_sweeper_composition.py (a Hydra upgrade that changes them fails there, not in a sweep):
- `BasicSweeper.split_arguments` (hydra._internal.core_plugins.basic_sweeper): expands `params`, command-line
  sweeps and each variant into jobs exactly as the basic sweeper does, so a grid means the same under both;
- `ConfigLoaderImpl._apply_overrides_to_config` (hydra._internal.config_loader_impl): applies a job's value
  overrides (seed=3) to a copy of a composed config, the step Hydra itself takes after composing;
- the config loader's `load_sweep_config`: Hydra's own composition of one job, as its sweepers call it;
- the config loader's `repository` (`group_exists`, `load_config`), which is not part of the ConfigLoader
  interface: tells a group choice from a value override, and reads a fault or dataset file's content to merge or
  check it.
"""

import copy
import fnmatch
import itertools
import sys
from dataclasses import dataclass, field
from typing import Any

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf

from harness.checks import ConfigError, knob_problems, n_jobs_problem
from harness.cli import choices, same_group_choices, unknown_key_message
from harness.recipe import leaves


@dataclass
class GridSweeperConf:
    _target_: str = "hydra_plugins.doctor_grid_sweeper.grid_sweeper.GridSweeper"
    params: dict[str, str] = field(default_factory=dict)  # the grid, as for Hydra's basic sweeper
    n_jobs: int = -1  # joblib workers; -1 = one per CPU core
    backend: str = "loky"  # joblib backend: loky (processes here), dask (a Dask cluster), threading
    address: str | None = None  # backend=dask: the scheduler, e.g. tcp://10.0.0.5:8786; unset: a local cluster
    pairs: list[str] = field(default_factory=list)  # fault options to plant two at a time (see `fault_pairs`)
    variants: list[list[str]] = field(default_factory=list)  # override bundles, each crossed with the params grid


ConfigStore.instance().store(group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="training-run-doctor")


class GridSweeper(Sweeper):
    def __init__(
        self,
        params: dict[str, str] | None = None,
        n_jobs: int = -1,
        backend: str = "loky",
        address: str | None = None,
        pairs: list[str] | None = None,
        variants: list[list[str]] | None = None,
    ):
        self.params = dict(params or {})
        self.n_jobs = n_jobs
        self.backend = backend
        self.address = address
        self.pairs = list(pairs or [])
        self.variants = [list(v) for v in variants or []]
        self._fault_files: dict[str, DictConfig | None] = {}  # fault option -> its content (None: not plain)
        self._checked: set[str] = set()  # dataset choices whose keys were checked
        self._files: dict[str, str | None] = {}  # "fault/<name>" -> the file it was loaded from, for messages

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.hydra_context = hydra_context
        self.config = config

    def job_overrides(self, arguments: list[str]) -> list[list[str]]:
        """The overrides of every job of the grid, in order, as Hydra's basic sweeper splits them."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        params = {key: self._nested_glob(parser, key, value) for key, value in self.params.items()}
        if self.pairs:
            params["fault"] = ",".join(f"[{a},{b}]" for a, b in self.fault_pairs())
        lines = [f"{key}={value}" for key, value in params.items()] + list(arguments)
        jobs = []
        for variant in self.variants or [[]]:
            jobs += BasicSweeper.split_arguments(parser.parse_overrides(lines + variant), None)[0]
        return [list(job) for job in jobs]

    def _nested_glob(self, parser: OverridesParser, key: str, value: Any) -> Any:
        """A group's glob whose patterns name subfolders (`mild/*`), as the comma list of the options it finds.

        Each include pattern is matched in its own folder of the group (`mild/*` among conf/fault/mild/'s options,
        through the config loader, so an extra config dir's files count too), the excludes against the whole
        option name; the options come in the patterns' order, each folder's sorted. Any other value is left to
        Hydra. A glob that finds nothing is a ConfigError naming the folders it looked in.
        """
        if not (isinstance(value, str) and value.startswith("glob(") and "/" in value):
            return value
        loader = self.hydra_context.config_loader
        pattern = parser.parse_override(f"{key}={value}").value()
        found: list[str] = []
        for include in pattern.include:
            folder, _, name = include.rpartition("/")
            prefix = f"{folder}/" if folder else ""
            for option in loader.get_group_options(f"{key}/{folder}" if folder else key):
                full = prefix + option
                excluded = any(fnmatch.fnmatch(full, exclude) for exclude in pattern.exclude)
                if fnmatch.fnmatch(option, name) and not excluded and full not in found:
                    found.append(full)
        if not found:
            folders = sorted({f"conf/{key}/{i.rpartition('/')[0]}".rstrip("/") for i in pattern.include})
            raise ConfigError(f"{key}={value} finds no option in {', '.join(folders)}")
        return ",".join(found)

    def compose_cells(self, arguments: list[str]) -> list[DictConfig]:
        """The resolved application config of every job of the grid (without the hydra node), in job order."""
        loader = self.hydra_context.config_loader
        parser = OverridesParser.create(config_loader=loader)
        composed: dict[tuple[str, ...], DictConfig] = {}
        cells, plains = [], []
        for job in self.job_overrides(arguments):
            overrides = parser.parse_overrides(list(job))
            groups = tuple(
                o.input_line
                for o in overrides
                if o.is_hydra_override() or loader.repository.group_exists(o.key_or_group)
            )
            values = [o for o in overrides if o.input_line not in groups]
            if groups not in composed:
                for group in groups:
                    self._check_global_keys(group)
                composed[groups] = self._compose(list(groups), composed)
            cfg = copy.deepcopy(composed[groups])
            ConfigLoaderImpl._apply_overrides_to_config(values, cfg)  # exactly what Hydra does after composing
            plain = OmegaConf.to_container(cfg, resolve=True)
            plains.append(plain)
            cells.append(OmegaConf.create(plain))
        # Knobs out of range, before any cell runs (run_cells then checks the datasets of the cells left to run).
        problems = list(dict.fromkeys(problem for plain in plains for problem in knob_problems(plain)))
        if problems:
            for problem in problems:
                print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)
        return cells

    def _compose(self, groups: list[str], cache: dict) -> DictConfig:
        """The application config for these group choices, as Hydra composes it.

        A Hydra composition costs about 0.2 s, and the zoo has hundreds of distinct (fault, dataset, optimizer)
        choices. The fault group is last in the recipe's defaults list and its files are plain `_global_`
        overrides with no defaults of their own, so composing with a fault is composing without it (`~fault`,
        cached per choice of the other groups) and then merging the fault files in order, exactly as Hydra
        merges them. Anything else (another package, a defaults list) takes Hydra's own full composition.
        """
        loader = self.hydra_context.config_loader
        faults = [g for g in groups if g.split("=", 1)[0] == "fault"]
        contents = [self._fault_file(name) for g in faults for name in choices(g.split("=", 1)[1])]
        if len(faults) != 1 or any(c is None for c in contents):
            full = loader.load_sweep_config(self.config, groups)
            if len(faults) == 1:
                self._check_fault_keys(faults[0], groups, full)
            return _application(full)
        others = (*tuple(g for g in groups if g not in faults), "~fault")
        if others not in cache:
            cache[others] = _application(loader.load_sweep_config(self.config, list(others)))
        application = copy.deepcopy(cache[others])
        OmegaConf.set_struct(application, False)  # a config file may add keys; only overrides may not
        for content in contents:
            application.merge_with(content)
        OmegaConf.set_struct(application, True)
        # A key the recipe lacks is a misspelling: the cell would run healthy under the fault's label.
        names = choices(faults[0].split("=", 1)[1])
        file = self._files.get(f"fault/{names[0]}") if len(names) == 1 else None
        problem = unknown_key_message(faults[0], cache[others], application, file=file)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)  # before any cell runs, like every other bad input
        return application

    def _check_fault_keys(self, fault: str, groups: list[str], full: DictConfig) -> None:
        """Exit 2 if a fault file with a defaults list or its own package sets a key the recipe lacks.

        The recipe it is checked against is composed without it but with the group choices it made: a fault file
        with `defaults: [override /optimizer: sgd_momentum]` sets `optimizer.momentum`, which that option has.
        """
        others = [g for g in groups if g != fault] + ["~fault"] + same_group_choices(full.hydra.runtime.choices, groups)
        base = _application(self.hydra_context.config_loader.load_sweep_config(self.config, others))
        names = choices(fault.split("=", 1)[1])
        file = self._files.get(f"fault/{names[0]}") if len(names) == 1 else None  # `_fault_file` has read it
        problem = unknown_key_message(fault, base, _application(full), file=file)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)  # before any cell runs, like every other bad input

    def _check_global_keys(self, choice: str) -> None:
        """Exit 2 if a `_global_` dataset file of the grid sets a key the recipe lacks (a misspelled knob).

        Fault files are checked against the composed recipe in `_compose`, sweep files and the command line by
        `harness.cli` before the sweep starts; a dataset named only in a sweep file's grid is checked here.
        """
        group, _, name = choice.lstrip("+").partition("=")
        if group != "dataset" or choice in self._checked:
            return
        self._checked.add(choice)
        result = self.hydra_context.config_loader.repository.load_config(config_path=f"dataset/{name}")
        if result is None or result.header.get("package") != "_global_":
            return  # a file in its own package (`dataset:`) may hold any keys: they are the dataset's own
        body = OmegaConf.masked_copy(result.config, [k for k in result.config if k not in ("defaults", "hydra")])
        base = OmegaConf.masked_copy(self.config, [k for k in self.config if k != "hydra"])
        merged = OmegaConf.merge(base, body)
        problem = unknown_key_message(choice, base, merged, own="dataset", file=_file_of(result, f"dataset/{name}"))
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            sys.exit(2)

    def _fault_file(self, name: str) -> DictConfig | None:
        """The content of conf/fault/<name>.yaml if it is a plain `_global_` override, else None.

        Hydra's repository hands a file's defaults list apart from its content (`defaults_list`): a file with one
        (`defaults: [override /optimizer: sgd_momentum]`) chooses options and takes Hydra's full composition.
        """
        cache = self._fault_files
        if name not in cache:
            result = self.hydra_context.config_loader.repository.load_config(config_path=f"fault/{name}")
            plain = (
                result is not None
                and result.header.get("package") == "_global_"
                and not result.defaults_list
                and "hydra" not in result.config
            )
            cache[name] = result.config if plain else None
            self._files[f"fault/{name}"] = _file_of(result, f"fault/{name}")
        return cache[name]

    def _plain(self, overrides: list[str]) -> dict:
        """The application config for these overrides, as plain resolved values."""
        full = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        return OmegaConf.to_container(_application(full), resolve=True)

    def fault_pairs(self) -> list[tuple[str, str]]:
        """Every pair of the `pairs` options that can share a cell: different verdicts, no key set by both.

        Two faults that set the same key (two learning rates, two activations) cannot both be planted: the
        second would silently replace the first. A pair whose model cannot be built is left out too
        (frozen_params freezes hidden layers 0 and 1; model_too_small has only one).
        """
        healthy = leaves(self._plain([]))
        changes, verdicts = {}, {}
        for name in self.pairs:
            values = leaves(self._plain([f"fault={name}"]))
            verdicts[name] = values[f"fault.{name}"]
            changes[name] = {k: v for k, v in values.items() if not k.startswith("fault.") and healthy.get(k) != v}
        return [
            (a, b)
            for a, b in itertools.combinations(self.pairs, 2)
            if verdicts[a] != verdicts[b]
            and not changes[a].keys() & changes[b].keys()
            and _model_builds({**healthy, **changes[a], **changes[b]})
        ]

    def sweep(self, arguments: list[str]) -> Any:
        from harness.sweep import run_cells

        problem = n_jobs_problem(self.n_jobs)  # `python -m harness` says so before this; joblib, with a traceback
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            raise SystemExit(2)
        try:
            counts = run_cells(
                lambda: self.compose_cells(arguments), n_jobs=self.n_jobs, backend=self.backend, address=self.address
            )
        except ConfigError as error:  # a records folder it cannot write, a dataset it cannot split
            # Hydra would print any exception with a traceback and exit 1: bad input is one line each, and status 2.
            for line in error.lines:
                print(f"error: {line}", file=sys.stderr)
            raise SystemExit(2) from None
        if counts["interrupted"]:
            raise SystemExit(130)  # Ctrl-C, as a shell reports it; the summary above says how to resume
        if counts["failed"]:
            raise SystemExit(1)  # the summary above names the failed cells
        return counts


def _application(full: DictConfig) -> DictConfig:
    """The composed config without its hydra node, in struct mode as Hydra hands it to a job."""
    application = OmegaConf.masked_copy(full, [key for key in full if key != "hydra"])
    OmegaConf.set_struct(application, True)  # as Hydra has it: overriding a missing key is an error
    return application


def _file_of(result, config_path: str) -> str | None:
    """The file a config was loaded from, when it came from a folder (Hydra names its source, not the file)."""
    source = getattr(result, "path", "") or ""
    return f"{source.removeprefix('file://')}/{config_path}.yaml" if source.startswith("file://") else None


def _model_builds(values: dict) -> bool:
    """Whether the model of a flat recipe can be built (on 64 inputs and 10 classes: any family takes them)."""
    from harness.model import build_model

    spec = {k.removeprefix("model."): v for k, v in values.items() if k.startswith("model.")}
    try:
        build_model(spec, n_inputs=64, n_classes=10)
    except Exception:  # noqa: BLE001 - whatever the constructor refuses
        return False
    return True
