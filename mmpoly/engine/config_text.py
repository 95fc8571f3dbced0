"""A runner's config formats its text once, not at every checkpoint, and dumps it atomically.

mmengine 0.10.7 renders ``Config.pretty_text`` (the whole config through yapf) each time it is
read: when the Runner logs the config, when it dumps it to the work_dir, in
``RuntimeInfoHook.before_run`` and in **every** ``Runner.save_checkpoint`` (``meta['cfg']``). For
a Mask R-CNN config one rendering takes about 2.4 s on a 2-core CPU: in a run that checkpoints
every epoch, seconds per epoch spent formatting the same text again.

:class:`TextCachingConfig` is a ``Config`` whose ``pretty_text`` is rendered once per content:
the cache is keyed by the config's values (``repr`` of ``to_dict()``) and the formatting flag, so
a config edited during a run is rendered again and the text always equals mmengine's.
:func:`mmpoly.engine.build_runner` gives the Runner such a config (the Runner deep-copies its
``cfg``, and the copy keeps the class).

Its ``dump`` to a ``.py`` file (``Runner.dump_config``: the run's config in its work_dir) writes
the same text as mmengine's with :func:`mmpoly.fileio.atomic_write`; mmengine 0.10.7 writes it
with a plain ``open(file, 'w')``, so a run killed during the write left a truncated config.
"""
from pathlib import Path
from typing import Optional, Union

from mmengine.config import Config

from mmpoly.fileio import atomic_write

__all__ = ['TextCachingConfig', 'caching_pretty_text']

_CACHE = '_pretty_text_cache'


class TextCachingConfig(Config):
    """``Config`` with ``pretty_text`` rendered once per content (see the module docstring)."""

    @property
    def pretty_text(self) -> str:
        key = (repr(self.to_dict()), self._format_python_code)
        cached = self.__dict__.get(_CACHE)  # (key, text) of the newest content
        if cached is None or cached[0] != key:
            cached = (key, Config.pretty_text.fget(self))
            object.__setattr__(self, _CACHE, cached)
        return cached[1]

    def dump(self, file: Optional[Union[str, Path]] = None) -> Optional[str]:
        """mmengine's ``Config.dump``; a ``.py`` file is written atomically."""
        if file is not None and str(file).endswith('.py'):
            atomic_write(self.pretty_text, str(file))
            return None
        return super().dump(file)


def caching_pretty_text(cfg: Config) -> TextCachingConfig:
    """A shallow copy of ``cfg`` (the same values) as a :class:`TextCachingConfig`."""
    if isinstance(cfg, TextCachingConfig):
        return cfg
    cached = TextCachingConfig.__new__(TextCachingConfig)
    cached.__dict__.update(cfg.__dict__)
    cached.__dict__.pop(_CACHE, None)
    return cached
