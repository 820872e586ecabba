#!/usr/bin/env bash
# Checks what pip cannot install, before anything is set up. Exits non-zero with a message
# naming what to install. Usage: scripts/preflight.sh [java]
set -u
PYTHON=${PYTHON:-python3}
fail() { echo "flotilla: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null 2>&1 \
  || fail "'$PYTHON' was not found. Install Python 3.11 or newer (Debian/Ubuntu: apt-get install python3 python3-venv)."
"$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
  || fail "Python 3.11 or newer is needed; '$PYTHON' is $("$PYTHON" -V 2>&1). Set PYTHON=/path/to/python3.11."
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
  || fail "Python's venv module is missing. Debian/Ubuntu: apt-get install python3-venv (or python3.11-venv)."

for want in "$@"; do
  case "$want" in
    java)
      command -v java >/dev/null 2>&1 \
        || fail "Java 17 or newer is needed for Spark. Debian/Ubuntu: apt-get install openjdk-17-jre-headless."
      ;;
  esac
done
exit 0
