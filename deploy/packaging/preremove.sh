#!/bin/sh
# On removal (not on an upgrade, where the old package's scripts also run)
# stop the units so that the binary is not removed under them. Debian
# passes "remove"; RPM passes the number of versions left, 0 on removal.
set -e

case "$1" in
  remove | 0)
    if [ -d /run/systemd/system ]; then
      systemctl --no-reload disable --now svc.socket svc.service svc-worker.service >/dev/null 2>&1 || true
    fi
    ;;
esac
