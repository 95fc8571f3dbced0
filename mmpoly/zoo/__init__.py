"""The paper's tables as data: which mmpoly config reproduces which row, and the paper's figures.

``tools/analysis_tools/paper_table.py`` and the README's model table are generated from
:func:`paper_rows`; the tests pin every row's measured parameter count.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class PaperRow:
    """One row of a paper table.

    Attributes:
        table: the paper table's short name; with the table numbers of arXiv:2104.07916:
            T-C100 = Table 2 (CIFAR-100), T-C10 = Table 3 (CIFAR-10), T-IN = Table 4
            (ImageNet), T-NLC / T-NLI = Tables 5 / 6 (non-local, CIFAR-100 / ImageNet),
            T-SC = Table 7 (Speech Commands), T-C100-34 = Table 9 (ResNet34, CIFAR-100),
            T-NA100 / T-NA10 = Tables 10 / 11 (no activation functions, CIFAR-100 /
            CIFAR-10), T-NASC = Table 12 (Speech Commands, no activation functions).
        model: the row's model name as printed in the paper.
        config: config path relative to ``configs/``.
        family: block family ('ResNet', 'SE', 'Π-net', 'PDC', 'NL', 'DNL', 'PDC-NL').
        degree: polynomial degree of the block (per block, activations ignored).
        paper_params: the paper's parameter count, in millions, as printed.
        params_digits: decimals printed in the paper (11.2 -> 1, 11.57 -> 2).
        paper_flops: the paper's FLOPs in G (None where the paper gives none).
        flops_digits: decimals printed for FLOPs.
        input_size: (H, W) of the input used for FLOPs (and for modules tied to a resolution).
        in_channels: input channels (3 images, 1 log-mel spectrograms).
        claimed_match: True where the config is claimed to reproduce the paper's count at its
            printed precision (asserted by the tests); False for known misfits (no configuration
            found that reproduces the count; the note gives the nearest).
        note: how the configuration was chosen, or why it cannot match.
    """
    table: str
    model: str
    config: str
    family: str
    degree: int
    paper_params: float
    params_digits: int
    paper_flops: Optional[float] = None
    flops_digits: int = 2
    input_size: Tuple[int, int] = (32, 32)
    in_channels: int = 3
    claimed_match: bool = True
    note: str = ''


def paper_rows() -> List[PaperRow]:
    """Every row of every reproduced table: the residual-block tables, the non-local tables,
    then the Speech Commands tables."""
    from .nonlocal_family import NONLOCAL_ROWS
    from .resnet_family import RESNET_ROWS
    from .speech_family import SPEECH_ROWS
    return list(RESNET_ROWS) + list(NONLOCAL_ROWS) + list(SPEECH_ROWS)


__all__ = ['PaperRow', 'paper_rows']
