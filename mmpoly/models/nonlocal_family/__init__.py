"""The non-local family (degree 3 and 4), plugged in after chosen backbone stages.

    NL          Y = (Z C1)(Z C2)ᵀ Z C3                                   degree 3
    DNL         NL (whitened) + unary (Z c4) term, C3 shared            degree 3 (+ 2)
    PDC-NL[3]   (Z C1)(Z C2)ᵀ Z C3 + (Z C4) Z C5 + Z C6, nothing shared  degree 3 (+ 2 + 1)
    PDC-NL[4]   Y[3] + Y[3] ∗ r(p(Z C7) C8)                              degree 4

The product of factors here is a contraction over positions (:func:`pairwise_product`), the
non-local counterpart of the core's Hadamard product. Use in a backbone, e.g.::

    backbone=dict(type='PolyResNetCIFAR', plugins=[
        dict(cfg=dict(type='PDCNonLocal3', reduction=4), stages=(True, True, True, True),
             stage_cfgs=[dict(spatial_size=(s, s)) for s in (32, 16, 8, 4)])])
"""
from .attention import (NonLocalBase, factor_mix, factor_positions, mix_chunk_size,
                        mix_positions, normalise_over_positions, pairwise_product, to_map,
                        to_positions)
from .dnl import DisentangledNonLocalBlock
from .nl import NonLocalBlock
from .pdc_nl import PDCNonLocal3, PDCNonLocal4

__all__ = [
    'NonLocalBase', 'NonLocalBlock', 'DisentangledNonLocalBlock', 'PDCNonLocal3', 'PDCNonLocal4',
    'pairwise_product', 'mix_positions', 'normalise_over_positions', 'to_positions', 'to_map',
    'factor_positions', 'factor_mix', 'mix_chunk_size'
]
