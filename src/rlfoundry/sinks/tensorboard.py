"""TensorBoard event files in the run directory."""

from __future__ import annotations

import math
from pathlib import Path


class TensorBoardSink:
    def __init__(self, log_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()
