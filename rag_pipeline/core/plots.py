"""Pictures people look at instead of reading: PNG files, and the same PNG as a data URI for
markdown metadata (the Dagster UI renders `![..](data:image/png;base64,...)`; a file link it cannot)."""

from __future__ import annotations

import base64
from pathlib import Path


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display on a server), imported only when drawing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: Path, dpi: int = 90) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def data_uri(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def markdown_image(path: Path, alt: str) -> str:
    """The PNG embedded in markdown (alt text is ours, never untrusted)."""
    return f"![{alt}]({data_uri(path)})"


def label(text: str, max_chars: int = 40) -> str:
    """Untrusted text as a plot label: `$` would start matplotlib's math mode (and can fail it)."""
    text = " ".join(str(text).split())
    text = text if len(text) <= max_chars else text[: max_chars - 1] + "…"
    return text.replace("$", r"\$")
