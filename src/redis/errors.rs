//! Reading Redis errors: which ones no retry can fix (so start gives up at
//! once), which mean another service answered, and which command a script
//! was refused.

use redis::{ErrorKind, RedisError};

/// True when retrying the same connection at start cannot help: the
/// configuration is wrong (TLS files, a refused certificate, refused
/// credentials), as opposed to a server that is not up yet.
pub fn is_permanent(e: &RedisError) -> bool {
    if speaks_no_redis(e) {
        return true;
    }
    if matches!(
        e.kind(),
        ErrorKind::InvalidClientConfig | ErrorKind::AuthenticationFailed
    ) {
        return true;
    }
    let text = e.to_string();
    [
        "certificate",
        "fatal alert",
        "WRONGPASS",
        "NOAUTH",
        "NOPERM",
    ]
    .iter()
    .any(|needle| text.contains(needle))
}

/// True when Redis answered `NOSCRIPT`: it does not know a script by its
/// SHA1 (a restart, a `SCRIPT FLUSH`, a failover), so the `EVALSHA` did
/// not run.
pub fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// True when the server answered in something other than the Redis
/// protocol (RESP): another service on the port, such as an HTTP server.
pub fn speaks_no_redis(e: &RedisError) -> bool {
    e.to_string().contains("Parse error")
}

/// Redis refuses a command an ACL user may not run inside a script
/// without naming it ("The user executing the script can't run this
/// command or subcommand script: SHA, on @user_script:LINE"). This adds the
/// name, read from that line of whichever of `scripts` has that SHA (the
/// scripts the caller sent), so the operator knows which permission is
/// missing. Other errors pass through.
pub fn name_denied_in_scripts(e: RedisError, scripts: &[&str]) -> RedisError {
    let text = e.to_string();
    if !text.contains("can't run this command") {
        return e;
    }
    let after = |marker: &str| {
        text.split_once(marker).map(|(_, rest)| {
            rest.chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect::<String>()
        })
    };
    let (Some(sha), Some(line)) = (after("script: "), after("@user_script:")) else {
        return e;
    };
    let Some(command) = scripts
        .iter()
        .find(|script| {
            use sha1::Digest;
            hex::encode(sha1::Sha1::digest(script.as_bytes())) == sha
        })
        .and_then(|script| {
            script
                .lines()
                .nth(line.parse::<usize>().ok()?.checked_sub(1)?)
        })
        .and_then(|code| code.split_once("redis.call('"))
        .and_then(|(_, rest)| rest.split_once('\''))
        .map(|(command, _)| command.to_string())
    else {
        return e;
    };
    RedisError::from((
        e.kind(),
        "a queue script was refused",
        format!(
            "{text}: the user has no permissions to run the '{command}' command that \
             this script runs (ACL +{command})"
        ),
    ))
}
