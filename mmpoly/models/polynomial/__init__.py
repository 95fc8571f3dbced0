"""The polynomial core shared by every block family: factors, products, projections, terms."""
from .factor import Factor, Projection, hadamard_product
from .gate import ChannelGate
from .options import (BLOCK_NORM, NO_LAYER, act_cfg_option, block_norm_cfg, check_choice,
                      check_non_negative_int, check_norm_channels, check_number,
                      check_odd_kernel, check_positive_int, norm_cfg_option, per_stage)
from .term import PolynomialTerm

__all__ = [
    'ChannelGate', 'Factor', 'Projection', 'hadamard_product', 'PolynomialTerm', 'NO_LAYER',
    'BLOCK_NORM', 'act_cfg_option', 'norm_cfg_option', 'block_norm_cfg', 'check_norm_channels',
    'check_choice', 'check_non_negative_int', 'check_number', 'check_odd_kernel',
    'check_positive_int', 'per_stage'
]
