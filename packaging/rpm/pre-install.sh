# laravel-worker's .rpm, before its files are placed: the system user the
# systemd units and config/supervisord.conf run as, so that the config can be
# installed root:laravel-worker 0640. It joins the web server's group when
# there is one (www-data on Debian-like systems; on Fedora and RHEL the group
# is apache or nginx: see docs/src/packages.md).
if ! getent group laravel-worker >/dev/null; then
    groupadd --system laravel-worker
fi
if ! getent passwd laravel-worker >/dev/null; then
    useradd --system --gid laravel-worker --no-create-home --home-dir /nonexistent \
        --shell /sbin/nologin --comment "laravel-worker queue worker" laravel-worker
    for web in www-data nginx apache; do
        if getent group "$web" >/dev/null; then
            usermod --append --groups "$web" laravel-worker
            break
        fi
    done
fi
exit 0
