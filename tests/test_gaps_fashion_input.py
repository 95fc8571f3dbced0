"""Fashion-MNIST inference input check: the test pipeline's ``CheckGreyImage`` refuses an image
unlike the dataset's (float, colour, another size) with one ValueError, through mmpretrain's real
inference API, and passes a valid image on unchanged (same pixels, same prediction)."""
import re
from pathlib import Path

import mmcv
import numpy as np
import pytest
import torch
from helpers import CONFIGS, FASHION_MNIST, fashion_mnist_test_images
from mmengine.config import Config
from mmpretrain import ImageClassificationInferencer, get_model, inference_model
from mmpretrain.registry import DATASETS, TRANSFORMS

from mmpoly.datasets import CheckGreyImage
from mmpoly.deploy import input_shape_from_config

ZOO = 'pdc_resnet8_1xb128-1400i_fashion-mnist'
FASHION_BASES = sorted((CONFIGS / '_base_' / 'datasets').glob('fashion-mnist*.py'))
needs_fmnist = pytest.mark.skipif(not (FASHION_MNIST / 't10k-images-idx3-ubyte.gz').is_file(),
                                  reason='tools/setup_env.sh installs Fashion-MNIST '
                                  '(dataset-fashion-mnist)')


@pytest.fixture(scope='module')
def zoo_model() -> torch.nn.Module:
    return get_model(ZOO, pretrained=True)


def _direct_scores(model: torch.nn.Module, images: np.ndarray, batch_size: int) -> np.ndarray:
    """Class scores of the model's own test step on the raw uint8 images in batches of
    ``batch_size``, no pipeline at all (what the Fashion-MNIST test pipeline of PackInputs alone
    gave): (N, 10)."""
    scores = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            batch = [torch.from_numpy(img)[None] for img in images[start:start + batch_size]]
            scores += [s.pred_score.numpy() for s in model.test_step(dict(inputs=batch))]
    return np.stack(scores)


# --------------------------------------------------------------------------- configs


def test_the_fashion_mnist_test_pipelines_check_the_image_and_training_does_not():
    assert len(FASHION_BASES) == 4, FASHION_BASES
    for path in FASHION_BASES:
        cfg = Config.fromfile(str(path))
        for loader in ('val_dataloader', 'test_dataloader'):
            pipeline = cfg[loader].dataset.pipeline
            assert [t['type'] for t in pipeline] == ['CheckGreyImage', 'PackInputs'], path
            assert tuple(pipeline[0]['size']) == (28, 28)
        train = cfg.train_dataloader.dataset
        train_pipeline = train.get('pipeline') or train.dataset.pipeline  # the subset wrappers
        assert 'CheckGreyImage' not in [t['type'] for t in train_pipeline], path
    # the deployment input size still comes from the dataset type
    assert input_shape_from_config(Config.fromfile(str(CONFIGS / f'{ZOO}.py'))) == (1, 28, 28)


def test_check_grey_image_is_registered_with_mmpretrain_transforms():
    transform = TRANSFORMS.build(dict(type='CheckGreyImage', size=[28, 28]))  # a dumped config
    assert type(transform) is CheckGreyImage and transform.size == (28, 28)
    assert repr(transform) == 'CheckGreyImage(size=(28, 28))'


@pytest.mark.parametrize('size', [28, (28, ), (28, 0), (28.0, 28), (True, 28), '28x28', None])
def test_a_bad_size_option_is_refused(size):
    with pytest.raises(ValueError, match=r'CheckGreyImage\.size must be \(H, W\), two positive '
                       rf'ints, got {re.escape(repr(size))}'):
        CheckGreyImage(size=size)


# --------------------------------------------------------------------------- the transform


@pytest.mark.parametrize('img', [
    np.arange(784, dtype=np.uint8).reshape(28, 28),
    np.arange(784, dtype=np.uint8).reshape(28, 28, 1),
    (np.arange(784) % 256).reshape(28, 28),  # int64, values 0..255
    (np.arange(784) % 256).astype(np.uint16).reshape(28, 28, 1),
], ids=['uint8', 'uint8-HW1', 'int64', 'uint16-HW1'])
def test_a_valid_image_passes_as_it_is(img: np.ndarray):
    copy = img.copy()
    results = dict(img=img, img_shape=img.shape[:2])
    out = CheckGreyImage()(results)
    assert out is results and out['img'] is img  # the same array: no conversion, no copy
    assert out['img'].dtype == copy.dtype and np.array_equal(out['img'], copy)


GREY = np.arange(784, dtype=np.uint8).reshape(28, 28)


@pytest.mark.parametrize('img, seen, fix', [
    (GREY.astype(np.float32) / 255, 'dtype float32, shape (28, 28), values in [0, 1]',
     'scale a float [0, 1] image by 255 and cast it to uint8 '
     '(np.round(img * 255).astype(np.uint8))'),
    (GREY.astype(np.float64), 'dtype float64, shape (28, 28), values in [0, 255]',
     'cast a float image on the 0..255 scale to uint8'),
    (np.repeat(GREY[..., None], 3, axis=2), 'dtype uint8, shape (28, 28, 3), values in [0, 255]',
     "convert the colour image to grey (mmcv.bgr2gray(img) for BGR, mmcv.rgb2gray(img) for RGB, "
     "or read the file with mmcv.imread(path, 'grayscale'))"),
    (np.zeros((32, 32), np.uint8), 'dtype uint8, shape (32, 32), values in [0, 0]',
     'resize it to 28×28 grey (mmcv.imresize(img, (28, 28)))'),
    (GREY[None], 'shape (1, 28, 28)', 'put the channel last or drop it: img[0]'),
    (np.stack([GREY, GREY]), 'shape (2, 28, 28)', 'give one grey image of shape (28, 28)'),
    (GREY.astype(np.int16) - 1, 'dtype int16, shape (28, 28), values in [-1, 254]',
     'bring its values into 0..255 and cast it to uint8'),
    (GREY > 100, 'dtype bool, shape (28, 28), values in [0, 1]', 'give a uint8 image'),
], ids=['float01', 'float255', 'colour', '32x32', 'CHW', 'batch', 'negative', 'bool'])
def test_a_bad_image_is_one_value_error_saying_what_and_how(img: np.ndarray, seen: str, fix: str):
    with pytest.raises(ValueError) as error:
        CheckGreyImage()(dict(img=img))
    message = str(error.value)
    assert message.startswith('img: got an array of '), message
    assert seen in message and fix in message, message
    assert ('expected a 28×28 single-channel numpy array, shape (28, 28) or (28, 28, 1), of dtype '
            'uint8 (or another integer dtype with values in 0..255)') in message


def test_a_colour_image_of_another_size_gets_both_fixes():
    message = str(pytest.raises(ValueError, CheckGreyImage(size=(20, 30)),
                                dict(img=np.zeros((40, 50, 3), np.float32))).value)
    assert 'dtype float32, shape (40, 50, 3), values in [0, 0]' in message
    assert 'a 20×30 single-channel numpy array, shape (20, 30) or (20, 30, 1)' in message
    fixes = message.split('To fix: ')[1].split('; ')
    assert [f.split(' (')[0] for f in fixes] == [
        'convert the colour image to grey', 'resize it to 20×30 grey',
        'scale a float [0, 1] image by 255 and cast it to uint8']
    assert 'mmcv.imresize(img, (30, 20))' in message  # mmcv takes (w, h)


def test_no_image_or_not_an_array_is_refused():
    with pytest.raises(ValueError, match=r"the results have no 'img' field \(keys: \['img_path'\]"):
        CheckGreyImage()(dict(img_path='x.png'))
    with pytest.raises(ValueError, match=r'img: got a Tensor, not a numpy array; expected a '
                       r'28×28 .* pass a numpy array'):
        CheckGreyImage()(dict(img=torch.zeros(28, 28, dtype=torch.uint8)))


# --------------------------------------------------------------------------- real inference


@needs_fmnist
def test_inference_on_real_images_is_unchanged(zoo_model: torch.nn.Module):
    """A real uint8 test image gives the scores of the model's own test step (no pipeline), as
    does its (28, 28, 1) form and an int64 copy; the inferencer's batch too."""
    images, labels = fashion_mnist_test_images(8)
    expected = _direct_scores(zoo_model, images, batch_size=1)
    assert np.mean(expected.argmax(1) == labels) >= 0.75  # the zoo weights, not random ones
    for img in (images[0], images[0][..., None], images[0].astype(np.int64)):
        result = inference_model(zoo_model, img)
        assert result['pred_label'] == int(expected[0].argmax())
        np.testing.assert_array_equal(np.asarray(result['pred_scores'], np.float32), expected[0])
    inferencer = ImageClassificationInferencer(zoo_model)
    transforms = [type(t).__name__ for t in inferencer.pipeline.transforms]
    assert transforms == ['CheckGreyImage', 'PackInputs']
    results = inferencer(list(images), batch_size=4)
    np.testing.assert_array_equal(np.stack([r['pred_scores'] for r in results]),
                                  _direct_scores(zoo_model, images, batch_size=4))


@needs_fmnist
def test_inference_on_a_bad_image_raises_and_the_suggested_fix_restores_the_prediction(
        zoo_model: torch.nn.Module, tmp_path: Path):
    images, _ = fashion_mnist_test_images(1)
    image = images[0]
    expected = inference_model(zoo_model, image)['pred_scores']

    scaled = image.astype(np.float32) / 255
    with pytest.raises(ValueError, match=r'img: got an array of dtype float32, shape \(28, 28\), '
                       r'values in \[0, 1\].*scale a float \[0, 1\] image by 255'):
        inference_model(zoo_model, scaled)
    fixed = inference_model(zoo_model, np.round(scaled * 255).astype(np.uint8))['pred_scores']
    np.testing.assert_array_equal(fixed, expected)

    # a PNG path: the inferencer reads it as a 3-channel BGR image
    path = tmp_path / 'item.png'
    assert mmcv.imwrite(image, str(path))
    inferencer = ImageClassificationInferencer(zoo_model)
    with pytest.raises(ValueError, match=r"shape \(28, 28, 3\).*mmcv.imread\(path, 'grayscale'\)"):
        inferencer(str(path))
    grey = mmcv.imread(str(path), 'grayscale')
    np.testing.assert_array_equal(inferencer(grey)[0]['pred_scores'], expected)

    with pytest.raises(ValueError, match=r'shape \(56, 56\).*resize it to 28×28 grey'):
        inferencer([image, np.kron(image, np.ones((2, 2), np.uint8))])


# --------------------------------------------------------------------------- dataset


@needs_fmnist
def test_the_test_set_pixels_are_unchanged_through_the_test_pipeline():
    """The runner's path (LocalFashionMNIST with the config's test pipeline) delivers the raw
    pixels and labels."""
    images, labels = fashion_mnist_test_images(3)
    cfg = Config.fromfile(str(CONFIGS / f'{ZOO}.py'))
    dataset_cfg = cfg.test_dataloader.dataset.copy()
    dataset = DATASETS.build(dict(dataset_cfg, indices=3))
    for i in range(3):
        item = dataset[i]
        assert item['inputs'].dtype == torch.uint8
        assert torch.equal(item['inputs'], torch.from_numpy(images[i])[None])
        assert int(item['data_samples'].gt_label) == labels[i]
