"""mmpoly's ground floor: safe checkpoint loading, atomic writes and the one state-dict
comparison. It imports nothing else of mmpoly and changes nothing in mmengine, so models and
datasets use it freely; :mod:`mmpoly.engine` builds the runner-side patches on it."""
from .atomic import (TEMP_SUFFIX, DiskFullError, atomic_savefig, atomic_write, format_bytes,
                     free_bytes, fsync_dir)
from .checkpoint import (MMENGINE_CHECKPOINT_GLOBALS, TRUSTED_CHECKPOINTS_ENV,
                         CorruptCheckpointError, UnsafeCheckpointError, checkpoint_file_problem,
                         is_trusted_checkpoint, load_checkpoint_file, pickled_globals,
                         refused_globals, trusted_checkpoint_paths)
from .state_dict import MAX_LISTED_KEYS, StateDictMismatch, compare_state_dicts

__all__ = [
    'TEMP_SUFFIX', 'DiskFullError', 'atomic_savefig', 'atomic_write', 'format_bytes', 'free_bytes',
    'fsync_dir',
    'MMENGINE_CHECKPOINT_GLOBALS', 'TRUSTED_CHECKPOINTS_ENV', 'CorruptCheckpointError',
    'UnsafeCheckpointError', 'checkpoint_file_problem', 'is_trusted_checkpoint',
    'load_checkpoint_file', 'pickled_globals', 'refused_globals', 'trusted_checkpoint_paths',
    'MAX_LISTED_KEYS', 'StateDictMismatch', 'compare_state_dicts'
]
