//! Opening Redis connections.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, IntoConnectionInfo};

/// How long a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an ordinary command may wait for its answer. The client's own
/// default (500 ms) is too short for a busy server running a large migrate.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Opens a self-healing connection to `url` (a URL or a parsed connection info): after a connection error the manager
/// reconnects in the background and the next command uses the new socket.
///
/// `response_timeout` bounds each command; `None` lets a command wait for
/// ever (a BLPOP with `block_for = 0`).
///
/// # Errors
/// A bad URL, or a server that cannot be reached at all.
pub async fn connect(
    url: impl IntoConnectionInfo,
    response_timeout: Option<Duration>,
) -> redis::RedisResult<ConnectionManager> {
    let client = Client::open(url)?;
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(response_timeout)
        .set_number_of_retries(2);
    client.get_connection_manager_with_config(config).await
}
