//! TLS for `rediss://` connections: the settings ([`TlsOptions`]), the
//! certificate files read safely, and the errors made readable.
//!
//! The client does the handshake (rustls, ring as the crypto provider);
//! this file only prepares what it needs. Every topology uses the same
//! helpers: a single server through [`tls_client`], Sentinel and Cluster by
//! passing [`certificates`] and [`tls_mode`] to their own builders.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use redis::{
    Client, ClientTlsConfig, ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult,
    TlsCertificates, TlsMode,
};

/// TLS settings (`[redis] tls_*`), used when the URL is `rediss://`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    /// PEM file of the CA certificate(s) the server's certificate must chain
    /// to; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate (chain) for mutual TLS; needs `key_file`.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Accept any server certificate (Laravel's `verify_peer => false`).
    /// Encrypts, but no longer proves who the server is.
    pub insecure: bool,
}

/// True for a `rediss://` address.
pub fn is_tls(addr: &ConnectionAddr) -> bool {
    matches!(addr, ConnectionAddr::TcpTls { .. })
}

/// The client's TLS mode for `tls`: certificates checked, or not.
pub fn tls_mode(tls: &TlsOptions) -> TlsMode {
    if tls.insecure {
        TlsMode::Insecure
    } else {
        TlsMode::Secure
    }
}

/// Done once before any connection: rustls needs one process-wide crypto
/// provider (the project uses ring), and `tls_insecure` on a `rediss://`
/// URL is logged as a warning.
pub fn prepare(info: &ConnectionInfo, tls: &TlsOptions) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    if tls.insecure && is_tls(info.addr()) {
        warn_insecure();
    }
}

/// Logs, once per process, that certificates are not checked.
fn warn_insecure() {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "TLS certificate verification is OFF ([redis] tls_insecure = true): the connection \
             is encrypted but the server is not authenticated, so anyone on the path can \
             impersonate it. Use tls_ca_file instead for a self-signed server."
        );
    }
}

/// A client for one server: `tls.insecure` applied to a `rediss://`
/// address, and the CA and client certificate files loaded.
///
/// # Errors
/// A TLS file that cannot be read or parsed.
pub fn tls_client(info: ConnectionInfo, tls: &TlsOptions) -> RedisResult<Client> {
    let info = with_insecure(info, tls.insecure);
    if !is_tls(info.addr()) {
        return Client::open(info);
    }
    match certificates(tls)? {
        Some(certs) => Client::build_with_tls(info, certs),
        None => Client::open(info),
    }
}

/// `info` with `insecure` applied when it is a `rediss://` address.
pub fn with_insecure(info: ConnectionInfo, insecure: bool) -> ConnectionInfo {
    let addr = with_insecure_addr(info.addr().clone(), insecure);
    info.set_addr(addr)
}

/// A `rediss://` address with `insecure` applied; others unchanged.
pub fn with_insecure_addr(mut addr: ConnectionAddr, insecure: bool) -> ConnectionAddr {
    if let ConnectionAddr::TcpTls { insecure: flag, .. } = &mut addr {
        *flag = insecure;
    }
    addr
}

/// A server certificate refused because it is a CA certificate
/// (`CaUsedAsEndEntity`): what `openssl req -x509` makes by default with
/// OpenSSL 3 (`CA:TRUE`), given as `tls_ca_file` for a self-signed server.
/// `redis-cli --cacert` and PHP accept it; the TLS library here cannot, so
/// the error says how to make a certificate it accepts. Other errors pass.
pub fn explain_ca_as_server(e: RedisError) -> RedisError {
    if !e.to_string().contains("CaUsedAsEndEntity") {
        return e;
    }
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "the server's TLS certificate is a CA certificate",
        format!(
            "{e}. The server presents a certificate marked CA:TRUE as its own (what \
             `openssl req -x509` makes by default), which is refused here although redis-cli \
             and PHP accept it. Give the server a certificate made with \
             `-addext basicConstraints=critical,CA:FALSE` (and its host in subjectAltName) and \
             set that same file as tls_ca_file, or sign a server certificate with your CA and \
             set the CA as tls_ca_file. Turning verification off (tls_insecure) is not needed."
        ),
    ))
}

/// The largest TLS file read (certificates and keys are a few KiB).
const TLS_FILE_LIMIT: u64 = 1024 * 1024;

/// Reads TLS file `path` (setting `what`): a regular file of at most
/// [`TLS_FILE_LIMIT`] bytes, so that a device or a FIFO (`/dev/zero`) is
/// refused rather than read without end.
///
/// # Errors
/// Not a regular file, too large, or unreadable, naming the setting.
fn read_tls_file(what: &str, path: &Path) -> RedisResult<Vec<u8>> {
    let refuse = |why: String| {
        RedisError::from((
            ErrorKind::InvalidClientConfig,
            "cannot read a TLS file",
            format!("{what} {}: {why}", path.display()),
        ))
    };
    let meta = std::fs::metadata(path).map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse(
            "not a regular file (give the path of a PEM file)".into(),
        ));
    }
    if meta.len() > TLS_FILE_LIMIT {
        return Err(refuse(format!(
            "{} bytes, more than the {TLS_FILE_LIMIT} a PEM certificate or key may have",
            meta.len()
        )));
    }
    let mut text = Vec::new();
    std::io::Read::read_to_end(
        &mut std::io::Read::take(
            std::fs::File::open(path).map_err(|e| refuse(e.to_string()))?,
            TLS_FILE_LIMIT,
        ),
        &mut text,
    )
    .map_err(|e| refuse(e.to_string()))?;
    Ok(text)
}

/// The CA and client certificate files as the client takes them; `None`
/// when neither is set (system roots, no client certificate).
///
/// # Errors
/// A file that cannot be read, naming the setting and the path.
pub fn certificates(tls: &TlsOptions) -> RedisResult<Option<TlsCertificates>> {
    let read = read_tls_file;
    let root_cert = tls
        .ca_file
        .as_deref()
        .map(|p| read("tls_ca_file", p))
        .transpose()?;
    let client_tls = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read("tls_cert_file", cert)?,
            client_key: read("tls_key_file", key)?,
        }),
        (None, None) => None,
        _ => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "tls_cert_file and tls_key_file go together (mutual TLS)",
            )));
        }
    };
    Ok(
        (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_a_client_certificate_is_refused() {
        let tls = TlsOptions {
            cert_file: Some("/x.pem".into()),
            ..TlsOptions::default()
        };
        let e = certificates(&tls).err().unwrap();
        assert!(e.to_string().contains("go together"), "{e}");
        assert!(super::super::is_permanent(&e));
    }
}
