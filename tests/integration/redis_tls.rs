//! TLS to Redis (`rediss://`, `REDIS_SCHEME=tls`), against a real
//! `redis-server --tls-port` with a CA and certificates the test makes with
//! `openssl`: jobs run, fail into the Redis failed store, are retried and
//! cleared over TLS; a wrong CA is refused at once with the cause named;
//! mutual TLS needs the client certificate; `tls_insecure` works and says
//! loudly that it does not verify.

use crate::common;

use std::path::{Path, PathBuf};

use common::redis_topologies::{
    Certs, Server, cli, logging_job_script, openssl, plain_args, require, text, write_config,
};

/// A test directory with certificates, a TLS server and a handler.
struct Tls {
    dir: tempfile::TempDir,
    certs: Certs,
    server: Server,
}

impl Tls {
    fn start(test: &str, mutual: bool) -> Option<Self> {
        if !require(test, &["redis-server", "openssl"]) {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("lw-tls-")
            .tempdir()
            .unwrap();
        let certs = Certs::generate(dir.path());
        let server = Server::start_free(dir.path(), "tls", |port| {
            (None, certs.server_args(port, mutual))
        });
        Some(Tls { dir, certs, server })
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A handler that logs the job's name, and fails `App\Jobs\Fails`.
    fn handler(&self) -> PathBuf {
        let then = r#"[ "$LARAVEL_WORKER_JOB_NAME" != 'App\Jobs\Fails' ]"#;
        logging_job_script(self.dir.path(), "$LARAVEL_WORKER_JOB_NAME", then)
    }

    fn jobs(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("jobs.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// A config on the TLS server with `redis_extra` in `[redis]` (and
    /// `url` unless it is given there).
    fn config(&self, name: &str, redis_extra: &str) -> PathBuf {
        let url = if redis_extra.contains("url =") {
            String::new()
        } else {
            format!("url = \"rediss://127.0.0.1:{}/0\"\n", self.server.port)
        };
        write_config(&self.path(name), &url, redis_extra, &self.handler())
    }
}

fn toml_path(p: &Path) -> String {
    p.display().to_string()
}

fn ok(out: &std::process::Output) -> String {
    assert!(out.status.success(), "{}", text(out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn jobs_run_fail_and_retry_over_tls_verified_by_the_ca_file() {
    let Some(t) = Tls::start("jobs_run_fail_and_retry_over_tls", false) else {
        return;
    };
    let config = t.config(
        "ca.toml",
        &format!("tls_ca_file = \"{}\"", toml_path(&t.certs.ca)),
    );
    ok(&cli(
        &config,
        &[
            "push",
            "default",
            "--job",
            "App\\Jobs\\Hello",
            "--count",
            "2",
        ],
        &[],
    ));
    // Laravel's variables alone reach the TLS server too: REDIS_SCHEME=tls
    // turns REDIS_HOST/REDIS_PORT into rediss://.
    let bare = t.path("bare.toml");
    std::fs::write(
        &bare,
        "[redis]\nprefix = \"laravel_database_\"\n[failed]\ndriver = \"null\"\n",
    )
    .unwrap();
    let port = t.server.port.to_string();
    let ca = toml_path(&t.certs.ca);
    ok(&cli(
        &bare,
        &["push", "default", "--job", "App\\Jobs\\Fails"],
        &[
            ("REDIS_HOST", "127.0.0.1"),
            ("REDIS_PORT", &port),
            ("REDIS_SCHEME", "tls"),
            ("REDIS_TLS_CA_FILE", &ca),
        ],
    ));
    // The cache connection (database 1) speaks TLS as well.
    ok(&cli(&config, &["restart"], &[]));
    let mut check = t.certs.client(t.server.port, 1).get_connection().unwrap();
    let restart: Option<String> = redis::cmd("GET")
        .arg("laravel_database_laravel_cache:illuminate:queue:restart")
        .query(&mut check)
        .unwrap();
    assert!(
        restart.is_some(),
        "the restart marker was not written over TLS"
    );

    let out = cli(&config, &["work", "--stop-when-empty"], &[]);
    ok(&out);
    let mut jobs = t.jobs();
    jobs.sort();
    assert_eq!(
        jobs,
        ["App\\Jobs\\Fails", "App\\Jobs\\Hello", "App\\Jobs\\Hello"]
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("(TLS)"), "{log}");

    // The failed job went to the Redis failed store, over TLS.
    let failed: serde_json::Value =
        serde_json::from_str(&ok(&cli(&config, &["failed", "--json"], &[]))).unwrap();
    assert_eq!(failed.as_array().unwrap().len(), 1, "{failed}");
    ok(&cli(&config, &["retry", "all"], &[]));
    let sizes: serde_json::Value = serde_json::from_str(&ok(&cli(
        &config,
        &["monitor", "redis:default", "--json"],
        &[],
    )))
    .unwrap();
    assert_eq!(sizes[0]["pending"], 1, "{sizes}");
    let cleared = ok(&cli(&config, &["clear"], &[]));
    assert!(cleared.contains("Cleared 1 jobs"), "{cleared}");
}

#[test]
fn a_wrong_ca_is_refused_at_once_naming_the_cause() {
    let Some(t) = Tls::start("a_wrong_ca_is_refused", false) else {
        return;
    };
    let config = t.config(
        "wrong.toml",
        &format!("tls_ca_file = \"{}\"", toml_path(&t.certs.other_ca)),
    );
    let started = std::time::Instant::now();
    let out = cli(&config, &["work", "--once"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid peer certificate") && err.contains("UnknownIssuer"),
        "the error must name the cause: {err}"
    );
    // A certificate that does not verify is not retried like a server that
    // is still starting.
    assert!(!err.contains("attempt=2"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Without a CA file the system's roots are used, which do not know the
    // test CA either.
    let config = t.config("system.toml", "");
    let out = cli(&config, &["push", "default", "--job", "X"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("UnknownIssuer"));
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let Some(t) = Tls::start("mutual_tls", true) else {
        return;
    };
    let ca = format!("tls_ca_file = \"{}\"", toml_path(&t.certs.ca));
    let without = t.config("without.toml", &ca);
    let out = cli(&without, &["push", "default", "--job", "X"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("CertificateRequired"), "{err}");
    assert!(!err.contains("attempt=2"), "{err}");

    let with = t.config(
        "with.toml",
        &format!(
            "{ca}\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"",
            toml_path(&t.certs.client_cert),
            toml_path(&t.certs.client_key)
        ),
    );
    ok(&cli(
        &with,
        &["push", "default", "--job", "App\\Jobs\\Hello"],
        &[],
    ));
    ok(&cli(&with, &["work", "--stop-when-empty"], &[]));
    assert_eq!(t.jobs(), ["App\\Jobs\\Hello"]);
}

#[test]
fn tls_insecure_connects_without_verifying_and_says_so() {
    let Some(t) = Tls::start("tls_insecure", false) else {
        return;
    };
    let config = t.config("insecure.toml", "tls_insecure = true");
    ok(&cli(
        &config,
        &["push", "default", "--job", "App\\Jobs\\Hello"],
        &[],
    ));
    let out = cli(&config, &["work", "--stop-when-empty"], &[]);
    ok(&out);
    assert_eq!(t.jobs(), ["App\\Jobs\\Hello"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARN") && err.contains("TLS certificate verification is OFF"),
        "{err}"
    );
}

/// A self-signed certificate for 127.0.0.1 made with `openssl req -x509`
/// (`NAME.pem`, `NAME.key` in `t`'s directory), with `extra` `-addext`s,
/// and a TLS server of its own presenting it.
fn self_signed_server(t: &Tls, name: &str, extra: &[&str]) -> Server {
    let (pem, key) = (format!("{name}.pem"), format!("{name}.key"));
    let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-newkey", "ec"];
    args.extend([
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    args.extend(["-keyout", &key, "-out", &pem]);
    args.extend(["-addext", "subjectAltName=IP:127.0.0.1"]);
    for ext in extra {
        args.extend(["-addext", ext]);
    }
    openssl(t.dir.path(), &args);
    let swap = |arg: String| {
        let (server_pem, server_key) = (
            toml_path(&t.certs.server_cert),
            toml_path(&t.certs.server_key),
        );
        match arg {
            a if a == server_pem => toml_path(&t.path(&pem)),
            a if a == server_key => toml_path(&t.path(&key)),
            a => a,
        }
    };
    Server::start_free(t.dir.path(), name, |port| {
        (
            None,
            t.certs
                .server_args(port, false)
                .into_iter()
                .map(swap)
                .collect(),
        )
    })
}

/// Issue 22, item 4: the self-signed certificate of a self-hosted Redis,
/// made with `openssl req -x509` (OpenSSL 3 marks it CA:TRUE) and given as
/// `tls_ca_file`. The TLS library refuses a CA certificate as the server's
/// own (`CaUsedAsEndEntity`); the error now says what to do, and doing it
/// (the same command with CA:FALSE) connects, verified.
#[test]
fn a_self_signed_ca_certificate_is_refused_saying_what_to_do() {
    let Some(t) = Tls::start("a_self_signed_ca_certificate", false) else {
        return;
    };
    let server = self_signed_server(&t, "selfca", &[]);
    let url = format!("url = \"rediss://127.0.0.1:{}/0\"", server.port);
    let ca = format!("tls_ca_file = \"{}\"", toml_path(&t.path("selfca.pem")));
    let config = t.config("selfca.toml", &format!("{url}\n{ca}"));
    let out = cli(&config, &["push", "default", "--job", "X"], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("CaUsedAsEndEntity") && err.contains("basicConstraints=critical,CA:FALSE"),
        "the error must say what to do: {err}"
    );

    let server = self_signed_server(&t, "selfee", &["basicConstraints=critical,CA:FALSE"]);
    let url = format!("url = \"rediss://127.0.0.1:{}/0\"", server.port);
    let ca = format!("tls_ca_file = \"{}\"", toml_path(&t.path("selfee.pem")));
    let config = t.config("selfee.toml", &format!("{url}\n{ca}"));
    ok(&cli(&config, &["push", "default", "--job", "X"], &[]));
}

/// Issue 22, item 4: a TLS file that is a device or a FIFO is refused, not
/// read without end.
#[test]
fn a_tls_file_that_is_not_a_regular_file_is_refused() {
    let Some(t) = Tls::start("a_tls_file_that_is_not_a_regular_file", false) else {
        return;
    };
    for setting in ["tls_ca_file", "tls_cert_file"] {
        let pair = match setting {
            "tls_cert_file" => format!("\ntls_key_file = \"{}\"", toml_path(&t.certs.client_key)),
            _ => String::new(),
        };
        let config = t.config("zero.toml", &format!("{setting} = \"/dev/zero\"{pair}"));
        let out = cli(&config, &["push", "default", "--job", "X"], &[]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("{setting} /dev/zero: not a regular file")),
            "{err}"
        );
    }
}

/// Issue 22, item 4: a URL whose scheme does not match the server fails at
/// the first try with the scheme to use. `rediss://` against a plain Redis
/// used to run five tries into their time limits (85 s), `redis://`
/// against a TLS-only port five resets (10 s), both without a hint.
#[test]
fn a_scheme_that_does_not_match_the_server_fails_with_a_hint() {
    let Some(t) = Tls::start("a_scheme_that_does_not_match", false) else {
        return;
    };
    let plain = Server::start_free(t.dir.path(), "plain", |port| (None, plain_args(port)));
    let cases = [
        (
            format!("rediss://127.0.0.1:{}/0", plain.port),
            "use redis://",
        ),
        (
            format!("redis://127.0.0.1:{}/0", t.server.port),
            "use rediss://",
        ),
    ];
    for (url, hint) in cases {
        let config = t.config("scheme.toml", &format!("url = \"{url}\""));
        let out = cli(&config, &["push", "default", "--job", "X"], &[]);
        assert_eq!(out.status.code(), Some(1), "{}", text(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(hint), "{url}: {err}");
        assert!(!err.contains("attempt=2"), "not retried: {err}");
    }
}
