"""agentgw gateway: wiring, the turn pipeline, the store, the brains and the CLI."""

from importlib import metadata


def _version() -> str:
    # pyproject.toml is the one place the version is written; an installed
    # package (wheel or editable) carries it in its metadata.
    try:
        return metadata.version("agentgw")
    except metadata.PackageNotFoundError:
        # A source tree run without installing it (PYTHONPATH=.): no metadata.
        return "0+unknown"


__version__ = _version()
