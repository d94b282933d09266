import pytest

# Columns that hold measured times; everything else in metrics.csv must repeat exactly under one seed.
TIMING = ("wall_time", "sps", "sps_run")


def is_timing(column: str) -> bool:
    return column in TIMING or column.startswith("time/")


@pytest.fixture
def quiet():
    """Overrides that keep test runs small and silent."""
    return ["logging.progress=false", "logging.tensorboard=false", "train.device=cpu"]
