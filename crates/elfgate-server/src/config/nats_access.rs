//! `[cluster]`'s NATS URL, credentials and TLS files, checked at load: secrets come from the
//! environment or from files only, never from the URL or this file, and a setting that could not
//! be used refuses the configuration rather than leaving the node off the bus.

use super::{ClusterConfig, ConfigError, redact_url};
use std::path::Path;

/// The `[cluster]` NATS keys fit together and name what exists.
pub(super) fn check(cluster: &ClusterConfig) -> Result<(), ConfigError> {
    let invalid = |why: String| Err(ConfigError::Invalid(why));
    for url in cluster.nats_url.split(',').map(str::trim) {
        if !(url.starts_with("nats://") || url.starts_with("tls://")) {
            return invalid(format!(
                "cluster.nats_url '{}' must start with nats:// or tls://",
                redact_url(url)
            ));
        }
        // A URL the client cannot parse is refused when the node connects, with the client's
        // own reason; here only what it carries matters.
        if let Ok(parsed) = reqwest::Url::parse(url)
            && (!parsed.username().is_empty() || parsed.password().is_some())
        {
            return invalid(format!(
                "cluster.nats_url '{}' carries credentials: a secret never goes in the URL; use \
                 cluster.nats_user with nats_password_env, nats_token_env, nats_nkey_file or \
                 nats_creds_file",
                redact_url(url)
            ));
        }
    }
    match (&cluster.nats_user, &cluster.nats_password_env) {
        (Some(_), None) => {
            return invalid(
                "cluster.nats_user needs cluster.nats_password_env (the variable holding the \
                 password)"
                    .into(),
            );
        }
        (None, Some(_)) => {
            return invalid("cluster.nats_password_env needs cluster.nats_user".into());
        }
        (Some(user), Some(_)) if user.trim().is_empty() => {
            return invalid("cluster.nats_user is blank".into());
        }
        _ => {}
    }
    let methods: Vec<&str> = [
        ("nats_user", cluster.nats_user.is_some()),
        ("nats_token_env", cluster.nats_token_env.is_some()),
        ("nats_nkey_file", cluster.nats_nkey_file.is_some()),
        ("nats_creds_file", cluster.nats_creds_file.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, set)| set.then_some(key))
    .collect();
    if methods.len() > 1 {
        return invalid(format!(
            "cluster: {} are set; a node authenticates to NATS one way (keep one)",
            methods
                .iter()
                .map(|k| format!("cluster.{k}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ));
    }
    for (key, var) in [
        ("nats_password_env", &cluster.nats_password_env),
        ("nats_token_env", &cluster.nats_token_env),
    ] {
        if let Some(var) = var {
            secret_from_env(key, var)?;
        }
    }
    if cluster.nats_tls_cert.is_some() != cluster.nats_tls_key.is_some() {
        return invalid(
            "cluster.nats_tls_cert and cluster.nats_tls_key go together (a client certificate \
             and its key)"
                .into(),
        );
    }
    for (key, file) in [
        ("nats_creds_file", &cluster.nats_creds_file),
        ("nats_nkey_file", &cluster.nats_nkey_file),
        ("nats_tls_ca", &cluster.nats_tls_ca),
        ("nats_tls_cert", &cluster.nats_tls_cert),
        ("nats_tls_key", &cluster.nats_tls_key),
    ] {
        if let Some(file) = file {
            readable_file(key, file)?;
        }
    }
    Ok(())
}

/// The secret in variable `var`, which `[cluster] key` names: set and not blank.
pub(crate) fn secret_from_env(key: &str, var: &str) -> Result<String, ConfigError> {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
        Ok(_) => Err(ConfigError::Invalid(format!(
            "cluster.{key}: the variable {var} is blank"
        ))),
        Err(_) => Err(ConfigError::Invalid(format!(
            "cluster.{key}: the variable {var} is not set"
        ))),
    }
}

fn readable_file(key: &str, file: &Path) -> Result<(), ConfigError> {
    std::fs::File::open(file).map(drop).map_err(|e| {
        ConfigError::Invalid(format!(
            "cluster.{key}: cannot read {}: {e}",
            file.display()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::try_load;

    /// A fleet node's configuration with `keys` in `[cluster]`: the error, if refused.
    fn refusal(keys: &str) -> Option<String> {
        try_load(&format!(
            "[storage]\nurl = \"postgres://x@127.0.0.1/x\"\n[cluster]\nnode_id = \"n1\"\n{keys}\n"
        ))
        .err()
        .map(|e| e.to_string())
    }

    #[test]
    fn nats_credentials_and_tls_files_must_fit_together() {
        assert_eq!(refusal("nats_url = \"tls://127.0.0.1:4222\""), None);
        let err = refusal("nats_url = \"nats://u:pw@127.0.0.1:4222\"").unwrap();
        assert!(
            err.contains("cluster.nats_url") && !err.contains("pw@"),
            "{err}"
        );
        let err = refusal("nats_url = \"nats://tok@127.0.0.1:4222\"").unwrap();
        assert!(err.contains("carries credentials"), "{err}");
        let err = refusal("nats_url = \"http://127.0.0.1:4222\"").unwrap();
        assert!(err.contains("nats:// or tls://"), "{err}");
        let err = refusal("nats_url = \"nats://127.0.0.1:4222\"\nnats_user = \"u\"").unwrap();
        assert!(err.contains("cluster.nats_password_env"), "{err}");
        let err = refusal(
            "nats_url = \"nats://127.0.0.1:4222\"\nnats_token_env = \"PATH\"\n\
             nats_creds_file = \"/etc/hostname\"",
        )
        .unwrap();
        assert!(
            err.contains("cluster.nats_token_env and cluster.nats_creds_file"),
            "{err}"
        );
        let err =
            refusal("nats_url = \"nats://127.0.0.1:4222\"\nnats_tls_cert = \"/etc/hostname\"")
                .unwrap();
        assert!(err.contains("cluster.nats_tls_key"), "{err}");
        let err =
            refusal("nats_url = \"nats://127.0.0.1:4222\"\nnats_tls_ca = \"/nonexistent/ca.pem\"")
                .unwrap();
        assert!(err.contains("cluster.nats_tls_ca"), "{err}");
    }
}
