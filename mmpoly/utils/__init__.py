from .classifier_backbone import classifier_backbone, classifier_checkpoint, mmpoly_config_path
from .setup_env import register_all_modules

__all__ = ['register_all_modules', 'classifier_backbone', 'classifier_checkpoint',
           'mmpoly_config_path']
