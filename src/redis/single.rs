//! One server (or a proxy in front of several): the URL's, through the
//! client's connection manager, which reconnects by itself.
//!
//! Only here can a URL's scheme disagree with the server in a way worth
//! naming (`rediss://` against plain Redis, or the reverse): a failed
//! connection, or a TLS handshake still unfinished after a second, asks the
//! port in plain text (`tls_probe`) and says which scheme to use.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{Client, RedisResult};

use super::purpose::CONNECT_TIMEOUT;
use super::target::RedisTarget;
use super::tls::{is_tls, tls_client};
use super::{errors, tls_probe};

/// Opens the server of `target`; `response_timeout` bounds each command
/// (`None`: no limit).
///
/// # Errors
/// As [`super::open`].
pub async fn open(
    target: &RedisTarget,
    response_timeout: Option<Duration>,
) -> RedisResult<ConnectionManager> {
    let addr = target.info.addr();
    let connect = async {
        let client = tls_client(target.info.clone(), &target.tls)?;
        manager(client, response_timeout).await
    };
    let opened = if is_tls(addr) {
        tokio::select! {
            opened = connect => opened,
            e = tls_probe::plain_under_tls(addr) => Err(e),
        }
    } else {
        connect.await
    };
    match opened {
        Err(e) if !errors::is_permanent(&e) => Err(tls_probe::mismatch(addr, e).await),
        opened => opened,
    }
}

async fn manager(
    client: Client,
    response_timeout: Option<Duration>,
) -> RedisResult<ConnectionManager> {
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(response_timeout)
        .set_number_of_retries(2);
    client.get_connection_manager_with_config(config).await
}
