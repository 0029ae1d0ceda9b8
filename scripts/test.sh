#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs every test through CTest, then
# lists the skipped tests with their reasons (CTest's summary shows only "***Skipped").
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --python
scripts/build.sh
cd build
status=0
ctest --output-on-failure -j"$(nproc)" "$@" || status=$?
../.venv/bin/python ../scripts/skips.py Testing/Temporary/LastTest.log || true
exit $status
