"""Rows of the audio tables: T-SC (Table 7 of arXiv:2104.07916, Speech Commands with ResNet7 and
ResNet18 variants) and T-NASC (Table 12, Speech Commands without activation functions).

The configs take the paper's input, a 32×32 log-mel spectrogram (1 channel), and have 37 outputs
(the 35 words, ``_unknown_`` and ``_silence_``); every count also rounds to the paper's figure
with the paper's 35 outputs (a head of C input channels then has 2·(C + 1) parameters fewer). The
paper gives no FLOPs for these tables. Each row's note says how its configuration was chosen
(EXACT, FIT, GUESS).
"""
from typing import List

from . import PaperRow

#: The input of the speech configs: 1 × 32 × 32 log-mel features.
SPEECH = dict(input_size=(32, 32), in_channels=1)
DATA = 'speech-commands'

RESNET7 = ('EXACT: the CIFAR ResNet with one basic block per stage (the paper: "one residual '
           'block per group"), 64-128-256-512')
SE_FIT = 'FIT: SE reduction 4 (as T-C10\'s SENet)'
STANDARD = 'standard configuration (CIFAR ResNet18, 1 input channel)'


def _rows(table: str, rows: list) -> List[PaperRow]:
    return [PaperRow(table, model, f'{prefix}_1xb128_{DATA}.py', family, degree, params, 1,
                     note=note, **SPEECH)
            for model, prefix, family, degree, params, note in rows]


SPEECH_ROWS: List[PaperRow] = [
    *_rows('T-SC', [
        ('ResNet7', 'resnet7', 'ResNet', 1, 4.9, RESNET7),
        ('SENet (7)', 'se_resnet7', 'SE', 2, 5.1, f'{SE_FIT}, on ResNet7'),
        ('PDC (7)', 'pdc_resnet7', 'PDC', 2, 3.9,
         'GUESS: the compressed PDC configuration (64-128-192-256, factor widths '
         '64-64-128-128) with one degree-2 block per stage and both convs in the first-degree '
         'branch'),
        ('ResNet18', 'resnet18', 'ResNet', 1, 11.2, STANDARD),
        ('SENet', 'se_resnet18', 'SE', 2, 11.5, SE_FIT),
        ('Π-net-ResNet', 'pinet_resnet18', 'Π-net', 2, 6.0,
         'GUESS: T-C10\'s Π-net-ResNet, blocks [2, 2, 1, 1], two 1×1 convs + BN on the product'),
        ('PDC', 'pdc_resnet18', 'PDC', 2, 8.0,
         'GUESS: T-C10\'s PDC, the official compressed configuration with factor widths '
         '128-128-256-384'),
    ]),
    *_rows('T-NASC', [
        ('ResNet18', 'noact_resnet18', 'ResNet', 1, 11.2,
         'standard configuration without activations'),
        ('Π-net-ResNet', 'pinet-noact_resnet18', 'Π-net', 2, 11.9,
         'FIT: as T-NA10\'s Π-net, BN on the shared factor, one 1×1 conv + BN on the product'),
        ('PDC', 'pdc-noact_resnet18', 'PDC', 2, 5.4,
         'FIT: as T-NA10\'s PDC, the compressed configuration with factor widths '
         '128-128-256-256 and a 1×1 projection'),
    ]),
]
