"""The package version, on the ground floor: the cache key and the CLI read it without
importing the package root (which would close an import cycle through the session)."""

__version__ = "0.1.0"
