"""`minialign explore`: one self-contained HTML page of a model's attention and residual stream
(data.py gathers it, page.py renders it)."""

from minialign.apps.explore.data import Exploration, explore

__all__ = ["Exploration", "explore"]
