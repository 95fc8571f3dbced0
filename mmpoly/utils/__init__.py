from .setup_env import register_all_modules

__all__ = ['register_all_modules']
