#!/usr/bin/env bash
# Installs tensorgc's wheels from dist/ (`make wheel`) into fresh virtual environments, in a path
# with a space, and runs what a user runs first (tools/wheel_smoke.py: a cycle page with its
# picture, a timeline page, the `tensorgc` command, `pytest --tensorgc` through the entry point):
#   3.13 (pyenv's) as root, the system's Graphviz hidden;
#   3.11 (Debian's /usr/bin/python3: pyenv's live under /root) as nobody, Graphviz hidden, the
#        environment read-only once installed;
#   3.11 (pyenv's) as root with the system's Graphviz loaded into the process before drawing.
# "Hidden": a private mount namespace (unshare -m) with Graphviz's libraries, plugins, headers and
# pkg-config files covered by empty files and directories. Needs root (unshare, mount, setpriv),
# and the network or pip's cache once, for pytest.
#   bash tools/wheel_smoke.sh [DIST]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "${1:-$root/dist}" && pwd)
PYTEST_PIN=pytest==9.2.0
if [ "$(id -u)" != 0 ]; then
  echo "wheel_smoke: needs root (a private mount namespace, then setpriv to nobody)" >&2
  exit 1
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1

work=$(mktemp -d "/tmp/tensorgc smoke.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/wheels"
cp "$dist"/tensorgc-*.whl "$work/wheels/"
cp "$root/tools/wheel_smoke.py" "$root/tests/data/h100_small_snapshot.pickle" "$work/"

find_python() {  # X.Y -> pyenv's pythonX.Y
  local c
  for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1"; do
    [ -x "$c" ] && { echo "$c"; return 0; }
  done
  echo "wheel_smoke: no pyenv python$1" >&2
  return 1
}

# "$@" in a private mount namespace where the system's Graphviz is empty files and directories
hidden() {
  unshare -m --propagation private -- bash -c '
    set -e
    lib=/usr/lib/x86_64-linux-gnu
    for d in "$lib/graphviz" /usr/include/graphviz; do
      [ -d "$d" ] && mount -t tmpfs -o size=1m,mode=755 tensorgc-hidden "$d"
    done
    for f in "$lib"/lib{gvc,cgraph,cdt,pathplan,xdot,gvpr,lab_gamut,ltdl}.so* \
             "$lib"/pkgconfig/lib{gvc,cgraph,cdt,pathplan,xdot}.pc /usr/bin/dot; do
      if [ -e "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; fi
    done
    exec "$@"' hide "$@"
}

# leg NAME PYTHON USER HIDE(yes|no) [smoke options]
leg() {
  local name=$1 py=$2 user=$3 hide=$4
  shift 4
  local tag whl dir
  tag=$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  whl=$(ls "$work"/wheels/tensorgc-*-"$tag"-"$tag"-manylinux*.whl)
  dir="$work/$name"
  mkdir "$dir"
  # pytest and what it needs, for this interpreter, fetched as root: the leg installs offline
  "$py" -m pip download -q --only-binary :all: -d "$work/wheels" "$PYTEST_PIN"
  chmod -R a+rX "$work"
  local body='
    set -e
    "$PY" -m venv "$DIR/venv env"
    "$DIR/venv env/bin/python" -m pip install -q --no-cache-dir --no-index \
      --find-links "$WHEELS" "$WHL" "$PYTEST_PIN"
    [ "$READONLY" = yes ] && chmod -R a-w "$DIR/venv env"
    cd "$DIR"
    "$DIR/venv env/bin/python" "$SMOKE" --snapshot "$SNAPSHOT" "$@"'
  local -a run=(env -i PATH=/usr/bin:/bin HOME="$dir" LANG=C.UTF-8 PY="$py" DIR="$dir" WHL="$whl"
                WHEELS="$work/wheels" PYTEST_PIN="$PYTEST_PIN" SMOKE="$work/wheel_smoke.py"
                SNAPSHOT="$work/h100_small_snapshot.pickle" READONLY=no)
  if [ "$user" = nobody ]; then
    chown nobody:nogroup "$dir"
    run=(setpriv --reuid=nobody --regid=nogroup --clear-groups "${run[@]}" READONLY=yes)
  fi
  [ "$hide" = yes ] && run=(hidden "${run[@]}")
  echo "== wheel smoke: $name: $(basename "$whl") as $user, Graphviz $([ "$hide" = yes ] && echo hidden || echo present)"
  local t0=$SECONDS
  "${run[@]}" bash -c "$body" leg "$@"
  echo "== wheel smoke: $name passed ($((SECONDS - t0)) s)"
}

leg "3.13 root" "$(find_python 3.13)" root yes --graphviz-hidden
leg "3.11 nobody" /usr/bin/python3 nobody yes --graphviz-hidden
leg "3.11 root" "$(find_python 3.11)" root no --graphviz-loaded
