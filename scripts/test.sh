#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test through CTest, then
# lists the skipped tests with their reasons (CTest's summary shows only "***Skipped"), and the
# seconds each part took (scripts/test_times.py reads them).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
installed=$SECONDS
scripts/build.sh
built=$SECONDS
cd build
status=0
# -LE full: the full matrix (`cd build && ctest -L full`, tests/CMakeLists.txt) is not the loop's.
ctest --output-on-failure -j"$(nproc)" -LE full "$@" || status=$?
../.venv/bin/python ../scripts/skips.py Testing/Temporary/LastTest.log || true
echo "test: install ${installed} s, build $((built - installed)) s, ctest $((SECONDS - built)) s," \
  "total ${SECONDS} s"
exit $status
