"""The base of every config section: closed (unknown keys are errors) and validated on assignment."""

import types
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator


def _allows_bool(annotation: Any) -> bool:
    if annotation in (bool, Any):
        return True
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return any(_allows_bool(arg) for arg in typing.get_args(annotation))
    return False


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        # pydantic's lax mode reads true/false as 1/0; a boolean where a number belongs is a mistake.
        if isinstance(value, bool):
            assert info.field_name is not None  # a field validator's info always names its field
            annotation = cls.model_fields[info.field_name].annotation
            if not _allows_bool(annotation):
                raise ValueError(f"expected {annotation}, got a boolean")
        return value

    def setting(self, key: str, default: Any = None) -> Any:
        """The value of a dotted key below this section (`cfg.setting("algo.num_steps")`), or `default` where a part
        of it is not there."""
        node: Any = self
        for part in key.split("."):
            node = getattr(node, part, None)
            if node is None:
                return default
        return node
