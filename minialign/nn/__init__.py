"""The encoder's parts: config, layers, attention and its backends, layout, Linear, score functions,
capture, masks. May import: torch, convert."""
