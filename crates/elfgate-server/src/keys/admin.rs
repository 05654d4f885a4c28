//! Managing API keys (`/v1/admin/keys`): creating one (its secret shown once), listing, changing
//! and revoking them. Each change drops this node's cached copy of the key at once.

use super::NewKey;
use crate::error::ApiError;
use crate::state::AppState;
use chrono::Utc;
use elfgate_api::keys::{CreateKeyRequest, CreatedKey, KeyView, UpdateKeyRequest};
use elfgate_core::{Principal, PrincipalRole};
use elfgate_store::{KeyChange, StoredKey};
use serde_json::json;

/// Longest name, user or team, in characters.
const MAX_NAME_CHARS: usize = 200;

/// Creates a key as `req` asks.
pub async fn create(
    state: &AppState,
    actor: Option<&Principal>,
    req: CreateKeyRequest,
) -> Result<CreatedKey, ApiError> {
    let role = role(&req.role)?;
    for (field, value) in [
        ("name", &req.name),
        ("user", &req.user),
        ("team", &req.team),
    ] {
        check_name(field, value)?;
    }
    if let Some(scopes) = &req.scopes {
        crate::service::scopes::check_given(scopes)?;
    }
    let made = NewKey::generate().map_err(|e| ApiError::Internal(e.to_string()))?;
    let now = Utc::now();
    let stored = StoredKey {
        id: made.id,
        name: req.name,
        user: req.user,
        team: req.team,
        role,
        scopes: req.scopes.unwrap_or_default(),
        secret_hash: made.secret_hash,
        created_at: now,
        expires_at: req.expires_at,
        revoked_at: None,
        updated_at: now,
    };
    state.store.create_key(&stored).await?;
    let detail = json!({"name": stored.name, "user": stored.user, "team": stored.team,
        "role": stored.role, "scopes": stored.scopes, "expiresAt": stored.expires_at});
    state
        .access_audit
        .key_event("key_created", actor, &stored.id, detail)
        .await;
    tracing::info!(key_id = %stored.id, user = %stored.user, team = %stored.team, role = %stored.role, "API key created");
    Ok(CreatedKey {
        key: made.key,
        view: view(stored),
    })
}

/// Every key, without secrets.
pub async fn list(state: &AppState) -> Result<Vec<KeyView>, ApiError> {
    Ok(state
        .store
        .list_keys()
        .await?
        .into_iter()
        .map(view)
        .collect())
}

/// Changes key `id` as `req` asks.
pub async fn update(
    state: &AppState,
    actor: Option<&Principal>,
    id: &str,
    req: UpdateKeyRequest,
) -> Result<KeyView, ApiError> {
    if let Some(name) = &req.name {
        check_name("name", name)?;
    }
    if let Some(scopes) = &req.scopes {
        crate::service::scopes::check_given(scopes)?;
    }
    let change = KeyChange {
        name: req.name,
        role: req.role.as_deref().map(role).transpose()?,
        scopes: req.scopes,
        expires_at: req.expires_at,
    };
    if change == KeyChange::default() {
        return Err(ApiError::Unprocessable(
            "nothing to change: give name, role, scopes or expiresAt".into(),
        ));
    }
    let changed = state.store.update_key(id, &change).await?;
    forget_everywhere(state, id).await;
    let changed = changed.ok_or_else(|| no_such_key(id))?;
    let mut detail = serde_json::Map::new();
    if let Some(name) = &change.name {
        detail.insert("name".into(), json!(name));
    }
    if let Some(role) = change.role {
        detail.insert("role".into(), json!(role));
    }
    if let Some(scopes) = &change.scopes {
        detail.insert("scopes".into(), json!(scopes));
    }
    if let Some(expires_at) = change.expires_at {
        detail.insert("expiresAt".into(), json!(expires_at));
    }
    state
        .access_audit
        .key_event("key_changed", actor, id, detail.into())
        .await;
    tracing::info!(key_id = %id, "API key changed");
    Ok(view(changed))
}

/// Revokes key `id` (again: nothing changes).
pub async fn revoke(state: &AppState, actor: Option<&Principal>, id: &str) -> Result<(), ApiError> {
    let revoked = state.store.revoke_key(id).await?;
    forget_everywhere(state, id).await;
    revoked.ok_or_else(|| no_such_key(id))?;
    state
        .access_audit
        .key_event("key_revoked", actor, id, json!({}))
        .await;
    tracing::info!(key_id = %id, "API key revoked");
    Ok(())
}

/// Drops every node's cached copy of key `id`: this node's at once, the others' when the bus
/// tells them (or their copy expires).
async fn forget_everywhere(state: &AppState, id: &str) {
    state.keys.forget(id);
    if let Some(fleet) = &state.fleet {
        fleet.announce_key_change(id).await;
    }
}

fn no_such_key(id: &str) -> ApiError {
    ApiError::NotFound(format!("no API key '{id}' (or it is revoked)"))
}

fn role(text: &str) -> Result<PrincipalRole, ApiError> {
    text.parse().map_err(|_| {
        ApiError::Unprocessable(format!(
            "unknown role '{text}' (at `role`): one of admin, member, viewer"
        ))
    })
}

fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    let chars = value.chars().count();
    if value.trim().is_empty() || chars > MAX_NAME_CHARS || value.chars().any(char::is_control) {
        return Err(ApiError::Unprocessable(format!(
            "`{field}` must be 1 to {MAX_NAME_CHARS} characters, none of them control characters"
        )));
    }
    Ok(())
}

/// A key as the API shows it: everything but the hash of its secret.
fn view(key: StoredKey) -> KeyView {
    KeyView {
        id: key.id,
        name: key.name,
        user: key.user,
        team: key.team,
        role: key.role,
        scopes: key.scopes,
        expires_at: key.expires_at,
        created_at: key.created_at,
        updated_at: key.updated_at,
        revoked_at: key.revoked_at,
    }
}
