"""TensorBoard event files in the run directory."""

from __future__ import annotations

import math
from pathlib import Path


class TensorBoardSink:
    def __init__(self, log_dir: Path, resume_step: int | None = None):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: TensorBoard hides the events a stopped run wrote after its checkpoint
        purge = None if resume_step is None else resume_step + 1
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge)

    def write(self, step: int, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
                self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()
