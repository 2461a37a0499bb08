#!/bin/sh
# Photograph every dashboard page at 1440x1000 and at 390 px wide into docs/screenshots/,
# with Debian's chromium and chromedriver (apt-get install chromium chromium-driver): the
# browser test that opens every page runs once, against a throwaway database it fills
# with jobs, schedules, dead letters and an hour of made-up chart history.
#   sh docs/screenshots.sh          (from the checkout; uses .venv, made by make test)
set -eu
cd "$(dirname "$0")/.."
out="$(pwd)/docs/screenshots"
mkdir -p "$out"
rm -rf build && .venv/bin/python -m pip install --quiet '.[test]'
JOBQ_SCREENSHOTS="$out" .venv/bin/pytest -n 0 -p no:cacheprovider -q \
    tests/test_dashboard_browser.py -k test_every_page_opens_without_a_console_error_wide_and_on_a_phone
echo "screenshots: $(ls "$out" | wc -l) files in docs/screenshots/"
