# laravel-worker's .rpm, after removal or upgrade: systemd forgets the old
# units. The laravel-worker user stays (files it wrote may remain).
if [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || :
fi
exit 0
