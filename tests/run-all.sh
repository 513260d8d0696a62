#!/bin/sh
# Run the test suites against one or more build directories, several at once:
#
#   tests/run-all.sh [-j N] [--check] [--only WORD]... BUILD [BUILD...]
#
# The job runner and the list of suites are tests/run_all.py (its header says
# what runs, once or per build). Ends with "suites: N passed, N failed".
cd "$(dirname "$0")/.." || exit 2
exec "${PYTHON:-/usr/bin/python3}" tests/run_all.py "$@"
