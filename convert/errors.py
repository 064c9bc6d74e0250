"""The one error type convert raises for a checkpoint it cannot read or map."""


class CheckpointError(ValueError):
    """A checkpoint file is unreadable, unsafe, or holds keys/shapes that do not fit."""
