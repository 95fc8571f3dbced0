"""Start-up checks of ``tools/train.py`` and ``tools/test.py``: mistakes found before the Runner
is built, each reported as one message that names the file or key and what to do.

:class:`StartupError` carries such a message; :func:`startup_errors` prints it (only on rank 0
of a distributed job; the other ranks exit quietly) and exits with status 1. Set
``MMPOLY_TRACEBACK=1`` to get the traceback after the message.

Checks: the config file and its ``_base_`` files (:func:`load_config`: a missing file, a syntax
or other error with the real file and line), ``--cfg-options`` keys (:func:`check_cfg_options`),
the training loop's lengths and intervals (:func:`check_train_loop`), the work_dir
(:func:`check_work_dir`; :func:`check_no_earlier_run` for a new training run), output files
(:func:`out_file_problem`, shared with ``tools/deployment/pytorch2onnx.py``), checkpoint paths
(:func:`check_checkpoint`; a backbone's ``Pretrained`` checkpoint:
:func:`check_pretrained_backbone`), the data of datasets that can check their files without
reading them (:func:`check_datasets`), the dataloaders' workers (:func:`check_dataloaders`),
the hooks' options (:func:`check_hooks`) and ``env_cfg.dist_cfg`` (:func:`check_dist_cfg`).

Warned about, not refused (:func:`warn_ignored_keys`): top-level keys that mmengine's Runner
ignores without a word although they look meant to act: those of mmcv 1.x configs
(``lr_config``, ``evaluation``, ``data``, ...) and typos of the keys it reads
(``param_schedulr``).
"""
import argparse
import contextlib
import difflib
import importlib
import importlib.util
import inspect
import math
import numbers
import os
import os.path as osp
import re
import sys
import tempfile
import time
import traceback
import warnings
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple

from mmengine.config import Config, DictAction

__all__ = [
    'StartupError', 'TRACEBACK_ENV', 'RANK_VARIABLES', 'QUIET_RANK_WAIT_S', 'launcher_rank',
    'startup_errors', 'end_distributed_after_error', 'load_config', 'check_cfg_options',
    'check_train_loop', 'check_work_dir',
    'out_file_problem', 'folder_problem', 'check_optimizer', 'OPTIMIZER_NUMBERS',
    'check_no_earlier_run', 'earlier_run_files', 'same_checkpoint', 'check_checkpoint',
    'check_datasets', 'LEGACY_KEYS', 'READ_KEYS', 'warn_ignored_keys', 'dist_cfg_keys',
    'check_dist_cfg', 'check_dataloaders', 'check_hooks', 'check_pretrained_backbone',
    'check_model_config', 'check_vis_backends', 'VIS_BACKEND_PACKAGES', 'CfgOptionsAction'
]

#: Set to 1 to print the traceback after a start-up error's message.
TRACEBACK_ENV = 'MMPOLY_TRACEBACK'
#: The environment variable holding the global rank under each launcher.
RANK_VARIABLES = {'pytorch': 'RANK', 'slurm': 'SLURM_PROCID', 'mpi': 'OMPI_COMM_WORLD_RANK'}
#: How long a rank other than 0 waits after a start-up error for the launcher to end it (which
#: torchrun, srun --kill-on-bad-exit and mpirun do once rank 0 has reported and exited); a rank
#: still running then reports the error itself.
QUIET_RANK_WAIT_S = 60.0
#: Keys that mmengine's builders take out of a config dict before calling its ``type``.
BUILDER_KEYS = frozenset({'type', '_scope_', '_delete_', 'priority', 'constructor',
                          'paramwise_cfg', 'convert_to_iter_based'})


class StartupError(Exception):
    """A mistake found before the run starts; the message names the file or key and the fix."""


def launcher_rank(launcher: str) -> int:
    """This process's global rank under ``launcher`` (0 for ``none`` or an unset variable)."""
    return int(os.environ.get(RANK_VARIABLES.get(launcher, ''), 0) or 0)


@contextlib.contextmanager
def startup_errors(prog: str, launcher: str = 'none') -> Iterator[None]:
    """Turn a :class:`StartupError` raised inside into ``PROG: error: MESSAGE`` on stderr and
    exit status 1.

    Under a distributed ``launcher`` every rank meets the same mistake and rank 0 reports it: the
    other ranks wait (at most :data:`QUIET_RANK_WAIT_S`) for the launcher to end them after rank
    0 has exited, so the job shows the message once; exiting at once could get rank 0 killed
    before it has printed. pkg_resources' deprecation warnings (raised by mmengine's imports,
    nothing to do with the run) are switched off inside, so that the message comes first.
    """
    warnings.filterwarnings('ignore', message='pkg_resources is deprecated as an API',
                            category=UserWarning)
    try:
        yield
    except StartupError as error:
        rank = launcher_rank(launcher)
        if rank != 0:
            time.sleep(QUIET_RANK_WAIT_S)
        where = '' if rank == 0 else f' (rank {rank}; the job was not ended after rank 0)'
        print(f'{prog}: error{where}: {error}', file=sys.stderr, flush=True)
        if os.environ.get(TRACEBACK_ENV, '') not in ('', '0'):
            # the three-argument form: Python 3.9 has no one-argument print_exception
            traceback.print_exception(type(error), error, error.__traceback__)
        end_distributed_after_error(error)
        raise SystemExit(1) from None


def end_distributed_after_error(error: BaseException) -> None:
    """Before a rank exits on ``error``: free what the tracebacks of ``error`` and of the errors
    it was raised from hold, and destroy the process group without waiting for the other ranks
    (:func:`mmpoly.engine.launcher.shutdown_distributed`). A no-op without a process group.

    A refusal raised after the Runner was built (a resume that cannot resume, a checkpoint that
    does not fit) leaves the Runner in the locals of the finished frames of its tracebacks, and
    with it the model's DistributedDataParallel wrapper. Freed only at interpreter shutdown,
    that wrapper can abort the rank (torch 2.14.1, gloo), and torchrun would report a signal
    instead of exit status 1.
    """
    import torch.distributed as torch_dist
    if not (torch_dist.is_available() and torch_dist.is_initialized()):
        return  # frames left as they are: nothing to free them for
    from mmpoly.engine.launcher import shutdown_distributed
    seen: Set[int] = set()
    chained: Optional[BaseException] = error
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        traceback.clear_frames(chained.__traceback__)  # frames still running are skipped
        chained = chained.__cause__ or chained.__context__
    shutdown_distributed(wait_for_peers=False)


# --------------------------------------------------------------------------- config files


def _config_files(filename: str) -> Tuple[List[str], Optional[SyntaxError]]:
    """``filename`` and its ``_base_`` files (breadth first), and the first syntax error found in
    them (the walk stops there: that file's bases are unknown)."""
    files: List[str] = []
    todo = [osp.abspath(filename)]
    while todo:
        path = todo.pop(0)
        if path in files or not osp.isfile(path):
            continue
        files.append(path)
        if not path.endswith('.py'):
            continue
        try:
            with open(path, encoding='utf-8') as f:
                compile(f.read(), path, 'exec', dont_inherit=True)
        except SyntaxError as error:
            return files, error
        with contextlib.suppress(Exception):  # an unresolvable _base_: Config reports it
            todo.extend(osp.abspath(Config._get_cfg_path(base, path)[0])
                        for base in Config._get_base_files(path))
    return files, None


def _close(word: str, candidates: Sequence[str], cutoff: float = 0.6) -> str:
    matches = difflib.get_close_matches(word, list(candidates), n=3, cutoff=cutoff)
    return f' (close matches: {", ".join(matches)})' if matches else ''


#: The config file suffixes mmengine's ``Config.fromfile`` reads.
CONFIG_SUFFIXES = ('.py', '.json', '.yaml', '.yml')


def _undecodable(filename: str) -> str:
    """``filename`` quoted if its bytes are not UTF-8, else words naming its ``_base_`` files."""
    with open(filename, 'rb') as f:
        data = f.read()
    try:
        data.decode('utf-8')
    except UnicodeDecodeError as error:
        return f'{filename!r} (at byte offset {error.start})'
    return f'{filename!r} or one of its _base_ files'


def load_config(filename: str) -> Config:
    """``Config.fromfile(filename)``, with its start-up mistakes as :class:`StartupError`: a
    missing file (with close names in its folder), a syntax error (the real file of the
    ``_base_`` chain and its line, not mmengine's ``<unknown>``), a missing ``_base_`` file, or
    an exception raised while running one of the files (its file and line)."""
    if osp.isdir(filename):
        raise StartupError(f'config {filename!r} is a directory, not a config file; give the path '
                           'of a config file, e.g. one of configs/*.py')
    if not osp.isfile(filename):
        folder = osp.dirname(filename) or '.'
        names = sorted(os.listdir(folder)) if osp.isdir(folder) else []
        where = '' if osp.isdir(folder) else f' (nor does its folder {folder!r})'
        raise StartupError(f'config file {filename!r} does not exist{where}'
                           f'{_close(osp.basename(filename), names)}; give the path of a config '
                           f'file, e.g. one of configs/*.py')
    suffix = osp.splitext(filename)[1].lower()
    if suffix not in CONFIG_SUFFIXES:
        from mmpoly.fileio.checkpoint import other_file_format
        with open(filename, 'rb') as f:
            zipped = f.read(4) == b'PK\x03\x04'
        what = ('a torch checkpoint (a zip archive)' if zipped else other_file_format(filename)
                or f'a {suffix or "suffix-less"} file')
        swapped = ' (did CONFIG and CHECKPOINT change places?)' if zipped else ''
        raise StartupError(f'config {filename!r} is not a config file ({", ".join(CONFIG_SUFFIXES)}'
                           f'): it is {what}; give a config, e.g. one of configs/*.py{swapped}')
    try:
        return Config.fromfile(filename)
    except UnicodeDecodeError as error:
        raise StartupError(f'config file {_undecodable(filename)} is not UTF-8 text '
                           f'({error.reason}: byte 0x{error.object[error.start]:02x}); save '
                           'it as UTF-8') from error
    except SyntaxError as error:
        located = _config_files(filename)[1] or error
        where = f'{located.filename}, line {located.lineno}'
        if located is error and error.filename in (None, '<unknown>'):
            where = f'{filename} or one of its _base_ files'
        text = f'\n    {located.text.rstrip()}' if located.text else ''
        raise StartupError(f'syntax error in config file {where}: {located.msg}{text}') \
            from error
    except FileNotFoundError as error:
        raise StartupError(f'config file {filename!r} (or one of its _base_ files) names a file '
                           f'that does not exist: {error}') from error
    except Exception as error:
        files = set(_config_files(filename)[0])
        frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename in files]
        if not frames:
            raise
        frame = frames[-1]
        raise StartupError(f'error in config file {frame.filename}, line {frame.lineno}: '
                           f'{type(error).__name__}: {error}\n    {frame.line}') from error


# --------------------------------------------------------------------------- --cfg-options


class CfgOptionsAction(DictAction):
    """mmengine's ``DictAction`` (``--cfg-options KEY=VALUE ...``) whose malformed items are
    usage errors naming the item: an item without ``=`` (``train_cfg.max_epochs 2``, with a
    space for the ``=``) ended in a ValueError traceback from inside argparse."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: Optional[str] = None) -> None:
        items = list(values) if isinstance(values, (list, tuple)) else [values]
        for i, item in enumerate(items):
            if '=' in item and not item.startswith('='):
                continue
            if i > 0 and (items[i - 1].endswith('=') or item.startswith('=')):
                fix = f'{items[i - 1]}{item}'  # 'key= value' or 'key =value'
            elif i + 1 < len(items) and items[i + 1].startswith('='):
                fix = f'{item}{items[i + 1]}'
            elif i + 1 < len(items) and '=' not in items[i + 1]:
                fix = f'{item}={items[i + 1]}'
            else:
                fix = 'train_cfg.max_epochs=2'
            raise argparse.ArgumentError(
                self, f'{item!r} is not KEY=VALUE: write each option as one word, without '
                f'spaces around "=", e.g. {fix}')
        super().__call__(parser, namespace, items, option_string)


def check_model_config(cfg: Config, source: str) -> None:
    """Refuse a config (read from ``source``) without a ``model`` dict, whose ``model.type`` or
    ``model.backbone.type`` names nothing registered in the config's scope (building it would
    end in an AttributeError or a registry KeyError traceback), or where the ``model`` dict or
    any dict inside it whose ``type`` is a registered model (backbone, neck, head, a plugin,
    a detector's ``roi_head.mask_head``, a loss; in lists too) has a key that its type does not
    take (a ``TypeError`` traceback from deep in the build, e.g. ``depht=18`` for ``depth``).
    Types that take ``**kwargs`` (see :func:`_arguments`) are not checked, and neither is a
    dict whose type is not a model (e.g. ``model.init_cfg``, an initializer, or a detector's
    assigners and coders)."""
    model = cfg.get('model')
    if not isinstance(model, Mapping):
        raise StartupError(f'config {source!r} has no model (a dict); give a model config, e.g. '
                           'one of configs/*.py, not a _base_ file')
    from mmengine.registry import MODELS
    default_scope = cfg.get('default_scope') or 'mmpretrain'
    for key, node, scope in _typed_dicts(model, 'model', default_scope):
        type_ = node['type']
        _import_registries(scope)
        registry = MODELS._search_child(scope) or MODELS
        obj = registry.get(type_)
        if obj is None:
            if key not in ('model', 'model.backbone'):
                continue  # not a model: e.g. model.init_cfg, an initializer of its own registry
            raise StartupError(f'{key}.type {type_!r} of config {source!r} is not a registered '
                               f'model in scope {scope!r}'
                               f'{_close(type_, list(registry.module_dict))}')
        arguments = _arguments(obj)
        if arguments is None:
            continue
        unknown = [name for name in node if name not in arguments | {'type', '_scope_'}]
        if unknown:
            name = unknown[0]
            raise StartupError(f'{key}.{name} of config {source!r}: {name!r} is not an argument '
                               f'of {key}.type {type_!r}{_close(name, sorted(arguments))}')


#: Python's TypeError for a keyword a constructor does not take: the class is named from 3.10
#: on, and 3.13 adds a suggestion.
UNEXPECTED_KEYWORD = re.compile(r"^(?:(?P<owner>[\w.]+)\.)?__init__\(\) got an unexpected "
                                r"keyword argument '(?P<name>\w+)'(?:\. Did you mean .*)?$")


def unexpected_argument_problem(error: BaseException, cfg: Config, source: str
                                ) -> Optional[str]:
    """For the TypeError of a constructor given a keyword it does not take while ``cfg``'s model
    was built (types that take ``**kwargs`` pass it on; :func:`check_model_config` cannot list
    their arguments): the first config key that gave it (a dict of ``cfg.model`` with that key
    whose type's class has that constructor in its MRO), with the arguments up the MRO that
    come closest. None for any other error, or when no such key is found."""
    match = UNEXPECTED_KEYWORD.match(str(error)) if isinstance(error, TypeError) else None
    model = cfg.get('model')
    if match is None or not isinstance(model, Mapping):
        return None
    name, owner = match['name'], match['owner']
    for key, node, scope in _typed_dicts(model, 'model', cfg.get('default_scope') or 'mmpretrain'):
        cls = _registered(node['type'], scope) if name in node else None
        if not inspect.isclass(cls) or (
                owner and all(c.__qualname__ != owner for c in cls.__mro__)):
            continue
        arguments = set()
        for base in cls.__mro__:
            with contextlib.suppress(TypeError, ValueError):
                arguments |= {p.name for p in inspect.signature(base).parameters.values()
                              if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not owner and name in arguments:
            continue  # (Python 3.9 names no class) a class that takes it did not raise
        passed_on = '' if owner in (None, cls.__qualname__) else \
            f' (it passes it on to {owner}, which does not take it)'
        return (f'{key}.{name} of config {source!r}: {name!r} is not an argument of {key}.type '
                f'{node["type"]!r}{passed_on}{_close(name, sorted(arguments - {"self"}))}')
    return None


@contextlib.contextmanager
def model_build_errors(cfg: Config, source: str) -> Iterator[None]:
    """Turn the TypeError of an argument no class of ``cfg.model`` takes, raised inside (while
    a Runner builds the model), into a :class:`StartupError` naming the config key
    (:func:`unexpected_argument_problem`); other errors pass."""
    try:
        yield
    except TypeError as error:
        problem = unexpected_argument_problem(error, cfg, source)
        if problem is None:
            raise
        raise StartupError(problem) from error


def _typed_dicts(node: Any, key: str, scope: str) -> Iterator[Tuple[str, Mapping, str]]:
    """(dotted key, dict, scope) of every dict with a string ``type`` in ``node`` and below it
    (list items by index, as ``--cfg-options`` names them), parents first; a dict's
    ``_scope_`` holds for what it contains."""
    if isinstance(node, Mapping):
        scope = node.get('_scope_', scope)
        if isinstance(node.get('type'), str):
            yield key, node, scope
        children: Iterable[Tuple[Any, Any]] = node.items()
    elif isinstance(node, (list, tuple)):
        children = enumerate(node)
    else:
        return
    for name, child in children:
        yield from _typed_dicts(child, f'{key}.{name}', scope)


def _import_registries(scope: str) -> None:
    """Import ``<scope>.registry`` (where a scope's package makes its child registries), if any."""
    with contextlib.suppress(ImportError):
        importlib.import_module(f'{scope}.registry')


def _registered(type_: Any, scope: str) -> Optional[Any]:
    """The one object ``type_`` names in mmengine's registries under ``scope`` (None when it
    names none, or different objects in different registries)."""
    if not isinstance(type_, str):
        return type_ if callable(type_) else None
    from mmengine import registry as mm_registry
    from mmengine.registry import Registry
    _import_registries(scope)
    found = {}
    for name in dir(mm_registry):
        root = getattr(mm_registry, name)
        if not isinstance(root, Registry) or root.parent is not None:
            continue
        with contextlib.suppress(Exception):
            obj = (root._search_child(scope) or root).get(type_)
            if obj is not None:
                found[id(obj)] = obj
    return next(iter(found.values())) if len(found) == 1 else None


def _arguments(obj: Any) -> Optional[Set[str]]:
    """The keyword arguments ``obj`` accepts, None if it takes ``**kwargs`` (or is opaque).

    An mmpoly class whose ``__init__`` passes ``**kwargs`` on to its base class (mmpoly's
    convention, e.g. ``PDCResNetCIFAR(*args, block_cfg=..., **kwargs)``) accepts its own
    arguments and those of the next ``__init__`` up its MRO, followed while they are mmpoly's."""
    names: Set[str] = set()
    classes = [c for c in obj.__mro__ if '__init__' in vars(c)] if inspect.isclass(obj) else [obj]
    for index, function in enumerate(classes):
        try:
            params = inspect.signature(function).parameters.values()
        except (TypeError, ValueError):
            return None
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return names - {'self'}
        passed_on = inspect.isclass(function) and function.__module__.startswith('mmpoly.') \
            and index + 1 < len(classes)
        if not passed_on:
            return None
    return None


#: The loop mmengine's Runner builds for each top-level loop key whose dict has no ``type``.
IMPLIED_LOOPS = {'val_cfg': 'ValLoop', 'test_cfg': 'TestLoop'}


def _implied_type(key: str, node: Mapping[str, Any]) -> Optional[str]:
    """The class mmengine's Runner builds from the top-level dict ``key`` when ``node`` names no
    ``type``: for ``train_cfg`` ``EpochBasedTrainLoop`` if ``by_epoch`` is true, else
    ``IterBasedTrainLoop`` (``Runner.build_train_loop``); ``ValLoop`` and ``TestLoop``; for
    ``optim_wrapper`` with an ``optimizer`` and no ``constructor``, ``OptimWrapper``
    (``DefaultOptimWrapperConstructor``). None if ``node`` has a ``type``, for ``train_cfg``
    without ``by_epoch`` (the Runner fails on it), or for another key."""
    if not isinstance(node, Mapping) or 'type' in node:
        return None
    if key == 'train_cfg':
        if 'by_epoch' not in node:
            return None
        return 'EpochBasedTrainLoop' if node['by_epoch'] else 'IterBasedTrainLoop'
    if key == 'optim_wrapper':
        return 'OptimWrapper' if 'optimizer' in node and 'constructor' not in node else None
    return IMPLIED_LOOPS.get(key)


def check_cfg_options(cfg: Config, options: Mapping[str, Any]) -> None:
    """Refuse ``--cfg-options`` keys that are mistakes, before they are merged into ``cfg``.

    A key path is followed through ``cfg`` (dicts by name, lists by index) to its first part
    that is absent. That part is unknown, and a :class:`StartupError` names it with close
    matches, when its dict has a ``type`` that is registered and takes no ``**kwargs`` and the
    part is none of its arguments (the build would fail), or when the part is a close match
    (a typo) of a key the dict has or an argument its ``type`` takes. The top-level loop and
    optimizer-wrapper dicts without a ``type`` have the type the Runner gives them
    (:func:`_implied_type`: ``IterBasedTrainLoop`` for ``train_cfg=dict(by_epoch=False, ...)``,
    ``OptimWrapper`` for ``optim_wrapper=dict(optimizer=...)``). Other new keys are accepted:
    configs may add arguments that a class takes but the base config does not set
    (e.g. ``model.backbone.init_cfg``). A list index out of range is an error too.

    A key's first part must be a top-level key that something reads (:data:`READ_KEYS`) or one
    of :data:`LEGACY_KEYS` (merged, then warned about by :func:`warn_ignored_keys`); anything
    else would have no effect (:func:`_top_level_problem`): a key the config lacks
    (``max_epochs``, ``lr``: the message names the config's keys of that name, e.g.
    ``train_cfg.max_epochs``), or a variable of the config file (``data_root``,
    ``train_pipeline``: the message names the keys that hold its value).
    """
    scope = cfg.get('default_scope') or 'mmengine'
    root: Mapping[str, Any] = cfg._cfg_dict if isinstance(cfg, Config) else cfg
    problems, no_effect = [], []
    for key in options:
        node: Any = root
        parts = key.split('.')
        top = _top_level_problem(root, key, options[key])
        if top is not None:
            (no_effect if parts[0] in root else problems).append(top)
            continue
        for depth, part in enumerate(parts):
            parent = '.'.join(parts[:depth]) or '(the top level)'
            if isinstance(node, (list, tuple)):
                if part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                    continue
                problems.append(f'{key}: {parent} is a list of {len(node)}; '
                                f'{part!r} is not an index of it')
                break
            if not isinstance(node, Mapping):
                break  # a scalar or None that the option replaces with a dict
            if part in node:
                node = node[part]
                continue
            if part in BUILDER_KEYS:
                break
            type_ = options.get('.'.join(parts[:depth] + ['type']), node.get('type'))
            if type_ is None and depth == 1:  # a top-level dict: the type the Runner gives it
                implied = dict(node)
                if f'{parts[0]}.by_epoch' in options:
                    implied['by_epoch'] = options[f'{parts[0]}.by_epoch']
                type_ = _implied_type(parts[0], implied)
            obj = _registered(type_, node.get('_scope_', scope)) if type_ else None
            arguments = _arguments(obj) if obj is not None else None
            known = sorted(set(node) | (arguments or set()))
            if arguments is not None and part not in arguments:
                problems.append(f'{key}: {part!r} is not a key of {parent} nor an argument of '
                                f'its type {type_!r}{_close(part, known)}')
            elif difflib.get_close_matches(part, known, n=1, cutoff=0.8) and (
                    arguments is None or part not in arguments):
                problems.append(f'{key}: {parent} has no key {part!r}'
                                f'{_close(part, known, cutoff=0.8)}')
            break
    messages = []
    if problems:
        messages.append('unknown --cfg-options key' + ('s' if len(problems) > 1 else '')
                        + ': ' + '; '.join(problems) + '. A key is a dotted path into '
                        'the config, list items by index (e.g. param_scheduler.0.end)')
    if no_effect:
        messages.append('--cfg-options key' + ('s' if len(no_effect) > 1 else '')
                        + ' without effect: ' + '; '.join(no_effect))
    if messages:
        raise StartupError('. '.join(messages))


#: At most this many config paths are named as the keys to set instead.
SUGGESTED_PATHS = 6


def _tree(node: Any, prefix: str = '') -> Iterator[Tuple[str, str, Any]]:
    """(dotted path, last part, value) of every dict item and list item inside ``node``,
    depth first in the config's order."""
    if isinstance(node, Mapping):
        items = [(str(key), value) for key, value in node.items()]
    elif isinstance(node, (list, tuple)):
        items = [(str(index), value) for index, value in enumerate(node)]
    else:
        return
    for part, value in items:
        path = f'{prefix}.{part}' if prefix else part
        yield path, part, value
        yield from _tree(value, path)


def _read_tree(root: Mapping[str, Any]) -> Dict[str, Any]:
    """The top-level items of ``root`` that something reads (:data:`READ_KEYS`)."""
    return {key: value for key, value in root.items() if key in READ_KEYS}


def _paths_named(root: Mapping[str, Any], name: str) -> List[str]:
    """The paths of the keys called ``name`` in the read part of ``root``; if there are none,
    of the keys with ``name`` as one of their ``_``-separated words (``epochs``:
    ``train_cfg.max_epochs``) or a close match of it."""
    paths = [(path, part) for path, part, _ in _tree(_read_tree(root)) if not part.isdigit()]
    exact = [path for path, part in paths if part == name]
    if exact:
        return exact
    close = set(difflib.get_close_matches(name, {part for _, part in paths}, n=3, cutoff=0.8))
    return [path for path, part in paths if name in part.split('_') or part in close]


def _holds_value(node: Any, value: Any, part: Optional[str], name: str) -> bool:
    """Whether ``node`` (under the key ``part``) is where the config file put the value of its
    variable ``name``: a dict with all the items of a dict ``value`` (merged into a base dict),
    an equal list, an equal number or string; ``True``, ``False`` and ``None`` (too common to
    tell) only under a key called ``name``."""
    if isinstance(value, Mapping):
        return isinstance(node, Mapping) and bool(value) and all(
            item in node and node[item] == value[item] for item in value)
    if isinstance(value, (list, tuple)):
        return isinstance(node, (list, tuple)) and list(node) == list(value)
    if value is None or isinstance(value, bool):
        return part == name and node is value
    return type(node) is type(value) and node == value


def _paths_holding(root: Mapping[str, Any], name: str) -> List[str]:
    """The paths in the read part of ``root`` that hold the value of its top-level variable
    ``name`` (see :func:`_holds_value`; not the items inside a path found)."""
    found: List[str] = []
    for path, part, node in _tree(_read_tree(root)):
        if found and path.startswith(found[-1] + '.'):
            continue
        if _holds_value(node, root[name], part, name):
            found.append(path)
    return found


def _cli_value(value: Any) -> str:
    """``value`` as it is written after ``KEY=`` on the command line (``...`` for a list or a
    dict, and for a string with spaces or quotes)."""
    if value is None or isinstance(value, (bool, numbers.Number)):
        return str(value)
    if isinstance(value, str) and value and not any(c in value for c in ' \'"[](){},'):
        return value
    return '...'


def _set_instead(paths: List[str], rest: str, value: Any) -> str:
    """``--cfg-options PATH=VALUE ...`` for the first :data:`SUGGESTED_PATHS` paths."""
    shown = ' '.join(f'{path}{rest}={_cli_value(value)}' for path in paths[:SUGGESTED_PATHS])
    more = len(paths) - SUGGESTED_PATHS
    return f'--cfg-options {shown}' + (f' (and {more} more keys)' if more > 0 else '')


def _top_level_problem(root: Mapping[str, Any], key: str, value: Any) -> Optional[str]:
    """Why the option ``key=value`` would have no effect because of its first part, or None.

    The first part is fine when something reads it (:data:`READ_KEYS`, whether or not the
    config sets it) or it is one of :data:`LEGACY_KEYS` (warned about after the merge). Else it
    is either absent from the config (a key meant for somewhere inside it, e.g. ``max_epochs``
    for ``train_cfg.max_epochs``: :func:`_paths_named`), or a variable of the config file:
    mmengine put its value into the keys that use it when it read the file, so setting the
    variable now changes none of them (:func:`_paths_holding` names them)."""
    first, _, tail = key.partition('.')
    if first in READ_KEYS or first in LEGACY_KEYS:
        return None
    rest = f'.{tail}' if tail else ''
    if first in root:
        paths = _paths_holding(root, first)
        if paths:
            where = (f'set those you mean of the keys that hold its value: '
                     f'{_set_instead(paths, rest, value)}')
        else:
            where = ('no key that is read holds its value (the config set them otherwise '
                     'afterwards); set the keys the run reads instead')
        return (f'{key}: {first!r} is a variable of the config file, which nothing reads: '
                f'mmengine put its value where the file uses it when it read the file, so '
                f'setting it now would change nothing; {where}')
    paths = _paths_named(root, first)
    where = ''
    if paths:
        named = {path.rsplit('.', 1)[-1] for path in paths}
        what = repr(first) if named == {first} else 'keys named like it'
        where = (f'; the config has {what} inside: set '
                 f'{"the one you mean among " if len(paths) > 1 else ""}'
                 f'{_set_instead(paths, rest, value)}')
    known = sorted(READ_KEYS | set(root))
    return (f'{key}: {first!r} is not a top-level key of the config, nor one that mmengine\'s '
            f'Runner or the tools read, so it would have no effect'
            f'{_close(first, known)}{where}')


#: Top-level keys of mmcv 1.x configs that mmengine 0.10's Runner does not read (nor do
#: tools/train.py and tools/test.py), and what replaces each.
LEGACY_KEYS = {
    'lr_config': 'param_scheduler',
    'momentum_config': 'param_scheduler',
    'optimizer_config': 'optim_wrapper (e.g. clip_grad=dict(max_norm=...))',
    'checkpoint_config': 'default_hooks.checkpoint',
    'log_config': 'default_hooks.logger and visualizer',
    'evaluation': 'train_cfg.val_interval, val_evaluator and default_hooks.checkpoint.save_best',
    'runner': 'train_cfg (e.g. dict(by_epoch=True, max_epochs=...))',
    'workflow': 'train_cfg and val_cfg',
    'total_epochs': 'train_cfg.max_epochs',
    'data': 'train_dataloader, val_dataloader and test_dataloader',
    'fp16': "optim_wrapper=dict(type='AmpOptimWrapper', ...) or --amp",
    'dist_params': 'env_cfg.dist_cfg',
    'resume_from': 'resume=True with load_from, or --resume PATH',
    'gpu_ids': 'the launcher (e.g. tools/dist_train.sh CONFIG GPUS)',
    'cudnn_benchmark': 'env_cfg.cudnn_benchmark',
    'mp_start_method': 'env_cfg.mp_cfg.mp_start_method',
    'opencv_num_threads': 'env_cfg.mp_cfg.opencv_num_threads',
}


def _holds(node: Any, value: Any, name: str, key: Optional[str] = None) -> bool:
    """Whether ``node`` (found under ``key``), or a dict value or list item anywhere inside it,
    holds ``value``, the value of the top-level key ``name`` (:func:`_holds_value`)."""
    return _holds_value(node, value, key, name) or any(
        _holds_value(item, value, part, name) for _, part, item in _tree(node))


#: Top-level keys that mmengine 0.10's Runner, mmpretrain's and mmdet's test-time augmentation
#: and mmpoly's runners read; a key one or two letters off one of them is a typo.
READ_KEYS = frozenset({
    'model', 'work_dir', 'train_dataloader', 'val_dataloader', 'test_dataloader', 'train_cfg',
    'val_cfg', 'test_cfg', 'auto_scale_lr', 'optim_wrapper', 'param_scheduler', 'val_evaluator',
    'test_evaluator', 'default_hooks', 'custom_hooks', 'data_preprocessor', 'load_from',
    'resume', 'launcher', 'env_cfg', 'log_processor', 'log_level', 'visualizer', 'default_scope',
    'randomness', 'experiment_name', 'model_wrapper_cfg', 'find_unused_parameters', 'sync_bn',
    'activation_checkpointing', 'efficient_conv_bn_eval', 'compile', 'runner_type', 'tta_model',
    'tta_pipeline', 'custom_imports', 'channels_last', 'compile_model'
})


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: the fewest insertions, deletions and substitutions from a to b."""
    row = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, other in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1,
                                           previous + (char != other))
    return row[-1]


def warn_ignored_keys(cfg: Config, prog: str, launcher: str = 'none') -> List[str]:
    """Warn (on stderr, rank 0 only) about each top-level key of ``cfg`` that has no effect
    although it looks as if it should: mmengine's Runner ignores it without a word.

    Such a key is one of :data:`LEGACY_KEYS` (mmcv 1.x), or a typo: not one of
    :data:`READ_KEYS` but at most two letters off one (``param_schedulr``, ``default_hook``).
    Neither is warned about when its value is ``None`` (nothing is lost) or another top-level
    key holds it (a variable, e.g. ``runner = dict(...)`` then ``train_cfg = runner``; see
    :func:`_holds`). Returns the keys warned about, in the config's order.
    """
    warned = []
    for key, value in cfg.items():
        if key in READ_KEYS or value is None:
            continue
        if key in LEGACY_KEYS:
            why = (f"is an mmcv 1.x key that mmengine's Runner does not read: it has no effect "
                   f'on this run. Use {LEGACY_KEYS[key]} instead, and remove {key!r}')
        else:
            distance, read = min((_edit_distance(key, read), read) for read in READ_KEYS)
            if distance > 2:
                continue
            why = (f"is read by nothing (mmengine's Runner reads {read!r}): it has no effect "
                   f'on this run. Is it a typo of {read!r}?')
        if any(_holds(node, value, key, other) for other, node in cfg.items() if other != key):
            continue
        warned.append(key)
        if launcher_rank(launcher) == 0:
            print(f'{prog}: warning: config key {key!r} {why}', file=sys.stderr, flush=True)
    return warned


# --------------------------------------------------------------------------- files


def dist_cfg_keys() -> List[str]:
    """The keys ``env_cfg.dist_cfg`` may hold: ``mmengine.dist.init_dist``'s own (``backend``,
    ``init_backend``; ``port`` for slurm and mpi) and the ``torch.distributed.init_process_group``
    arguments it passes on, less ``rank`` and ``world_size``, which it sets itself (and
    private ones)."""
    import torch.distributed
    passed_on = inspect.signature(torch.distributed.init_process_group).parameters
    return ['backend', 'init_backend', 'port'] + [
        name for name in passed_on
        if name not in ('backend', 'rank', 'world_size') and not name.startswith('_')]


def check_dist_cfg(cfg: Config) -> None:
    """Refuse an ``env_cfg.dist_cfg`` key that no launcher takes (a typo such as ``timeot``:
    one process ignores it, a distributed job fails on it once every process has started), or
    a ``dist_cfg`` that is not a dict. A :class:`StartupError` names the key, close matches
    and the keys allowed (:func:`dist_cfg_keys`). ``timeout`` must be a positive finite number
    of seconds (:func:`mmpoly.engine.launcher.dist_timeout`), whatever the launcher."""
    dist_cfg = (cfg.get('env_cfg') or {}).get('dist_cfg')
    if dist_cfg is None:
        return
    if not isinstance(dist_cfg, Mapping):
        raise StartupError(f'env_cfg.dist_cfg must be a dict of process-group options, got '
                           f'{dist_cfg!r}')
    allowed = dist_cfg_keys()
    unknown = [key for key in dist_cfg if key not in allowed]
    if unknown:
        raise StartupError('; '.join(f'env_cfg.dist_cfg.{key}: not an option of '
                                     f'mmengine.dist.init_dist or '
                                     f'torch.distributed.init_process_group'
                                     f'{_close(str(key), allowed)}' for key in unknown)
                           + f'. Allowed: {", ".join(allowed)}')
    from mmpoly.engine.launcher import dist_timeout  # mmpoly.engine imports much: only here
    try:
        dist_timeout(cfg)
    except ValueError as error:  # a distributed job would fail on it after every rank started
        raise StartupError(f'{error}; set it in the config or with --cfg-options '
                           'env_cfg.dist_cfg.timeout=SECONDS (e.g. 300)') from None


def check_work_dir(work_dir: str) -> None:
    """Create ``work_dir`` if needed and check that a file can be written in it."""
    hint = 'choose another with --work-dir DIR'
    if osp.exists(work_dir) and not osp.isdir(work_dir):
        raise StartupError(f'work_dir {work_dir!r} is a file, not a directory; remove it or '
                           f'{hint}')
    try:
        os.makedirs(work_dir, exist_ok=True)
    except OSError as error:
        raise StartupError(f'work_dir {work_dir!r} cannot be created ({error.strerror}); '
                           f'{hint}') from error
    try:
        fd, probe = tempfile.mkstemp(prefix='.mmpoly-probe-', dir=work_dir)
        os.close(fd)
        os.remove(probe)
    except OSError as error:
        raise StartupError(f'work_dir {work_dir!r} is not writable ({error.strerror}); '
                           f'{hint}') from error


def _write_probe(folder: str, subfolder: bool) -> Optional[str]:
    """Create a temporary file (``subfolder``: a temporary folder) in ``folder`` and remove it
    again: None if that worked, else why not (the OS's reason)."""
    try:
        if subfolder:
            os.rmdir(tempfile.mkdtemp(prefix='.mmpoly-probe-', dir=folder))
        else:
            fd, probe = tempfile.mkstemp(prefix='.mmpoly-probe-', dir=folder)
            os.close(fd)
            os.remove(probe)
    except OSError as error:
        return error.strerror or str(error)
    return None


def out_file_problem(path: str, option: str,
                     inputs: Sequence[Tuple[str, Optional[str]]] = ()) -> Optional[str]:
    """Why a file cannot be written at ``path`` (given with ``option``, e.g. ``'--out'``), or
    None when it can, as far as can be told before writing it.

    The message starts with ``OPTION 'PATH': ``; the caller adds what to do. Refused: one of
    ``inputs`` (what the tool reads, as (name, path) pairs, e.g. ``[('CHECKPOINT', path)]``:
    writing would replace it), a folder (also a path ending in a separator), a path under a
    file, and a folder that cannot be written to. Creates nothing (the atomic writers create
    missing folders when they write): a missing folder is judged by its nearest existing
    ancestor, and whether a folder can be written to is found out by creating a temporary entry
    in it and removing it again (``os.access`` says yes to root even on a read-only file
    system).
    """
    where = f'{option} {path!r}: '
    for name, source in inputs:
        if isinstance(source, str) and osp.isfile(source) and osp.isfile(path) \
                and osp.samefile(source, path):
            return where + f'is {name} {source!r}, which this command reads: writing there ' \
                'would replace it'
    if osp.isdir(path):
        return where + 'is a folder'
    if path.endswith(('/', os.sep)):
        return where + 'ends in a path separator, so it names a folder'
    folder = osp.dirname(osp.abspath(path))
    existing = folder
    while not osp.lexists(existing):
        existing = osp.dirname(existing)
    if not osp.isdir(existing):
        kind = ('a file' if osp.isfile(existing)
                else 'a broken link' if osp.islink(existing) else 'not a folder')
        return (where + f'{existing} is {kind}, not a folder, so the file cannot be created '
                'or written to')
    # where folders are missing, they must be creatable in the nearest existing one
    reason = _write_probe(existing, subfolder=existing != folder)
    if reason is not None:
        return (where + f'the folder {existing} is not writable ({reason}), so the file '
                'cannot be created or written to')
    return None


def folder_problem(path: str, option: str) -> Optional[str]:
    """Why files cannot be written into the folder ``path`` (given with ``option``, e.g.
    ``'--show-dir'``), or None when they can, as far as can be told before: a file there, a file
    where a missing parent folder would go, or a folder that cannot be written to. Creates
    nothing (a temporary entry is made and removed, as in :func:`out_file_problem`)."""
    where = f'{option} {path!r}: '
    if osp.lexists(path) and not osp.isdir(path):
        return where + 'is a file, not a folder'
    target = osp.abspath(path)
    existing = target
    while not osp.lexists(existing):
        existing = osp.dirname(existing)
    if not osp.isdir(existing):
        return where + f'{existing} is a file, not a folder, so the folder cannot be created'
    reason = _write_probe(existing, subfolder=existing != target)
    if reason is not None:
        what = 'written to' if existing == target else 'created'
        return where + f'the folder {existing} is not writable ({reason}), so it cannot be {what}'
    return None


#: What each count of ``train_cfg`` that :func:`check_train_loop` checks means.
TRAIN_LOOP_COUNTS = {
    'max_epochs': 'the epochs to train',
    'max_iters': 'the iterations to train',
    'val_interval': 'validate every this many epochs, or iterations in an iteration-based loop',
    'val_begin': 'the first epoch, or iteration, after which to validate',
}


def _whole_positive(value: Any) -> bool:
    """Whether ``value`` is a whole number >= 1 (an int, or a float such as 2.0; not a bool)."""
    if isinstance(value, bool):
        return False
    if isinstance(value, numbers.Integral):
        return value >= 1
    return isinstance(value, float) and math.isfinite(value) and value.is_integer() \
        and value >= 1


def check_train_loop(cfg: Config) -> None:
    """``train_cfg``'s ``max_epochs``, ``max_iters``, ``val_interval`` and ``val_begin`` (those
    it sets) must be whole numbers >= 1: mmengine's loops take 0 or a negative length and train
    nothing, divide by a zero interval mid-run, or fail on a fraction after the Runner is built.
    A :class:`StartupError` names each key and its value."""
    train_cfg = cfg.get('train_cfg')
    if not isinstance(train_cfg, Mapping):
        return
    bad = [key for key in TRAIN_LOOP_COUNTS
           if key in train_cfg and not _whole_positive(train_cfg[key])]
    if bad:
        raise StartupError('; '.join(f'train_cfg.{key} must be a whole number >= 1 '
                                     f'({TRAIN_LOOP_COUNTS[key]}), got {train_cfg[key]!r}'
                                     for key in bad)
                           + '. Set it in the config or with --cfg-options '
                           + ' '.join(f'train_cfg.{key}=N' for key in bad))


#: The optimizer options :func:`check_optimizer` checks: finite numbers >= 0.
OPTIMIZER_NUMBERS = ('lr', 'momentum', 'weight_decay', 'eps')


def check_optimizer(cfg: Config) -> None:
    """``optim_wrapper.optimizer``'s ``lr``, ``momentum``, ``weight_decay`` and ``eps`` (those it
    sets) must be finite numbers >= 0: torch's optimizers refuse a negative one with a
    traceback once the Runner is built, and a NaN or infinite learning rate trains until the
    first non-finite weight. A :class:`StartupError` names each key and its value."""
    wrapper = cfg.get('optim_wrapper')
    optimizer = wrapper.get('optimizer') if isinstance(wrapper, Mapping) else None
    if not isinstance(optimizer, Mapping):
        return
    bad = [key for key in OPTIMIZER_NUMBERS if key in optimizer and not (
        isinstance(optimizer[key], numbers.Real) and not isinstance(optimizer[key], bool)
        and math.isfinite(optimizer[key]) and optimizer[key] >= 0)]
    if bad:
        raise StartupError('; '.join(f'optim_wrapper.optimizer.{key} must be a finite number '
                                     f'>= 0, got {optimizer[key]!r}' for key in bad))


def earlier_run_files(work_dir: str) -> List[str]:
    """The files of ``work_dir`` that an earlier training run left: ``*.pth`` and
    ``last_checkpoint``, sorted."""
    if not osp.isdir(work_dir):
        return []
    return sorted(name for name in os.listdir(work_dir)
                  if (name.endswith('.pth') or name == 'last_checkpoint')
                  and osp.isfile(osp.join(work_dir, name)))


def check_no_earlier_run(work_dir: str, listed: int = 5) -> None:
    """A new training run (no ``--resume``) refuses a ``work_dir`` holding an earlier run's
    checkpoints (:func:`earlier_run_files`): it would overwrite them and leave its
    ``last_checkpoint`` next to theirs, and a later ``--resume`` could pick either. Run it while
    holding the work_dir's lock (:class:`mmpoly.engine.RunLock`), so that a run ending meanwhile
    cannot slip through. Names at most ``listed`` files."""
    found = earlier_run_files(work_dir)
    if not found:
        return
    names = ', '.join(found[:listed]) + (f' and {len(found) - listed} more'
                                         if len(found) > listed else '')
    raise StartupError(f'work_dir {work_dir!r} holds the checkpoints of an earlier run ({names}); '
                       'a new run there would overwrite them and mix its checkpoints with '
                       'theirs. To continue that run, add --resume; for a new run, choose '
                       'another folder with --work-dir DIR (or move this one away)')


def same_checkpoint(a: Any, b: Any) -> bool:
    """Whether two checkpoint options name the same file (local paths compared resolved)."""
    if isinstance(a, str) and isinstance(b, str) and '://' not in a + b:
        return osp.realpath(a) == osp.realpath(b)
    return a == b


def check_checkpoint(path: Optional[str], what: str, fix: str) -> None:
    """A local checkpoint ``path`` (``what`` names the option) must be a file; URLs
    (``scheme://...``) are left to the loader."""
    if not path or '://' in str(path):
        return
    local = osp.expanduser(path)  # '~' as mmengine's loader reads it
    if osp.isdir(local):
        raise StartupError(f'{what} {path!r} is a directory, not a checkpoint file; {fix}')
    if not osp.isfile(local):
        folder = osp.dirname(local) or '.'
        names = [n for n in sorted(os.listdir(folder)) if n.endswith('.pth')] \
            if osp.isdir(folder) else []
        raise StartupError(f'{what} {path!r} does not exist'
                           f'{_close(osp.basename(path), names)}; {fix}')


def check_datasets(cfg: Config, loaders: Sequence[str]) -> None:
    """Call ``check_data(dataset_cfg)`` of every dataset class in ``cfg[loader].dataset`` that
    has one (and of wrapped ``dataset`` / ``datasets``); it raises FileNotFoundError for
    missing data, which becomes a :class:`StartupError`."""
    scope = cfg.get('default_scope') or 'mmengine'

    def visit(dataset_cfg: Any) -> None:
        if not isinstance(dataset_cfg, Mapping):
            return
        obj = _registered(dataset_cfg.get('type'), dataset_cfg.get('_scope_', scope))
        check = getattr(obj, 'check_data', None)
        if check is not None:
            try:
                check(dataset_cfg)
            except FileNotFoundError as error:
                raise StartupError(str(error)) from error
        visit(dataset_cfg.get('dataset'))
        for inner in dataset_cfg.get('datasets') or []:
            visit(inner)

    for loader in loaders:
        if cfg.get(loader):
            visit(cfg[loader].get('dataset'))


# --------------------------------------------------------------------------- dataloaders, hooks


def check_dataloaders(cfg: Config, loaders: Sequence[str], flag: Optional[str] = None) -> None:
    """Refuse, for each of ``loaders`` that ``cfg`` sets, a ``batch_size`` that is not a whole
    number >= 1, a ``num_workers`` that is not a whole number >= 0 and
    ``persistent_workers=True`` with ``num_workers=0`` (torch's DataLoader fails on each once
    the Runner is built, naming neither the loader nor the fix). ``flag``:
    the command-line flag that switches persistent workers off, named in the message."""
    problems = []
    for loader in loaders:
        options = cfg.get(loader)
        if not isinstance(options, Mapping):
            continue
        batch = options.get('batch_size', 1)
        if isinstance(batch, bool) or not isinstance(batch, numbers.Integral) or batch < 1:
            problems.append(f'{loader}.batch_size must be a whole number >= 1 (the samples per '
                            f'step of each process), got {batch!r}')
        workers = options.get('num_workers', 0)
        if isinstance(workers, bool) or not isinstance(workers, numbers.Integral) \
                or workers < 0:
            problems.append(f'{loader}.num_workers must be a whole number >= 0 (the worker '
                            f'processes; 0 loads in the main process), got {workers!r}')
        elif workers == 0 and options.get('persistent_workers'):
            hint = f' ({flag} does so for every loader)' if flag else ''
            problems.append(f'{loader}: persistent_workers=True keeps worker processes alive, '
                            f'but num_workers=0 starts none; set {loader}.persistent_workers='
                            f'False{hint}, or {loader}.num_workers=N with N >= 1')
    if problems:
        raise StartupError('; '.join(problems))


def _hook_class(type_: Any, scope: str) -> Optional[type]:
    """The hook class the Runner builds for ``type_`` in ``scope`` (None if unknown)."""
    if isinstance(type_, type):
        return type_
    if not isinstance(type_, str):
        return None
    from mmengine.registry import HOOKS
    _import_registries(scope)
    with contextlib.suppress(Exception):
        return (HOOKS._search_child(scope) or HOOKS).get(type_)
    return None


def check_hooks(cfg: Config) -> None:
    """Refuse, before the Runner is built, an option that a hook of ``default_hooks`` or
    ``custom_hooks`` does not take, with the message its build would raise (close matches and
    the hook's options; :func:`mmpoly.engine.hooks.check_hook_options`).

    mmengine's ``CheckpointHook`` is checked as the
    :class:`~mmpoly.engine.saving.AtomicCheckpointHook` that replaces it: built here, on the
    options alone (its build stores them and checks ``interval`` and ``disk_check``). Another
    hook is checked when it takes no ``**kwargs``: an unknown option would fail its build.
    """
    from mmengine.hooks import CheckpointHook

    from mmpoly.engine.hooks import check_hook_options
    from mmpoly.engine.saving import AtomicCheckpointHook
    scope = cfg.get('default_scope') or 'mmengine'
    default_hooks = cfg.get('default_hooks') or {}
    hooks = [(f'default_hooks.{name}', hook) for name, hook in default_hooks.items()] + \
        [(f'custom_hooks.{i}', hook) for i, hook in enumerate(cfg.get('custom_hooks') or [])]
    for where, hook in hooks:
        if not isinstance(hook, Mapping):
            continue
        cls = _hook_class(hook.get('type'), hook.get('_scope_', scope))
        if cls is CheckpointHook:
            cls = AtomicCheckpointHook
        options = {key: value for key, value in hook.items() if key not in BUILDER_KEYS}
        try:
            if cls is AtomicCheckpointHook:
                cls(**options)
            elif cls is not None and _arguments(cls) is not None:
                check_hook_options(cls.__name__, options, _arguments(cls))
        except (TypeError, ValueError) as error:  # UnknownHookOptionError is a TypeError
            raise StartupError(f'{where} (type {hook.get("type")!r}): {error}') from None


#: The package that each of mmengine's experiment-tracking backends imports. A backend imports
#: it at its first use, inside the Runner: without it a run ended in an ImportError traceback
#: and left a work_dir holding only the dumped config.
VIS_BACKEND_PACKAGES = {
    'TensorboardVisBackend': 'tensorboard', 'WandbVisBackend': 'wandb',
    'MLflowVisBackend': 'mlflow', 'ClearMLVisBackend': 'clearml',
    'NeptuneVisBackend': 'neptune', 'DVCLiveVisBackend': 'dvclive', 'AimVisBackend': 'aim',
}


def check_vis_backends(cfg: Config) -> None:
    """Refuse a ``visualizer.vis_backends`` entry of mmengine's whose package
    (:data:`VIS_BACKEND_PACKAGES`) is not installed, naming the entry, the package and the
    Python that lacks it."""
    visualizer = cfg.get('visualizer')
    backends = visualizer.get('vis_backends') if isinstance(visualizer, Mapping) else None
    for index, backend in enumerate(backends or []):
        type_ = backend.get('type') if isinstance(backend, Mapping) else None
        name = type_ if isinstance(type_, str) else getattr(type_, '__name__', '')
        package = VIS_BACKEND_PACKAGES.get(name.rsplit('.', 1)[-1])
        if package is not None and importlib.util.find_spec(package) is None:
            raise StartupError(
                f'visualizer.vis_backends.{index} (type {name!r}) needs the Python package '
                f'{package!r}, which is not installed for {sys.executable}: install it there '
                f'(e.g. {sys.executable} -m pip install {package}), or leave that backend out')


def check_pretrained_backbone(cfg: Config) -> None:
    """Refuse a ``model.backbone.init_cfg`` of type ``Pretrained`` whose local checkpoint does
    not exist: the backbone loads it in ``runner.train()``, after the Runner and the data are
    built (URLs are left to the loader; ``--cfg-options model.backbone.init_cfg=None`` trains
    the backbone from random weights). The message is the one the load raises
    (:func:`mmpoly.models.backbones.pretrained.load_pretrained`: it names the classifier config
    that writes the file)."""
    backbone = (cfg.get('model') or {}).get('backbone')
    if not isinstance(backbone, Mapping):
        return
    from mmpoly.models.backbones.pretrained import pretrained_init
    try:
        init = pretrained_init(backbone.get('init_cfg'), 'model.backbone.init_cfg')
    except ValueError as error:  # two Pretrained entries
        raise StartupError(str(error)) from None
    checkpoint = (init or {}).get('checkpoint')
    if not isinstance(checkpoint, str) or not checkpoint or '://' in checkpoint \
            or osp.isfile(osp.expanduser(checkpoint)):  # mmengine's loader expands '~'
        return
    config = init.get('classifier_config')
    how = (f'It is written by training the classifier config {config} (e.g. '
           f'tools/dist_train.sh {config} 8); ' if config else '')
    raise StartupError(f'model.backbone.init_cfg.checkpoint {checkpoint!r} does not exist. '
                       f'{how}set --cfg-options model.backbone.init_cfg.checkpoint=PATH to use '
                       'another file, or model.backbone.init_cfg=None to train the backbone '
                       'from random weights')
