"""Trained policies by name: a run directory, `@last`, a published model folder, or `hf://ORG/NAME` on the
Hugging Face Hub (`rlfoundry.run.weights` finds and reads them; a new run's `train.init` reads them there too).

A model folder is what `rlfoundry publish` writes (`rlfoundry.hub.publish`): `config.yaml`, `model.safetensors`,
`normalization.json` and `rlfoundry.json`, with a model card, a video and the evaluation results beside them. It is
read as a run directory is: YAML validated as any config, safetensors, JSON; nothing in it is executed.
"""

from __future__ import annotations

from pathlib import Path

from rlfoundry.run.weights import (
    HF_PREFIX,
    MODEL_FILES,
    MODEL_FORMAT,
    MODEL_VERSION,
    download,
    is_model_folder,
    local_path,
    read,
    stats_json,
)
from rlfoundry.trained import policy as policy_lib

__all__ = ["HF_PREFIX", "MODEL_FILES", "MODEL_FORMAT", "MODEL_VERSION", "download", "is_model_folder", "load_policy",
           "local_path", "stats_json"]


def load_policy(run: str | Path = "@last", checkpoint: str | None = None, device: str = "cpu",
                runs_root: str | Path = "runs") -> policy_lib.Policy:
    """The trained policy a RUN names (`local_path`): a run directory's checkpoint `checkpoint` (last, best, a step
    or a step directory; default: the best where one was saved, else the last), or a model folder's weights. See
    `rlfoundry.trained.policy` for what the returned object does."""
    path = local_path(run, runs_root)
    return policy_lib.from_saved(read(path, checkpoint, str(run)), str(run) if is_model_folder(path) else str(path),
                                 device)
