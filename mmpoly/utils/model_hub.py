"""mmpoly's classifiers in mmpretrain's model hub (``list_models``, ``get_model``,
``inference_model``, ``ImageClassificationInferencer``), by config name.

``import mmpoly`` registers mmpoly's ``model-index.yml`` (the models of ``configs/metafile.yml``)
with :class:`mmpretrain.apis.ModelHub`; config paths, and the local ``Weights`` paths of the
Fashion-MNIST model zoo (``checkpoints/fashion-mnist/``), resolve under the installed package's
``.mim/`` or under the checkout (:func:`mmpoly.utils.resources.resource_path`), so
``get_model(name, pretrained=True)`` loads published weights offline.

mmpretrain registers its own models on the first hub lookup and refuses names registered before.
:func:`register_model_hub` therefore adds only those of mmpoly's names that mmpretrain's model
index does not use (:func:`mmpretrain_model_names`): a shared name keeps mmpretrain's meaning, so
importing mmpoly adds names and changes nothing an mmpretrain user relies on (``ModelHub`` itself
is not modified). The one such name is ``resnet18_8xb32_in1k``: mmpretrain's ResNet18 (with its
ImageNet weights) is the same network as mmpoly's degree-1 baseline; mmpoly's config is built by
path, ``get_model(mmpoly_config_path('resnet18_8xb32_in1k.py'))``.

The hub reads a model's config importing its ``custom_imports`` except ``mmpoly.engine``
(:func:`_hub_model_class`), so that getting a model by name leaves mmengine's file loading and
saving as they were.
"""
import functools
import os.path as osp
import re
from typing import Dict, FrozenSet, List, Optional

from .resources import resource_path

__all__ = ['model_index_path', 'register_model_hub', 'mmpoly_model_names',
           'mmpretrain_model_names']

#: The runners' part of mmpoly, which the hub does not import (:func:`_hub_model_class`).
ENGINE = 'mmpoly.engine'
#: metainfo of mmpoly's models (lower-case name -> modelindex Model), per model-index path.
_LOADED: Dict[str, Dict[str, object]] = {}


def model_index_path() -> str:
    """``<package>/.mim/model-index.yml`` when installed, else the checkout's."""
    return resource_path('model-index.yml')


def _absolute(path: str, root: str) -> str:
    """``path`` joined to ``root`` unless it is absolute or a URL (``scheme://...``)."""
    return path if osp.isabs(path) or '://' in path else osp.join(root, path)


def _load(index_path: str) -> Dict[str, object]:
    """mmpoly's models of ``index_path``, with config and local weights paths made absolute
    (relative to the index's folder)."""
    index_path = osp.realpath(index_path)  # one entry per file, however it is named
    if index_path not in _LOADED:
        from modelindex.load_model_index import load
        index = load(index_path)
        index.build_models_with_collections()
        root = osp.dirname(index_path)
        models: Dict[str, object] = {}
        for metainfo in index.models:
            if not isinstance(metainfo.name, str) or not metainfo.name:
                where = getattr(metainfo, 'filepath', None) or index_path
                raise ValueError(f'a model of {where} (Config {metainfo.config!r}) has no Name; '
                                 'every model needs a Name (its hub name)')
            name = metainfo.name.lower()
            if name in models:
                raise ValueError(f'model name {metainfo.name!r} appears twice in {index_path}')
            if metainfo.config is None:
                raise ValueError(f'model {metainfo.name!r} of {index_path} has no Config')
            metainfo.config = _absolute(metainfo.config, root)
            if metainfo.weights:
                metainfo.weights = _absolute(metainfo.weights, root)
            metainfo.__class__ = _hub_model_class(type(metainfo))  # its config, read by the hub
            models[name] = metainfo
        _LOADED[index_path] = models
    return _LOADED[index_path]


@functools.lru_cache(maxsize=None)
def mmpretrain_model_names() -> FrozenSet[str]:
    """Every ``Name`` (lower case) in the metafiles of mmpretrain's ``model-index.yml``: its
    models' names, and a few collection names. Read as text (mmpretrain parses the same files on
    its first hub lookup, which takes about a second)."""
    from importlib.metadata import distribution
    mim = osp.join(str(distribution('mmpretrain').locate_file('mmpretrain')), '.mim')
    with open(osp.join(mim, 'model-index.yml'), encoding='utf-8') as f:
        metafiles = re.findall(r'^\s*-\s*(\S+\.ya?ml)\s*$', f.read(), re.M)
    names = set()
    for metafile in metafiles:
        with open(osp.join(mim, metafile), encoding='utf-8') as f:
            names.update(name.lower() for name in re.findall(
                r'^\s*(?:-\s*)?Name:\s*[\'"]?([^\'"\s]+)[\'"]?\s*$', f.read(), re.M))
    return frozenset(names)


def register_model_hub(index_path: Optional[str] = None) -> List[str]:
    """Register mmpoly's model index (or the one at ``index_path``, in the same format) with
    mmpretrain's model hub (idempotent); names mmpretrain uses keep mmpretrain's model.

    Returns:
        The (lower-case) model names of the index.

    Raises:
        ValueError: a name of the index is registered already by another index (mmpretrain's
            ``ModelHub.register_model_index`` refuses such a conflict too); nothing of the index
            is registered then.
    """
    from mmpretrain.apis.model import ModelHub

    models = _load(index_path or model_index_path())
    shared = mmpretrain_model_names()
    added = {name: metainfo for name, metainfo in models.items() if name not in shared}
    for name, metainfo in added.items():
        registered = ModelHub._models_dict.get(name)
        if registered is not None and registered is not metainfo:
            raise ValueError(f'model name {name!r} of {getattr(metainfo, "filepath", None)} is '
                             f'registered already, from '
                             f'{getattr(registered, "filepath", None)}; rename the model')
    ModelHub._models_dict.update(added)
    return sorted(models)


@functools.lru_cache(maxsize=None)
def _hub_model_class(model_class: type) -> type:
    """``model_class`` (modelindex's ``Model``) with a ``config`` that, given as a path, is read
    on first use (and kept) importing its ``custom_imports`` except ``mmpoly.engine``.

    ``ModelHub.get`` reads a config path with all its ``custom_imports``, and mmpoly's configs
    list ``mmpoly.engine`` there for the runners that train them, which installs the safe
    checkpoint loader and the atomic file backend for the whole process. The hub only builds a
    model and its test pipeline (``mmpoly.models``, ``mmpoly.datasets``), so getting a model
    changes how mmengine loads and saves files no more than importing mmpoly does."""
    def get_config(self):
        value = self.data.get('Config')
        if isinstance(value, str):
            from mmengine.config import Config
            from mmengine.utils import import_modules_from_strings
            value = Config.fromfile(value, import_custom_modules=False)
            custom = value.get('custom_imports') or {}
            imports = custom.get('imports', [])
            imports = [imports] if isinstance(imports, str) else imports
            import_modules_from_strings(
                [m for m in imports if m != ENGINE and not m.startswith(f'{ENGINE}.')],
                custom.get('allow_failed_imports', False))
            self.data['Config'] = value
        return value

    def set_config(self, value) -> None:
        self.data['Config'] = value

    return type('MmpolyHubModel', (model_class, ),
                dict(config=property(get_config, set_config), __doc__=_hub_model_class.__doc__))


def mmpoly_model_names() -> List[str]:
    """The names of mmpoly's models in the hub (the ``Name`` entries of configs/metafile.yml)."""
    return sorted(_load(model_index_path()))
