"""The front ends' one error: a model made elsewhere that cannot be mapped onto the model API, naming what and where."""

from __future__ import annotations


class FrontendError(ValueError):
    """A module, an argument or an op the front end cannot map; the message names the op, the graph node and the
    module path it came from, and what is supported instead."""
