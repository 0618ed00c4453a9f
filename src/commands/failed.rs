//! `failed`, `retry`, `forget`, `flush`: artisan's failed-job commands.

use crate::cli::{FailedArgs, FlushArgs, ForgetArgs, RetryArgs};
use crate::config::Settings;

/// `queue:failed`.
///
/// # Errors
/// The store cannot be read.
pub async fn list(_settings: Settings, _args: FailedArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}

/// `queue:retry`.
///
/// # Errors
/// The store or Redis cannot be used.
pub async fn retry(_settings: Settings, _args: RetryArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}

/// `queue:forget`.
///
/// # Errors
/// The store cannot be written.
pub async fn forget(_settings: Settings, _args: ForgetArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}

/// `queue:flush`.
///
/// # Errors
/// The store cannot be written.
pub async fn flush(_settings: Settings, _args: FlushArgs) -> anyhow::Result<u8> {
    anyhow::bail!("not implemented yet")
}
