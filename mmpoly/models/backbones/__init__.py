from .poly_resnet import (PDCResNet, PDCResNetCIFAR, PolyResNet, PolyResNetBase, PolyResNetCIFAR,
                          build_block)

__all__ = ['PolyResNetBase', 'PolyResNet', 'PolyResNetCIFAR', 'PDCResNet', 'PDCResNetCIFAR',
           'build_block']
