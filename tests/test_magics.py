"""%load_ext tensorgc: the %mlrun / %%mlrun magics (tensorgc/lineprof/magics.py) with memlab's
flags, in a real IPython shell. IPython is installed by `make deps`."""
import pytest

IPython = pytest.importorskip("IPython")
from IPython.core.error import UsageError  # noqa: E402
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

import tensorgc  # noqa: E402
from tensorgc import lineprof as L  # noqa: E402


@pytest.fixture(scope="module")
def ip():
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "tensorgc")
    shell.run_cell("def grow(n):\n    buf = bytearray(n)\n    return len(buf)\n"
                   "def twice(n):\n    return grow(n) + grow(n)\n")
    yield shell


def test_line_magic_profiles_the_named_function(ip):
    stats = ip.run_line_magic("mlrun", "-f grow grow(1 << 25)")
    assert isinstance(stats, L.LineStats)
    text = str(stats)
    assert "## grow" in text and "buf = bytearray(n)" in text
    fn = stats.functions[0]
    first = fn["code"].co_firstlineno
    assert fn["lines"][first + 1][0] == 1           # the bytearray line ran once
    assert "<table" in stats._repr_html_()


def test_cell_magic_with_several_functions_columns_and_dump(ip, tmp_path):
    out = tmp_path / "prof.txt"
    cols = "rss_bytes.all.current,rss_bytes.all.delta" if not L._cuda_available() \
        else "active_bytes.all.current,active_bytes.all.delta"
    stats = ip.run_cell_magic("mlrun", f"-f grow -f twice -D -c {cols} -T {out}",
                              "r = twice(1 << 20)\n")
    assert ip.user_ns["r"] == 2 << 20
    assert stats.columns == cols.split(",")
    assert sorted(f["code"].co_name for f in stats.functions) == ["grow", "twice"]
    assert out.read_text() == str(stats)
    assert [f["lines"][f["code"].co_firstlineno + 1][0] for f in stats.functions
            if f["code"].co_name == "grow"] == [2]


def test_return_profiler_quiet_and_gpu_flags(ip):
    prof = ip.run_line_magic("mlrun", "-r -f grow grow(10)")
    assert isinstance(prof, tensorgc.LineProfiler) and not prof.enabled
    assert prof.lines_recorded >= 2
    assert ip.run_line_magic("mlrun", "-q -f grow grow(10)") is None
    assert ip.run_line_magic("mlrun", "-g 0 -q -f grow grow(10)") is None
    prof = ip.run_line_magic("mlrun", "-r -g cuda:0 -f grow grow(10)")  # the package's syntax
    assert prof.target_gpu == 0
    with pytest.raises(UsageError, match="-g cpu: the line profiler reads a CUDA device's"):
        ip.run_line_magic("mlrun", "-g cpu -f grow grow(10)")
    with pytest.raises(UsageError, match="-g -1: a device index is >= 0"):
        ip.run_line_magic("mlrun", "-g -1 -f grow grow(10)")


def test_errors_are_usage_errors(ip):
    with pytest.raises(UsageError, match="Could not find function 'nope'"):
        ip.run_line_magic("mlrun", "-f nope grow(1)")
    with pytest.raises(UsageError, match="valid columns"):
        ip.run_line_magic("mlrun", "-f grow -c not.a.column grow(1)")
    with pytest.raises(UsageError, match="at least one -f"):
        ip.run_line_magic("mlrun", "grow(1)")
    with pytest.raises(UsageError, match="no Python code object"):
        ip.run_line_magic("mlrun", "-f len len([])")
    assert L._Events.enabled == 0  # nothing left enabled by the failures


def test_exception_in_profiled_code_disables_the_profiler(ip):
    ip.run_cell("def bad():\n    raise ValueError('x')\n")
    with pytest.raises(ValueError):
        ip.run_line_magic("mlrun", "-f bad bad()")
    assert L._Events.enabled == 0


def test_the_line_magics_statement_runs_as_typed(ip):
    """The statement was argparse's tokens joined with single spaces: a string literal inside a
    call lost its runs of spaces (the shell split it), so %mlrun ran other code than typed; and
    a statement's own '-q' or '-c' was taken for a flag."""
    ip.run_cell('%mlrun -q -f grow r = str.upper("a  b") + str(grow(4))')
    assert ip.user_ns["r"] == "A  B4"
    ip.run_cell('%mlrun -q -f grow q = 3; r2 = grow(10) -q')
    assert ip.user_ns["r2"] == 7
    stats = ip.run_line_magic("mlrun", "-f grow grow(1)")
    assert isinstance(stats, L.LineStats)


def test_a_script_run_by_ipython_shows_the_table(tmp_path):
    """`ipython script.ipy` runs each cell silently: the shell displays no result, so a %mlrun
    there showed nothing. The magic displays its table itself then."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = tmp_path / "profile_grow.ipy"
    script.write_text("%load_ext tensorgc\n"
                      "def grow(n):\n    buf = bytearray(n)\n    return len(buf)\n"
                      "%mlrun -f grow grow(1 << 20)\n"
                      "%mlrun -q -f grow grow(10)\n"
                      "print('after the magics')\n")
    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipythondir"),
               PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "IPython", "--HistoryManager.enabled=False",
                        "--colors=NoColor", str(script)], capture_output=True, text=True,
                       timeout=300, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("## grow") == 1, r.stdout  # the -q one shows nothing
    table = r.stdout[r.stdout.index("## grow"):r.stdout.index("after the magics")]
    assert "buf = bytearray(n)" in table and "line  hits" in table


def test_the_table_is_shown_once_whether_the_cell_is_silent_or_not(ip, capsys):
    capsys.readouterr()
    ip.run_cell("%mlrun -f grow grow(10)")            # the shell displays the result
    assert capsys.readouterr().out.count("## grow") == 1
    ip.run_cell("%mlrun -f grow grow(10)", silent=True)  # as a script's cells run
    assert capsys.readouterr().out.count("## grow") == 1
    ip.run_cell("s = %mlrun -f grow grow(10)")        # assigned: not displayed, kept
    assert capsys.readouterr().out.count("## grow") == 0
    assert isinstance(ip.user_ns["s"], L.LineStats)
    saved = ip.ast_node_interactivity
    ip.ast_node_interactivity = "none"                  # the user turned results off
    try:
        ip.run_cell("%mlrun -f grow grow(10)")
    finally:
        ip.ast_node_interactivity = saved
    assert capsys.readouterr().out.count("## grow") == 1
