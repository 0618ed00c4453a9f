# Build stage: compile the release binary.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked

# Runtime stage: the binary, CA certificates, a non-root user.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home /app worker
COPY --from=build /src/target/release/laravel-worker /usr/local/bin/laravel-worker
COPY config/laravel-worker.toml /etc/laravel-worker/laravel-worker.toml
USER worker
WORKDIR /app
STOPSIGNAL SIGTERM
ENTRYPOINT ["laravel-worker", "--config", "/etc/laravel-worker/laravel-worker.toml"]
CMD ["work"]
