"""Under CI an optional package that does not import fails its test instead of skipping it (tests/conftest.py):
`make install` installs every one, so a skip there would hide a broken install."""

import pytest

from tests.conftest import _required


def test_a_package_that_does_not_import_fails_under_ci():
    with pytest.raises(pytest.fail.Exception, match="no_such_package_here does not import under CI"):
        _required("no_such_package_here")
    assert _required("json").dumps([1]) == "[1]"
