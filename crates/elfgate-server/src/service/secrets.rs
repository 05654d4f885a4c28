//! The built-in input scan: a text a request sends to a model that carries the daemon's own API
//! token or a configured provider's key is refused before anything is stored or sent, since a
//! model provider (and the session's history) would get the secret.

use crate::error::ApiError;
use crate::state::AppState;

/// Secrets shorter than this are not looked for (a short value would match ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// The secrets the input scan looks for, read once for a request's many texts.
pub struct SecretScan {
    /// The daemon's token.
    token: Option<String>,
    /// Each provider's key: (provider, its variable, the key).
    keys: Vec<(String, String, String)>,
}

impl SecretScan {
    /// The daemon's token and the providers' keys now set.
    pub fn new(state: &AppState) -> SecretScan {
        let long_enough = |s: &String| s.len() >= MIN_SECRET_LEN;
        let keys = state
            .config
            .providers
            .iter()
            .filter_map(|(name, p)| {
                let var = p.api_key_env.as_deref()?;
                let key = std::env::var(var).ok().filter(long_enough)?;
                Some((name.clone(), var.to_string(), key))
            })
            .collect();
        SecretScan {
            token: state.config.token.clone().filter(long_enough),
            keys,
        }
    }

    /// One text a request sends (`field` names where it is): 422 naming the field and which
    /// secret, never its value.
    pub fn check(&self, text: &str, field: &str) -> Result<(), ApiError> {
        if self.token.as_deref().is_some_and(|t| text.contains(t)) {
            return Err(ApiError::Unprocessable(format!(
                "{field}: it carries this daemon's API token, which is never sent to a model; \
                 remove it (and consider the token exposed if it was pasted from elsewhere)"
            )));
        }
        for (name, var, key) in &self.keys {
            if text.contains(key.as_str()) {
                return Err(ApiError::Unprocessable(format!(
                    "{field}: it carries the API key of provider '{name}' ({var}), which is \
                     never sent to a model; remove it"
                )));
            }
        }
        Ok(())
    }

    /// A prompt and the system prompt it sets, in that order.
    pub(crate) fn check_prompt(&self, prompt: &str, system: Option<&str>) -> Result<(), ApiError> {
        self.check(prompt, "prompt")?;
        match system {
            Some(system) => self.check(system, "systemPrompt"),
            None => Ok(()),
        }
    }
}
