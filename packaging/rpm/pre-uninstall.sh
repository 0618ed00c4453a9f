# laravel-worker's .rpm, before removal (not upgrade, $1 = 0): the workers
# are stopped and the units disabled, as Fedora's %systemd_preun does.
if [ "$1" -eq 0 ] && [ -d /run/systemd/system ]; then
    systemctl --no-reload disable --now laravel-worker.service >/dev/null 2>&1 || :
    systemctl stop 'laravel-worker@*.service' >/dev/null 2>&1 || :
fi
exit 0
