"""Registering mmpoly's modules with OpenMMLab's registries."""
import mmpretrain.utils


def register_all_modules(init_default_scope: bool = True) -> None:
    """Import every mmpoly module (registering it in mmpretrain's and mmdet's registries) and
    mmpretrain's, and register mmpoly's classifiers with mmpretrain's model hub.

    Like mmpretrain's own ``register_all_modules`` (which imports ``mmpretrain.engine``), this
    imports :mod:`mmpoly.engine`, the runner side: its hooks, and the safe checkpoint loader and
    atomic file backend it installs in mmengine. ``import mmpoly.models`` alone changes nothing
    in mmengine.

    Args:
        init_default_scope: set the default registry scope to ``mmpretrain``, where mmpoly's
            modules live, as mmpretrain's own ``register_all_modules`` does.
    """
    import mmpoly.datasets  # noqa: F401
    import mmpoly.engine  # noqa: F401
    import mmpoly.models  # noqa: F401
    from .model_hub import register_model_hub
    register_model_hub()
    mmpretrain.utils.register_all_modules(init_default_scope)
