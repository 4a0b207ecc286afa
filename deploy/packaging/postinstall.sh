#!/bin/sh
# Creates the svc user from the sysusers entry (or by hand where systemd is
# absent) and tells systemd about the units; it enables and starts nothing,
# since neither runs before its env file is filled in.
set -e

if command -v systemd-sysusers >/dev/null 2>&1; then
  systemd-sysusers /usr/lib/sysusers.d/svc.conf
elif ! getent passwd svc >/dev/null 2>&1; then
  useradd --system --user-group --home-dir /var/lib/svc --no-create-home \
    --shell /usr/sbin/nologin --comment "svc inference gateway" svc
fi

if [ -d /run/systemd/system ]; then
  systemctl daemon-reload >/dev/null 2>&1 || true
fi
