"""Test isolation: every test starts in mmpretrain's registry scope (where mmpoly registers its
modules), whatever scope an earlier test's Runner left as mmengine's current default scope.

And the order in which tools/run_tests.sh hands test files to its workers: the longest first."""
from typing import List

import pytest
from mmengine.registry import DefaultScope
from test_tools import tiny_setup  # noqa: F401  (a fixture, for the test modules that use it)

import mmpoly.utils

mmpoly.utils.register_all_modules(init_default_scope=False)


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield


#: The test files that take minutes, longest first: 868, 554, 349, 230, 226 and 187 s of one
#: worker's time in `bash tools/run_tests.sh -q -ra --durations=150` (2-core AMD EPYC with AVX2,
#: 2026-12-07, before the first two were shortened). tools/run_tests.sh hands whole files to its
#: workers (--dist loadfile) in collection order (--no-loadscope-reorder; pytest-xdist's default
#: orders files by their number of tests, which put the 868-s file 36th of 57 and three other
#: long ones among the last). Longest first, the short files come last and even out the two
#: workers' ends (12 s apart in the next run). Only the order changes: a stale list costs time,
#: not tests.
LONGEST_FILES = ['test_detection_protocol.py', 'test_detection.py', 'test_zoo_suite.py',
                 'test_nonlocal_training.py', 'test_gpu_report.py', 'test_reliability.py',
                 'test_onnx.py', 'test_training.py', 'test_compile.py', 'test_tools.py',
                 'test_benchmark.py']


def pytest_collection_modifyitems(items: List[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole
