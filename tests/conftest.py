"""Test isolation: every test starts in mmpretrain's registry scope (where mmpoly registers its
modules), whatever scope an earlier test's Runner left as mmengine's current default scope."""
import pytest
from mmengine.registry import DefaultScope
from test_tools import tiny_setup  # noqa: F401  (a fixture, for the test modules that use it)

import mmpoly.utils

mmpoly.utils.register_all_modules(init_default_scope=False)


@pytest.fixture(autouse=True)
def mmpretrain_scope():
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        yield
