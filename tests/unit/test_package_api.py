"""The package's public names: lazy (imported on first use, so `import rlfoundry` stays light) yet listed by dir()
and tab completion before that first use."""

import subprocess
import sys

import rlfoundry


def test_dir_lists_the_lazy_public_names():
    names = dir(rlfoundry)
    assert {"train", "load_policy", "evaluate", "Callback", "__version__"} <= set(names)
    assert names == sorted(names)
    assert callable(rlfoundry.train) and callable(rlfoundry.load_policy)


def test_importing_the_package_loads_no_torch():
    code = "import sys, rlfoundry; dir(rlfoundry); print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
