#!/usr/bin/env bash
# The default test suite (the README's `python -m pytest --durations=15`) while one extra process
# burns a core for the whole run: a test whose outcome depends on the machine's load fails here
# before a user's machine finds it (issue 31). Extra arguments go to pytest:
#
#     tools/suite_under_load.sh                      # the whole default suite
#     tools/suite_under_load.sh tests/data -x        # a part of it
#
# Run it from the environment the README's install made (the pytest it finds is that one's).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-python}"
# One core's worth of busy loop, in a process of its own (not a shell loop: `yes` or a bash
# `while :` would also burn a core, but python is certain to be here).
"$PYTHON" -c "while True: pass" &
BURNER=$!
# Killed however the run ends: success, a failing test, or Ctrl-C.
trap 'kill "$BURNER" 2>/dev/null || true; wait "$BURNER" 2>/dev/null || true' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "suite_under_load: process $BURNER burns a core for the whole run" >&2
"$PYTHON" -m pytest --durations=15 "$@"
