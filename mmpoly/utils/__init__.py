from .classifier_backbone import classifier_backbone, classifier_checkpoint, mmpoly_config_path
from .model_hub import mmpoly_model_names, model_index_path, register_model_hub
from .resources import resource_path
from .setup_env import register_all_modules

__all__ = ['register_all_modules', 'classifier_backbone', 'classifier_checkpoint',
           'mmpoly_config_path', 'register_model_hub', 'model_index_path', 'mmpoly_model_names',
           'resource_path']
