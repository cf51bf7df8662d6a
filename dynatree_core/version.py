"""The package version (its own module: the lowest layer, so any layer may read it)."""

__version__ = "0.1.0"
