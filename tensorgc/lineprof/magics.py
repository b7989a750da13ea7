"""IPython magics: ``%load_ext tensorgc`` registers ``%mlrun`` (line) and ``%%mlrun`` (cell),
pytorch_memlab's magics with its flags, backed by tensorgc's LineProfiler.

    %mlrun -f train_step train_step(batch)
    %%mlrun -f forward -c active_bytes.all.current -T profile.txt
    out = model(x)
"""
from __future__ import annotations

import argparse
from typing import Any, Callable, Dict, List, Optional, TypeVar, Union

from IPython.core import magic as _magic
from IPython.core import magic_arguments as _magic_arguments
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from IPython.core.magic import Magics, magics_class
from IPython.utils import process as _process

from .._common.devices import cuda_index
from ..lineprof import DEFAULT_COLUMNS, LineProfiler, LineStats

# IPython's magic helpers carry no annotations before IPython 9, and from 9 on some carry broader
# ones (line_cell_magic also takes a name and returns a decorator then): typed here by how this
# module uses them, whichever IPython is installed (read through getattr, so as Any)
_F = TypeVar("_F", bound=Callable[..., Any])
argument: Callable[..., Callable[[_F], _F]] = getattr(_magic_arguments, "argument")
magic_arguments: Callable[[], Callable[[_F], _F]] = getattr(_magic_arguments, "magic_arguments")
parse_argstring: Callable[[Callable[..., Any], str], argparse.Namespace] = getattr(
    _magic_arguments, "parse_argstring")
line_cell_magic: Callable[[_F], _F] = getattr(_magic, "line_cell_magic")
needs_local_scope: Callable[[_F], _F] = getattr(_magic, "needs_local_scope")
arg_split: Callable[[str], List[str]] = getattr(_process, "arg_split")

__all__ = ["MemlabMagics", "load_ipython_extension"]


@magics_class
class MemlabMagics(Magics):
    @magic_arguments()
    @argument("-f", "--function", metavar="FUNC", action="append", default=[],
              help="Function to profile; repeat the flag for several.")
    @argument("-c", "--column", metavar="COLS", action="append", default=[],
              help="Column to show (a torch.cuda.memory_stats() key, or X.delta for a "
                   "X.current key); repeat the flag or separate with commas.")
    @argument("-D", "--no_default_columns", action="store_true",
              help="Hide the default columns " + ", ".join(DEFAULT_COLUMNS) + ".")
    @argument("-r", "--return-profiler", action="store_true",
              help="Return the LineProfiler instead of its display.")
    @argument("-g", "--gpu", metavar="GPU_ID", default="0",
              help="The CUDA device to read: 0, cuda:0 (default 0).")
    @argument("-q", "--quiet", action="store_true", help="Do not display the results.")
    @argument("-T", "--dump-profile", metavar="OUTPUT",
              help="Also write the text table to this file.")
    @argument("statement", nargs=argparse.REMAINDER,
              help="Code to run under the profiler, after the flags (the cell, in cell mode).")
    @line_cell_magic
    @needs_local_scope
    def mlrun(self, line: str = "", cell: Optional[str] = None,
              local_ns: Optional[Dict[str, Any]] = None
              ) -> Union[LineProfiler, LineStats, None]:
        """Run a statement or a cell with the given functions profiled line by line."""
        args = parse_argstring(self.mlrun, line)
        assert self.shell is not None  # a magic runs in a shell
        global_ns: Dict[str, Any] = self.shell.user_global_ns
        local_ns = global_ns if local_ns is None else local_ns
        funcs = []
        for name in args.function:
            try:
                funcs.append(eval(name, global_ns, local_ns))  # noqa: S307 (the user's own names)
            except Exception as exc:
                raise UsageError(f"Could not find function {name!r}: "
                                 f"{type(exc).__name__}: {exc}") from None
        if not funcs:
            raise UsageError("%mlrun needs at least one -f FUNC to profile")
        try:  # -g as the package reads a device everywhere; the message names -g
            gpu = cuda_index(args.gpu, "-g", "the line profiler reads a CUDA device's allocator")
            profiler = LineProfiler(*funcs, target_gpu=0 if gpu is None else gpu)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        code = cell if cell is not None else _as_typed(line, len(args.statement or []))
        if not code.strip():
            raise UsageError("%mlrun needs a statement to run (or use %%mlrun on a cell)")
        with profiler:
            exec(compile(code, "<mlrun>", "exec"), global_ns, local_ns)  # noqa: S102
        columns = [] if args.no_default_columns else list(DEFAULT_COLUMNS)
        for c in args.column:
            columns += [x.strip() for x in c.split(",") if x.strip()]
        if not columns:
            raise UsageError("no columns left to show: -D hides the defaults, add -c COLS")
        try:
            stats = profiler.display(columns=columns)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.dump_profile is not None:
            from ..allocator.snapshot import OutputError, atomic_write

            try:  # whole or not at all, and only ever over a regular file
                atomic_write(args.dump_profile, lambda f: f.write(str(stats)))
            except (OutputError, OSError) as exc:
                raise UsageError(f"-T: {exc}") from None
        if args.return_profiler:
            return profiler
        if args.quiet:
            return None
        if not self._shown_by_the_shell():
            # a script (`ipython script.ipy`) runs its cells silently: the shell shows no
            # result, so the table is displayed here (text in a terminal, HTML in a notebook)
            from IPython.display import display

            display(stats)  # type: ignore[no-untyped-call]
        return stats

    def _shown_by_the_shell(self) -> bool:
        """Whether the shell will display the result of the cell this magic runs in. IPython
        runs the cells of a .ipy script with silent=True (no display hook), and a user may set
        ast_node_interactivity to "none"; the magic's own return value then shows nowhere.
        Outside a cell (run_line_magic from code) the caller gets the value: nothing to show."""
        result = getattr(getattr(self.shell, "displayhook", None), "exec_result", None)
        if result is None:
            return True
        info = getattr(result, "info", None)
        if getattr(info, "silent", False):
            return False
        return getattr(self.shell, "ast_node_interactivity", "last_expr") != "none"


def _as_typed(line: str, ntokens: int) -> str:
    """The last ``ntokens`` tokens of ``line`` as the user typed them. parse_argstring splits the
    line with arg_split (shlex, quotes kept), which only drops whitespace, so each token is found
    in the line in order; joining the tokens back would change runs of spaces that the split
    cut, inside a string literal too."""
    if ntokens == 0:
        return ""
    tokens = arg_split(line)
    pos, starts = 0, []
    for tok in tokens:
        pos = line.index(tok, pos)
        starts.append(pos)
        pos += len(tok)
    return line[starts[len(tokens) - ntokens]:].strip()


def load_ipython_extension(ipython: InteractiveShell) -> None:
    """Called by ``%load_ext tensorgc``."""
    shell: Any = ipython  # register_magics carries no annotations
    shell.register_magics(MemlabMagics)
