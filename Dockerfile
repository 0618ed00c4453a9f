# laravel-worker container image.
#
#   docker build -t laravel-worker .                 # the worker alone (default target)
#   docker build -t laravel-worker:php --target php .  # plus PHP, for the bridge
#   docker run -e REDIS_URL=redis://redis:6379/0 -v ./handlers.toml:/etc/laravel-worker/laravel-worker.toml laravel-worker
#
# See docs/src/migrating/docker.md.

# Build stage: the release binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src ./src
RUN cargo build --release --locked \
 && strip target/release/laravel-worker

# Runtime: the binary, CA certificates (https:// handlers, rediss://), a
# non-root user, the example config and handler.
FROM debian:bookworm-slim AS runtime
# Unpinned on purpose: the current Debian stable package, with its security fixes.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 worker \
 && useradd --system --uid 10001 --gid worker --home-dir /app --no-create-home \
        --shell /usr/sbin/nologin worker \
 && mkdir -p /app \
 && chown worker:worker /app
COPY --from=build /src/target/release/laravel-worker /usr/local/bin/laravel-worker
COPY config/laravel-worker.toml /etc/laravel-worker/laravel-worker.toml
# The example config names its handler relative to itself (../examples/handlers).
COPY examples/handlers /etc/examples/handlers
# Every subcommand finds the config (mount your own over it, or point this
# elsewhere); the loop rewrites the heartbeat file that HEALTHCHECK reads.
ENV LARAVEL_WORKER_CONFIG=/etc/laravel-worker/laravel-worker.toml \
    LARAVEL_WORKER_HEARTBEAT_FILE=/tmp/laravel-worker.heartbeat
USER 10001:10001
WORKDIR /app
# The worker drains on SIGTERM: give `docker stop` a --time above the
# longest job (its default is 10 s).
STOPSIGNAL SIGTERM
# Healthy while the loop rewrites the heartbeat (every 5 s, idle or busy).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["laravel-worker", "health", "--max-age=60"]
ENTRYPOINT ["laravel-worker"]
CMD ["work"]

# Variant with PHP, for handlers that run the app's own job classes through
# php/laravel-worker-bridge.php. Debian's PHP 8.2 with the extensions most
# Laravel apps use; add the ones yours needs. Put the app (with vendor/ and
# the bridge) at /app, by COPY in a Dockerfile of your own or a volume.
FROM runtime AS php
USER 0:0
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        php-cli php-redis php-mysql php-pgsql php-sqlite3 php-mbstring php-xml \
        php-curl php-bcmath php-intl php-zip \
 && rm -rf /var/lib/apt/lists/*
COPY php/laravel-worker-bridge.php /usr/local/share/laravel-worker/laravel-worker-bridge.php
USER 10001:10001

# The default target: the worker alone.
FROM runtime
