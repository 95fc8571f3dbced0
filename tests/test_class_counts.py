"""ModelCheckHook's class-count check: every ``num_classes`` of a model against the classes of
the data it trains or is evaluated on.

A classifier whose labels reach past its outputs failed on an index error in the loss (on a GPU,
a device-side assertion that names nothing); a detector with fewer classes than its data read
the labels past its last class as background and trained on, without a word; one with more
broke its COCO evaluation. mmpoly's configs (classification and detection) switch the check on.
"""
import inspect
from pathlib import Path
from typing import Any, Dict, List, Optional

import mmdet
import pytest
import torch
from helpers import FASHION_MNIST, REPO, experiment_name, load_tool
from mmdet.registry import DATASETS as DET_DATASETS
from mmdet.registry import MODELS as DET_MODELS
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmengine.runner import Runner
from mmpretrain.registry import DATASETS, MODELS
from test_datasets import make_cifar100, make_fashion_mnist

from mmpoly.datasets import LocalCIFAR100, LocalFashionMNIST
from mmpoly.engine import STARTUP_REFUSALS, ClassCountError, ModelCheckHook
from mmpoly.engine.hooks import class_count_problem, class_counts
from mmpoly.utils import register_all_modules
from mmpoly.utils.complexity import build_model


class Labelled:
    """A dataset of the given labels whose metainfo names ``names`` classes (or none)."""

    def __init__(self, labels: List[int], names: Optional[int]) -> None:
        self.labels = labels
        self.metainfo = {} if names is None else {
            'classes': tuple(f'c{i}' for i in range(names))}

    def __len__(self) -> int:
        return len(self.labels)

    def get_data_info(self, index: int) -> dict:
        return {'gt_label': self.labels[index]}


def _classifier_cfg(num_classes: int) -> dict:
    """A small PDC classifier of grey images; its loss smooths labels over ``num_classes``."""
    return dict(
        type='ImageClassifier',
        backbone=dict(type='PDCResNetCIFAR', depth=None, stage_blocks=[1, 1],
                      stage_channels=[8, 16], in_channels=1, out_indices=(1, )),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=num_classes, in_channels=16,
                  loss=dict(type='LabelSmoothLoss', label_smooth_val=0.1,
                            num_classes=num_classes)))


def _classifier(num_classes: int) -> Any:
    return MODELS.build(_classifier_cfg(num_classes))


def test_class_counts_are_the_heads_and_losses() -> None:
    register_all_modules()
    assert class_counts(_classifier(10)) == ('classifier', {'head': 10, 'head.loss_module': 10})
    tta = MODELS.build(dict(type='AverageClsScoreTTA', module=_classifier_cfg(10)))
    assert class_counts(tta) == class_counts(_classifier(10))
    # mmpretrain's VGG keeps num_classes=-1 for "no classifier of its own": not a count
    vgg = MODELS.build(dict(type='ImageClassifier', backbone=dict(type='VGG', depth=11),
                            neck=dict(type='GlobalAveragePooling'),
                            head=dict(type='LinearClsHead', num_classes=10, in_channels=512)))
    assert vgg.backbone.num_classes == -1 and class_counts(vgg) == ('classifier', {'head': 10})
    assert class_count_problem(vgg, Labelled([0, 9], 10), 'train_dataloader') is None
    cascade = build_model(Config.fromfile(
        str(REPO / 'configs' / 'cascade-mask-rcnn_pdc-resnet18_fpn_1x_coco.py')))
    assert class_counts(cascade) == ('detector', {  # not the RPN head's one class ("object")
        **{f'roi_head.bbox_head.{i}': 80 for i in range(3)},
        **{f'roi_head.mask_head.{i}': 80 for i in range(3)}})


def test_other_models_and_other_heads_are_not_compared() -> None:
    """A retriever's labels are gallery indices, not classes; a detector's semantic head has
    classes of its own (HTC's 183 stuff and thing classes beside 80 box classes)."""
    register_all_modules()
    retriever = MODELS.build(dict(
        type='ImageToImageRetriever', image_encoder=[
            dict(type='ResNet', depth=18), dict(type='GlobalAveragePooling')],
        head=dict(type='ArcFaceClsHead', num_classes=3, in_channels=512),
        prototype=torch.zeros(4, 512)))
    assert class_counts(retriever) == (None, {})
    assert class_count_problem(retriever, Labelled([[0, 1], [6, 7]], None),
                               'val_dataloader') is None
    with DefaultScope.overwrite_default_scope('mmdet'):
        htc = DET_MODELS.build(Config.fromfile(str(
            Path(mmdet.__file__).parent / '.mim' / 'configs' / 'htc' / 'htc_r50_fpn_1x_coco.py'
        )).model)
    kind, counts = class_counts(htc)
    assert kind == 'detector' and htc.roi_head.semantic_head.num_classes == 183
    assert set(counts.values()) == {80} and len(counts) == 6  # 3 box and 3 mask heads
    coco = DET_DATASETS.get('LocalCocoDataset').METAINFO['classes']
    dataset = Labelled([], 80)
    dataset.metainfo['classes'] = coco
    assert class_count_problem(htc, dataset, 'train_dataloader') is None


@pytest.mark.parametrize('labels, names', [
    ([0, 3, 9], 10),  # as many classes as outputs
    ([0, 3, 7], 8),  # fewer: outputs the data never has are allowed
    ([0, 3, 9], 1000),  # ImageNet's 1,000 names on labels 0-9 (Fashion-MNIST converted)
    ([0, 3, 9], None),  # no names: the labels decide
    ([[0, 2], [9]], None),  # multi-label
])
def test_a_classifier_takes_labels_below_its_outputs(labels: list, names: Optional[int]
                                                     ) -> None:
    register_all_modules()
    assert class_count_problem(_classifier(10), Labelled(labels, names), 'train_dataloader') \
        is None


def test_a_dataset_that_names_no_classes_and_reads_no_labels_is_not_checked() -> None:
    """A torch Dataset (no metainfo, no get_data_info): nothing to compare with."""
    register_all_modules()
    assert class_count_problem(_classifier(10), torch.utils.data.TensorDataset(
        torch.zeros(3, 1, 8, 8), torch.tensor([0, 42, 99])), 'train_dataloader') is None


@pytest.mark.parametrize('names', [100, None])
def test_a_classifier_refuses_labels_past_its_outputs(names: Optional[int]) -> None:
    register_all_modules()
    problem = class_count_problem(_classifier(10), Labelled([0, 42, 99], names),
                                  'val_dataloader')
    assert problem == (
        'model.head.num_classes=10, model.head.loss_module.num_classes=10 are too few for the '
        'labels of val_dataloader.dataset (Labelled): its sample 1 has label 42; the model '
        'cannot predict it, and the evaluation would count it wrong. Set num_classes to the '
        'number of classes of the data (at least 43)')
    assert 'index error' in class_count_problem(_classifier(10), Labelled([0, 42, 99], names),
                                                'train_dataloader')


def test_a_detector_needs_exactly_its_data_s_classes() -> None:
    register_all_modules()
    detector = build_model(Config.fromfile(
        str(REPO / 'configs' / 'mask-rcnn_resnet18_fpn_1x_coco.py')))
    coco = DET_DATASETS.get('LocalCocoDataset').METAINFO['classes']
    assert class_count_problem(detector, Labelled([], 80), 'train_dataloader') is None
    for names in (10, 91):  # fewer (background) and more (the evaluation breaks)
        dataset = Labelled([], names)
        dataset.metainfo['classes'] = coco[:names] if names < 80 else \
            coco + tuple(f'x{i}' for i in range(names - 80))
        assert class_count_problem(detector, dataset, 'val_dataloader') == (
            f'model.roi_head.bbox_head.num_classes=80, model.roi_head.mask_head.num_classes=80 '
            f"do not match the {names} classes of val_dataloader.dataset (Labelled: 'person', "
            "'bicycle', 'car', ...): a detector reads the labels past its last class as "
            'background, and its COCO evaluation fails on classes the data does not have. Set '
            f'num_classes={names} there (every box and mask head), or give the dataset the '
            'classes of the model (metainfo=dict(classes=...))')


def _runner(tmp_path: Path, num_classes: int, val_dataset: Optional[dict] = None) -> Runner:
    make_fashion_mnist(tmp_path / 'fashion')
    fashion = dict(type='LocalFashionMNIST', data_root=str(tmp_path / 'fashion'),
                   pipeline=[dict(type='PackInputs')])
    val = dict(dataloader=dict(dataset=val_dataset or dict(fashion, split='test'), batch_size=2,
                               sampler=dict(type='DefaultSampler', shuffle=False)),
               evaluator=dict(type='Accuracy'), cfg=dict())
    return Runner(
        model=_classifier_cfg(num_classes),
        work_dir=str(tmp_path / 'work'),
        train_dataloader=dict(dataset=fashion, batch_size=2,
                              sampler=dict(type='DefaultSampler', shuffle=True)),
        val_dataloader=val['dataloader'], val_evaluator=val['evaluator'], val_cfg=val['cfg'],
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.01)),
        train_cfg=dict(by_epoch=True, max_epochs=1, val_interval=1),
        default_hooks=dict(checkpoint=dict(type='CheckpointHook', interval=1)),
        custom_hooks=[dict(type='ModelCheckHook')], default_scope='mmpretrain',
        experiment_name=experiment_name('class_counts'))


def test_a_run_stops_before_its_first_step(tmp_path: Path) -> None:
    """Refused before any step: the training data, and the validation data before training.
    tools/train.py and tools/test.py report a ClassCountError as one message, no traceback."""
    register_all_modules()
    assert ClassCountError in STARTUP_REFUSALS
    runner = _runner(tmp_path, 5)
    with pytest.raises(ClassCountError, match=r'^model\.head\.num_classes=5, model\.head\.'
                       r'loss_module\.num_classes=5 are too few for the labels of '
                       r'train_dataloader\.dataset \(LocalFashionMNIST\): its sample \d+ has '
                       r'label \d; the loss would fail'):
        runner.train()
    assert runner.iter == 0 and not list((tmp_path / 'work').glob('*.pth'))
    # CIFAR-100's labels as the validation data of a 10-class model: refused before training
    make_cifar100(tmp_path / 'cifar100')
    cifar = dict(type='LocalCIFAR100', data_root=str(tmp_path / 'cifar100'), split='test',
                 verify_checksums=False, pipeline=[dict(type='PackInputs')])
    assert max(LocalCIFAR100(data_root=str(tmp_path / 'cifar100'), split='test',
                             verify_checksums=False).get_gt_labels()) >= 10
    runner = _runner(tmp_path, 10, val_dataset=cifar)
    with pytest.raises(ClassCountError, match=r'^model\.head\.num_classes=10, model\.head\.'
                       r'loss_module\.num_classes=10 are too few for the labels of '
                       r'val_dataloader\.dataset \(LocalCIFAR100\)'):
        runner.train()
    assert runner.iter == 0
    # the same model on its own data trains
    runner = _runner(tmp_path, 10)
    runner.train()
    assert runner.iter == 3 and len(LocalFashionMNIST(data_root=str(tmp_path / 'fashion'))) == 6


def test_the_check_is_on_in_every_config_and_their_counts_fit_their_data() -> None:
    """Every shipped config lists ModelCheckHook, and its heads' num_classes are the number of
    classes of its training data (from the dataset's metainfo, its class's METAINFO or, for
    Speech Commands, its words and extra classes)."""
    register_all_modules()

    def classes(dataset: Dict[str, Any]) -> Optional[int]:
        if (dataset.get('metainfo') or {}).get('classes'):
            return len(dataset['metainfo']['classes'])
        if 'dataset' in dataset:  # the data-regime wrappers
            return classes(dataset['dataset'])
        registry = DET_DATASETS if dataset['type'] == 'LocalCocoDataset' else DATASETS
        cls = registry.get(dataset['type'])
        if dataset['type'] == 'SpeechCommands':
            words = inspect.signature(cls).parameters['words'].default
            return len(words) + bool(dataset.get('unknown')) + bool(dataset.get('silence_ratio'))
        return len(cls.METAINFO['classes'])

    configs = sorted(REPO.glob('configs/*.py'))
    assert len(configs) > 100
    for config in configs:
        cfg = Config.fromfile(str(config))
        assert 'ModelCheckHook' in [hook.type for hook in cfg.custom_hooks], config.name
        model = cfg.model
        if 'head' in model:
            counts = [model.head.num_classes]
        else:
            boxes = model.roi_head.bbox_head
            counts = [head.num_classes for head in (boxes if isinstance(boxes, list) else [boxes])]
            counts.append(model.roi_head.mask_head.num_classes)
        assert set(counts) == {classes(cfg.train_dataloader.dataset)}, config.name


@pytest.mark.skipif(not (FASHION_MNIST / 'train-images-idx3-ubyte.gz').is_file(),
                    reason='tools/setup_env.sh installs Fashion-MNIST')
def test_train_tool_prints_the_mismatch_as_one_message(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture) -> None:
    """The command of docs/en/reliability.md (on 256 images): one message, exit status 1."""
    with pytest.raises(SystemExit) as exit_info:
        load_tool('train').main([
            str(REPO / 'configs' / 'pdc_resnet8_1xb128_fashion-mnist.py'), '--work-dir',
            str(tmp_path), '--cfg-options', 'model.head.num_classes=5',
            'train_dataloader.dataset.indices=256'])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        'tools/train.py: error: model.head.num_classes=5 is too few for the labels of '
        'train_dataloader.dataset (LocalFashionMNIST): its sample 0 has label 9; the loss would '
        'fail on an index error (on a GPU, a device-side assertion). Set num_classes to the '
        'number of classes of the data (at least 10)')
    assert not list(tmp_path.glob('*.pth'))
