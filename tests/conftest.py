"""Test isolation: every test starts in mmpretrain's registry scope (where mmpoly registers its
modules), whatever scope an earlier test's Runner left as mmengine's current default scope.
And the order: the files with the most test work first."""
from typing import List

import pytest
from mmengine.registry import DefaultScope

import mmpoly.utils

mmpoly.utils.register_all_modules(init_default_scope=False)


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield


#: The files with the most test work, most first (seconds summed over their tests, two workers
#: of one thread, 2-core Xeon, 2026-11-28: 862, 419, 317, 301, 218, 191, 150). tools/run_tests.sh
#: hands out whole files (--dist loadfile) in collection order: alphabetically, the short
#: detection protocol (one 14-minute test) started 14 minutes into a 29-minute run and ended it.
#: Longest first, the small files fill in the end of both workers.
LONGEST_FILES = ('test_detection_protocol.py', 'test_detection.py', 'test_zoo_suite.py',
                 'test_nonlocal_training.py', 'test_onnx.py', 'test_gpu_report.py',
                 'test_reliability.py')


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FILES)))  # stable
