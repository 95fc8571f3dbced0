"""Test isolation: every test starts in mmpretrain's registry scope (where mmpoly registers its
modules), whatever scope an earlier test's Runner left as mmengine's current default scope.

Test order: the files that take minutes run first, longest first, so that neither of the two
pytest-xdist workers of tools/run_tests.sh (``--dist loadfile --no-loadscope-reorder``: a file per
worker at a time, in this order) starts the 25-minute short detection protocol last. Measured on
the 2-core EPYC: 50 min 35 s with this order, 51 min 22 s before it (when the short protocol ran
last), so the suite's length is its total work, not the order."""
from typing import List

import pytest
from mmengine.registry import DefaultScope

import mmpoly.utils

mmpoly.utils.register_all_modules(init_default_scope=False)


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield


#: test files that take minutes on a 2-core CPU, longest first (worker minutes measured in the
#: suite runs of 2026-11-27: about 26, 20, 20, 6, 5, then 3–4 each); the others follow in
#: pytest's order
LONG_FILES = ('test_detection_protocol.py', 'test_zoo_suite.py', 'test_detection.py',
              'test_nonlocal_training.py', 'test_gpu_report.py', 'test_onnx.py',
              'test_reliability.py', 'test_benchmark.py', 'test_compile.py')


def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
