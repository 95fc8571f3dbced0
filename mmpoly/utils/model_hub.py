"""mmpoly's classifiers in mmpretrain's model hub (``list_models``, ``get_model``,
``inference_model``, ``ImageClassificationInferencer``), by config name.

``import mmpoly`` registers mmpoly's ``model-index.yml`` (the models of ``configs/metafile.yml``)
with :class:`mmpretrain.apis.ModelHub`; config paths, and the local ``Weights`` paths of the
Fashion-MNIST model zoo (``checkpoints/fashion-mnist/``), resolve under the installed package's
``.mim/`` or under the checkout (:func:`mmpoly.utils.resources.resource_path`), so
``get_model(name, pretrained=True)`` loads published weights offline.

mmpretrain registers its own models lazily, on the first hub lookup, and refuses names that are
already registered. mmpoly therefore wraps that lazy step: mmpoly's entries are set aside while
mmpretrain registers its models, then put back except where mmpretrain uses the same name. Such a
name keeps mmpretrain's meaning, so importing mmpoly changes nothing an mmpretrain user relies
on. The one such name is ``resnet18_8xb32_in1k``: mmpretrain's ResNet18 (with its ImageNet
weights) is the same network as mmpoly's degree-1 baseline; mmpoly's config is built by path,
``get_model(mmpoly_config_path('resnet18_8xb32_in1k.py'))``.
"""
import os.path as osp
from typing import Dict, List, Optional

from .resources import resource_path

__all__ = ['model_index_path', 'register_model_hub', 'mmpoly_model_names']

#: metainfo of mmpoly's models (lower-case name -> modelindex Model), per model-index path.
_LOADED: Dict[str, Dict[str, object]] = {}
_WRAPPED_ATTR = '_mmpoly_wraps_register'


def model_index_path() -> str:
    """``<package>/.mim/model-index.yml`` when installed, else the checkout's."""
    return resource_path('model-index.yml')


def _absolute(path: str, root: str) -> str:
    """``path`` joined to ``root`` unless it is absolute or a URL (``scheme://...``)."""
    return path if osp.isabs(path) or '://' in path else osp.join(root, path)


def _load(index_path: str) -> Dict[str, object]:
    """mmpoly's models of ``index_path``, with config and local weights paths made absolute
    (relative to the index's folder)."""
    if index_path not in _LOADED:
        from modelindex.load_model_index import load
        index = load(index_path)
        index.build_models_with_collections()
        root = osp.dirname(osp.abspath(index_path))
        models: Dict[str, object] = {}
        for metainfo in index.models:
            name = metainfo.name.lower()
            if name in models:
                raise ValueError(f'model name {metainfo.name!r} appears twice in {index_path}')
            if metainfo.config is None:
                raise ValueError(f'model {metainfo.name!r} of {index_path} has no Config')
            metainfo.config = _absolute(metainfo.config, root)
            if metainfo.weights:
                metainfo.weights = _absolute(metainfo.weights, root)
            models[name] = metainfo
        _LOADED[index_path] = models
    return _LOADED[index_path]


def _wrap_mmpretrain_registration(hub: type) -> None:
    """Make mmpretrain's lazy registration keep mmpoly's entries (once per process)."""
    if getattr(hub, _WRAPPED_ATTR, False):
        return
    original = hub.__dict__['_register_mmpretrain_models'].__func__

    def register_mmpretrain_models(cls) -> None:
        ours = {name: cls._models_dict.pop(name) for name in list(cls._models_dict)
                if getattr(cls._models_dict[name], '_mmpoly', False)}
        try:
            original(cls)
        finally:  # mmpretrain's own entries win a shared name (see the module docstring)
            cls._models_dict.update(
                {name: metainfo for name, metainfo in ours.items() if name not in cls._models_dict})

    hub._register_mmpretrain_models = classmethod(register_mmpretrain_models)
    setattr(hub, _WRAPPED_ATTR, True)


def register_model_hub(index_path: Optional[str] = None) -> List[str]:
    """Register mmpoly's model index (or the one at ``index_path``, in the same format) with
    mmpretrain's model hub (idempotent).

    Returns:
        The registered (lower-case) model names.
    """
    from mmpretrain.apis.model import ModelHub

    _wrap_mmpretrain_registration(ModelHub)
    models = _load(index_path or model_index_path())
    for name, metainfo in models.items():
        metainfo._mmpoly = True  # marks mmpoly's entries for the wrapper above
        ModelHub._models_dict[name] = metainfo
    return sorted(models)


def mmpoly_model_names() -> List[str]:
    """The names of mmpoly's models in the hub (the ``Name`` entries of configs/metafile.yml)."""
    return sorted(_load(model_index_path()))
