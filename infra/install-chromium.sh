#!/usr/bin/env bash
# The browser test drives Debian's Chromium through Playwright (Playwright's own browser download
# is not available here). Installs it when missing and we may (root, or passwordless sudo).
set -euo pipefail
for bin in chromium chromium-browser; do
  if command -v "$bin" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" = 0 ]; then SUDO=""; elif sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
  echo "Chromium is missing and this user cannot install it; run: sudo apt-get install chromium" >&2
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "Chromium is missing and there is no apt-get here; install Chromium and put it on the PATH." >&2
  exit 1
fi
echo "installing Debian's chromium for the browser test ..." >&2
$SUDO apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null || { echo "apt-get did not install chromium." >&2; exit 1; }
