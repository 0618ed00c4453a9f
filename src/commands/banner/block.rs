//! The start line as an operator reads it: a short block, one line per
//! subject (the worker, its queue, the queues, the handlers, the limits,
//! the stores, metrics and health), each labelled in the driver's words.

use super::Banner;

/// Width of a subject's label, so the block's values line up.
const LABEL: usize = 9;

/// `  label    text`.
fn subject(label: &str, text: &str) -> String {
    format!("  {label:<LABEL$}{text}")
}

impl Banner {
    /// The block: `worker starting: …` (version, build, config sources),
    /// then `queue` (driver, connection, where), `queues` (each with where
    /// its jobs are, `retry_after`, how an idle worker waits),
    /// `handlers`, `limits`, `stores` (failed, cache, restart key) and
    /// `metrics` (endpoint, heartbeat file, Horizon's records).
    pub fn lines(&self) -> Vec<String> {
        vec![
            format!(
                "worker starting: laravel-worker {} (git {}), config {}",
                self.version,
                self.build,
                self.config_sources.join(" < ")
            ),
            subject(
                "queue",
                &format!(
                    "{} connection {:?}: {}",
                    self.driver, self.connection, self.at
                ),
            ),
            subject(
                "queues",
                &format!(
                    "{}; retry_after {}; block_for {}",
                    self.queues_text(),
                    self.retry_after,
                    self.block_for
                ),
            ),
            subject("handlers", &self.handlers_text()),
            subject("limits", &self.limits.text(self.concurrency)),
            subject(
                "stores",
                &format!(
                    "failed {}; cache {}; restart key {}",
                    self.failed, self.cache, self.restart_key
                ),
            ),
            subject("metrics", &self.metrics_text()),
        ]
    }

    /// The handlers in one line: `App\Jobs\* → process ./hello.sh; * → http
    /// https://app/_queue (queues mail)`.
    fn handlers_text(&self) -> String {
        self.handlers
            .iter()
            .map(|h| {
                let queues = if h.queues.is_empty() {
                    String::new()
                } else {
                    format!(" (queues {})", h.queues.join(","))
                };
                format!("{} → {} {}{queues}", h.pattern, h.transport, h.target)
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// The queues in one line: `default (laravel_database_queues:default), …`.
    fn queues_text(&self) -> String {
        self.queues
            .iter()
            .map(|q| format!("{} ({})", q.name, q.key))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Metrics and health in one line: `http 127.0.0.1:9090 (/metrics,
    /// /healthz, /readyz); heartbeat file /run/w.hb; horizon records off`.
    fn metrics_text(&self) -> String {
        let metrics = match self.metrics.as_str() {
            "off" => "off".to_string(),
            listen => format!("http {listen} (/metrics, /healthz, /readyz)"),
        };
        let heartbeat = match self.heartbeat.as_str() {
            "off" => "off".to_string(),
            path => format!("file {path}"),
        };
        let horizon = if self.horizon { "on" } else { "off" };
        format!("{metrics}; heartbeat {heartbeat}; horizon records {horizon}")
    }
}
