//! The SQS connection's settings checked at start, where Laravel checks
//! none of them and every call then fails: a queue URL prefix that is no
//! `http(s)://` URL, a region AWS would never name, an endpoint of another
//! scheme, a key without its secret (which `SqsConnector` silently drops
//! for AWS's default credential chain), a user name or password written
//! into a URL (SQS takes none there; the worker would print it in its start
//! line and every error). Each refusal names the key, never a credential.

use anyhow::{Context, bail};

use super::file::Layer;
use crate::queue::sqs::{Overflow, SqsQueueSpec};

/// Checks `spec` as resolved from `[sqs]` (the app's `sqs` connection,
/// `SQS_PREFIX`, `AWS_*`).
///
/// # Errors
/// - `prefix` (`SQS_PREFIX`) empty, not `http://` or `https://` with a
///   host, or holding a user name or password;
/// - `endpoint` (`AWS_ENDPOINT_URL_SQS`, `AWS_ENDPOINT_URL`) likewise;
/// - `region` (`AWS_DEFAULT_REGION`) empty or not a host name label
///   (letters, digits and `-`, 1 to 63 characters, no `-` at either end),
///   as the SDK needs it to build and sign each request;
/// - `key` without `secret`, or `secret` without `key`.
pub fn check(spec: &SqsQueueSpec) -> anyhow::Result<()> {
    check_url(
        &spec.prefix,
        "[sqs] prefix (SQS_PREFIX)",
        "https://sqs.REGION.amazonaws.com/ACCOUNT_ID",
    )?;
    if let Some(endpoint) = &spec.endpoint {
        check_url(
            endpoint,
            "[sqs] endpoint (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL)",
            "http://127.0.0.1:4566 for a local SQS",
        )?;
    }
    if !is_region(&spec.region) {
        bail!(
            "[sqs] region (AWS_DEFAULT_REGION) = {:?} is not an AWS region: give one such as \
             us-east-1 (letters, digits and '-'; the SDK builds the endpoint's host name and \
             signs every request with it)",
            crate::config::redact::text(&shorten(&spec.region))
        );
    }
    match (&spec.key, &spec.secret) {
        (Some(_), None) => bail!(
            "[sqs] key (AWS_ACCESS_KEY_ID) is set without [sqs] secret \
             (AWS_SECRET_ACCESS_KEY): Laravel's SqsConnector would drop the key and use AWS's \
             default credential chain, with other credentials than meant; set both, or \
             neither to use the default chain (profile, web identity, task or instance role)"
        ),
        (None, Some(_)) => bail!(
            "[sqs] secret (AWS_SECRET_ACCESS_KEY) is set without [sqs] key \
             (AWS_ACCESS_KEY_ID): set both, or neither to use AWS's default credential chain"
        ),
        _ => Ok(()),
    }
}

/// Checks that the profile `AWS_PROFILE` names (read by `env`, the
/// process environment for the SDK) is in the shared config or
/// credentials file (`AWS_CONFIG_FILE`, default `~/.aws/config`, as
/// `[profile NAME]` or `[NAME]`; `AWS_SHARED_CREDENTIALS_FILE`, default
/// `~/.aws/credentials`, as `[NAME]`), when `spec` leaves the credentials
/// to AWS's default chain (no key and secret); `default` is not checked
/// (the chain goes on without it).
///
/// # Errors
/// The profile is in neither file, or neither can be read: every call
/// would fail on credentials, with the SDK's words that do not name it.
pub fn check_profile(
    spec: &SqsQueueSpec,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    if spec.key.is_some() && spec.secret.is_some() {
        return Ok(());
    }
    let Some(profile) = env("AWS_PROFILE").filter(|p| !p.is_empty() && p != "default") else {
        return Ok(());
    };
    let home = env("HOME").unwrap_or_default();
    let file = |var: &str, name: &str| {
        env(var)
            .filter(|f| !f.is_empty())
            .unwrap_or_else(|| format!("{home}/.aws/{name}"))
    };
    let config = file("AWS_CONFIG_FILE", "config");
    let credentials = file("AWS_SHARED_CREDENTIALS_FILE", "credentials");
    let named = |path: &str, config_file: bool| {
        std::fs::read_to_string(path).is_ok_and(|text| {
            text.lines().any(|line| {
                let Some(section) = line
                    .trim()
                    .strip_prefix('[')
                    .and_then(|l| l.split_once(']'))
                    .map(|(section, _)| section.trim())
                else {
                    return false;
                };
                let name = match section.strip_prefix("profile") {
                    Some(rest) if config_file && rest.starts_with(char::is_whitespace) => {
                        rest.trim()
                    }
                    _ => section,
                };
                name == profile
            })
        })
    };
    if named(&config, true) || named(&credentials, false) {
        return Ok(());
    }
    bail!(
        "AWS_PROFILE={profile:?} names a profile that is in neither {config} nor {credentials} \
         (AWS_CONFIG_FILE, AWS_SHARED_CREDENTIALS_FILE): with no [sqs] key and secret the \
         worker takes its credentials from AWS's default chain, and every call would fail \
         on them; add the profile, unset AWS_PROFILE, or set [sqs] key and secret \
         (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
    )
}

/// Checks that `url` (the value of `key`) is `http://` or `https://`
/// with a host and no user part; `example` is said in the refusal.
fn check_url(url: &str, key: &str, example: &str) -> anyhow::Result<()> {
    if url.trim().is_empty() {
        bail!("{key} is empty: give the URL ({example})");
    }
    // Any `@` may end a user part, even one a raw `/` in its password
    // cut: the value is not shown.
    if url.contains('@') {
        bail!(
            "{key} holds a user name or password (an '@' in the URL): SQS takes none in its \
             URLs, and the worker would print them with every queue URL; give the \
             credentials as [sqs] key and secret (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) \
             and the URL without them ({example})"
        );
    }
    let Some((scheme, rest)) = url.split_once("://") else {
        bail!(
            "{key} = {:?} is not a URL: give http:// or https:// and a host ({example})",
            shorten(url)
        );
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    if !matches!(scheme.to_ascii_lowercase().as_str(), "http" | "https") {
        bail!(
            "{key} = {:?}: the scheme must be http:// or https:// ({example})",
            shorten(url)
        );
    }
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(host, _)| host);
    if host.is_empty() || host.contains(char::is_whitespace) || url.contains(char::is_whitespace) {
        bail!(
            "{key} = {:?} has no host or holds a space: give http:// or https:// and a host \
             ({example})",
            shorten(url)
        );
    }
    Ok(())
}

/// Whether `region` can be an AWS region: a host name label.
fn is_region(region: &str) -> bool {
    (1..=63).contains(&region.len())
        && region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !region.starts_with('-')
        && !region.ends_with('-')
}

/// `text` cut to 80 characters for a message.
fn shorten(text: &str) -> String {
    let mut short: String = text.chars().take(80).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    short
}

/// `[sqs]` and `[queue]`, resolved for the SQS driver as the skeleton's
/// `sqs` connection reads them: `SQS_PREFIX` (default the skeleton's
/// placeholder is refused: it names no account), `SQS_SUFFIX`,
/// `AWS_DEFAULT_REGION` (default `us-east-1`), the credentials, the
/// endpoint; `[queue] retry_after` is the visibility timeout each receive
/// asks for (default 30 s, AWS's default). Overflow payloads (13.9+) are
/// read from `[cache]`, unless `overflow_store` names another store.
///
/// # Errors
/// No prefix, a visibility timeout SQS refuses (below 2 s the worker
/// cannot renew it in time; above 43,200 s SQS refuses it), or what
/// [`super::sqs::check`] refuses (a prefix, endpoint or region every call
/// would fail on, a key without its secret).
pub fn sqs_spec(layer: &Layer) -> anyhow::Result<SqsQueueSpec> {
    let sqs = &layer.sqs;
    // The store the worker reads (`[cache] store`, default `redis`): the
    // overflow payloads are there unless the app names another store.
    let cache_store = layer.cache.store.as_deref().unwrap_or("redis");
    let prefix = sqs.prefix.clone().context(
        "the SQS queue needs its queues' URL prefix: set SQS_PREFIX \
         (https://sqs.REGION.amazonaws.com/ACCOUNT_ID) in the app's .env (--env-file), or \
         [sqs] prefix in the config file, or pass --app so the app answers",
    )?;
    let visibility = super::retry_after::sqs(&layer.queue)?;
    let spec = SqsQueueSpec {
        prefix,
        suffix: sqs.suffix.clone().unwrap_or_default(),
        region: sqs.region.clone().unwrap_or_else(|| "us-east-1".into()),
        key: sqs.key.clone(),
        secret: sqs.secret.clone(),
        token: sqs.token.clone(),
        endpoint: sqs.endpoint.clone(),
        visibility,
        overflow: Overflow {
            enabled: sqs.overflow_enabled.unwrap_or(false),
            elsewhere: sqs
                .overflow_store
                .clone()
                .filter(|store| !store.is_empty() && *store != cache_store),
            delete_after_processing: sqs.overflow_delete_after_processing.unwrap_or(true),
        },
    };
    super::sqs::check(&spec)?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[sqs] secret` and `token` read from a config file as plain
    /// strings, held as [`crate::redact::Secret`]: the layer's `{:?}` shows
    /// the key and masks both, and the spec hands the values on.
    #[test]
    fn the_secret_and_token_never_show() {
        let layer: crate::config::file::Layer = toml::from_str(
            "[sqs]\nprefix = \"https://sqs.x/1\"\nkey = \"AKIA1\"\nsecret = \"wJalr\"\n\
             token = \"FwoG\"\n",
        )
        .unwrap();
        let shown = format!("{:?}", layer.sqs);
        assert!(shown.contains("AKIA1") && shown.contains("***"), "{shown}");
        assert!(
            !shown.contains("wJalr") && !shown.contains("FwoG"),
            "{shown}"
        );
        let spec = sqs_spec(&layer).unwrap();
        let shown = format!("{spec:?}");
        assert!(
            !shown.contains("wJalr") && !shown.contains("FwoG"),
            "{shown}"
        );
        let exposed =
            |s: &Option<crate::redact::Secret>| s.as_ref().map(|s| s.expose().to_string());
        assert_eq!(exposed(&spec.secret).as_deref(), Some("wJalr"));
        assert_eq!(exposed(&spec.token).as_deref(), Some("FwoG"));
    }

    fn spec() -> SqsQueueSpec {
        SqsQueueSpec {
            prefix: "https://sqs.eu-west-1.amazonaws.com/123456789012".into(),
            suffix: String::new(),
            region: "eu-west-1".into(),
            key: Some("AKIA1".into()),
            secret: Some("s3cret".into()),
            token: None,
            endpoint: Some("http://127.0.0.1:4566".into()),
            visibility: 30,
            overflow: Overflow::default(),
        }
    }

    fn refused(change: impl FnOnce(&mut SqsQueueSpec)) -> String {
        let mut s = spec();
        change(&mut s);
        format!("{:#}", check(&s).unwrap_err())
    }

    /// Issue 47, 12: what every poll would fail on is refused at start,
    /// naming the key, and a user part of a URL is never shown.
    #[test]
    fn settings_every_call_would_fail_on_are_refused() {
        check(&spec()).unwrap();
        let mut chain = spec();
        (chain.key, chain.secret) = (None, None);
        check(&chain).unwrap();

        for (prefix, says) in [
            ("", "[sqs] prefix (SQS_PREFIX) is empty"),
            ("   ", "is empty"),
            ("my-queues", "is not a URL"),
            ("ftp://sqs.example/1", "must be http:// or https://"),
            ("https:///123", "has no host"),
        ] {
            let e = refused(|s| s.prefix = prefix.into());
            assert!(
                e.contains(says) && e.contains("SQS_PREFIX"),
                "{prefix:?}: {e}"
            );
        }
        for endpoint in ["ftp://127.0.0.1:4566", "127.0.0.1:4566", ""] {
            let e = refused(|s| s.endpoint = Some(endpoint.into()));
            assert!(e.contains("AWS_ENDPOINT_URL"), "{endpoint:?}: {e}");
        }
        for region in ["", "us east 1", "-us-east-1", "us_east_1", &"a".repeat(64)] {
            let e = refused(|s| s.region = region.into());
            assert!(e.contains("AWS_DEFAULT_REGION"), "{region:?}: {e}");
        }
        for url in [
            "https://u:Sup3rPw@sqs.eu-west-1.amazonaws.com/1",
            "https://u:Sup3r/Pw@sqs.eu-west-1.amazonaws.com/1",
            "ftp://u:Sup3rPw@host/1",
            "u:Sup3rPw@host",
        ] {
            for e in [
                refused(|s| s.prefix = url.into()),
                refused(|s| s.endpoint = Some(url.into())),
            ] {
                assert!(!e.contains("Sup3r") && !e.contains("u:"), "{url}: {e}");
            }
        }
        let e = refused(|s| s.secret = None);
        assert!(
            e.contains("[sqs] key (AWS_ACCESS_KEY_ID) is set without [sqs] secret"),
            "{e}"
        );
        assert!(!e.contains("AKIA1"), "{e}");
        let e = refused(|s| s.key = None);
        assert!(
            e.contains("without [sqs] key") && !e.contains("s3cret"),
            "{e}"
        );
    }

    /// Issue 47, 12: a missing `AWS_PROFILE` is named at start, when the
    /// default credential chain would read it.
    #[test]
    fn a_missing_aws_profile_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().to_str().unwrap().to_string();
        std::fs::create_dir(dir.path().join(".aws")).unwrap();
        std::fs::write(
            dir.path().join(".aws/config"),
            "[default]\nregion = us-east-1\n[profile  staging ]\nregion = eu-west-1\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".aws/credentials"),
            "[ci]\naws_access_key_id = AKIA\n",
        )
        .unwrap();
        let mut chain = spec();
        (chain.key, chain.secret) = (None, None);
        let with = |profile: &str| {
            let home = home.clone();
            let profile = profile.to_string();
            move |var: &str| match var {
                "HOME" => Some(home.clone()),
                "AWS_PROFILE" => Some(profile.clone()),
                _ => None,
            }
        };
        for present in ["staging", "ci", "default", ""] {
            check_profile(&chain, with(present)).unwrap();
        }
        let e = check_profile(&chain, with("prod")).unwrap_err().to_string();
        assert!(
            e.contains("AWS_PROFILE=\"prod\"") && e.contains(".aws/config"),
            "{e}"
        );
        check_profile(&spec(), with("prod")).expect("key and secret: no profile read");
    }
}
