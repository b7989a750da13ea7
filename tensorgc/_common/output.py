"""Where tensorgc writes what it names itself, and those names: the output directory
(``set_output_dir``, the ``TENSORGC_OUTPUT_DIR`` environment variable) that cycle pages, OOM
autopsies and snapshots given by bare file name go to when no directory is passed, and the rank
that file names carry inside a distributed job (``tensorgc-cycle-rank3-XXXXXXXX.html``,
``oom-<time>-rank3-<pid>-cuda0``; _rank.py says where the rank comes from)."""
from __future__ import annotations

import os
from typing import Optional, Union

from .rank import rank_tag

__all__ = ["ENV", "set_output_dir", "get_output_dir", "output_dir", "ranked"]

ENV = "TENSORGC_OUTPUT_DIR"

# set_output_dir's directory (absolute), or None: the environment variable decides. One
# assignment of a str: read and written by any thread without a lock.
_chosen: Optional[str] = None


def set_output_dir(path: Union[str, os.PathLike[str], None]) -> Optional[str]:
    """Makes ``path`` the directory where tensorgc writes the files it names itself when no
    directory is given: warn_tensor_cycles' pages, the OOM autopsy (on_oom, write_autopsy) and
    dump_snapshot's bare file names. It is created (mode 0700, with its parents) when missing.
    None goes back to ``$TENSORGC_OUTPUT_DIR``, and without it to each writer's own default.
    Returns the directory set before (None when there was none).

    TypeError for anything but a str or os.PathLike of str; ValueError for an empty path;
    NotADirectoryError when it names something else; the OSError when it cannot be created."""
    global _chosen
    if path is None:
        before, _chosen = _chosen, None
        return before
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"tensorgc: set_output_dir: path must be a str, an os.PathLike or "
                        f"None, not {type(path).__name__}")
    where = os.fspath(path)
    if not isinstance(where, str):
        raise TypeError(f"tensorgc: set_output_dir: path must be a str path, not "
                        f"{type(where).__name__}")
    if not where:
        raise ValueError("tensorgc: set_output_dir: path must not be empty")
    where = os.path.abspath(where)
    if os.path.exists(where) and not os.path.isdir(where):
        raise NotADirectoryError(f"tensorgc: set_output_dir: not a directory: {where!r}")
    os.makedirs(where, 0o700, exist_ok=True)
    before, _chosen = _chosen, where
    return before


def get_output_dir() -> Optional[str]:
    """The directory set by set_output_dir, else ``$TENSORGC_OUTPUT_DIR`` (made absolute; empty
    counts as unset), else None: then each writer keeps its own default (the temporary directory
    for pages and autopsies, the current directory for dump_snapshot's bare file names)."""
    if _chosen is not None:
        return _chosen
    env = os.environ.get(ENV, "")
    return os.path.abspath(env) if env else None


def output_dir(default: str) -> str:
    """Where a writer given no directory writes: the output directory, made (0700) when
    missing, or ``default`` when none is set. Raises the OSError when it cannot be made."""
    where = get_output_dir()
    if where is None:
        return default
    os.makedirs(where, 0o700, exist_ok=True)
    return where


def ranked(prefix: str) -> str:
    """``prefix`` with this process's rank after it inside a distributed job:
    "tensorgc-cycle-" -> "tensorgc-cycle-rank3-"; unchanged outside one."""
    tag = rank_tag()
    return f"{prefix}{tag}-" if tag else prefix
