"""Blocks by degree: ResNet (1), SE (2), Π-net (N, shared factors), PDC (N, no sharing)."""
from .basic import ResNetBlock
from .pdc import PDCBlock
from .pinet import PiNetBlock
from .se import SEBlock

__all__ = ['ResNetBlock', 'SEBlock', 'PiNetBlock', 'PDCBlock']
