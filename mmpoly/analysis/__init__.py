"""Analysis of built models: the numerical polynomial degree of blocks and backbones."""
from .degree import (MAX_MEASURABLE_DEGREE, PARTS, DegreeReport, DegreeRow, FrozenStatsNorm,
                     analyse_backbone, analyse_config, finite_differences, freeze_norms,
                     numerical_degree, polynomial_config, randomise_parameters)

__all__ = ['numerical_degree', 'finite_differences', 'randomise_parameters', 'FrozenStatsNorm',
           'freeze_norms', 'polynomial_config', 'analyse_backbone', 'analyse_config', 'DegreeRow',
           'DegreeReport', 'MAX_MEASURABLE_DEGREE', 'PARTS']
