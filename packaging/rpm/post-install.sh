# laravel-worker's .rpm, after install or upgrade: systemd learns the units;
# none is enabled nor started (the config names the app first).
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
