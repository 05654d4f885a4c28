//! Bodies of the API key routes (`/v1/admin/keys`): what an admin sends to create or change a
//! key, and what the daemon answers. Strict like every request body: a field the body does not
//! know is refused.

use chrono::{DateTime, Utc};
use elfgate_core::{PrincipalRole, Scopes};
use serde::{Deserialize, Deserializer, Serialize};

/// Body of `POST /v1/admin/keys`.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateKeyRequest {
    /// What to call the key (shown in lists).
    pub name: String,
    /// The user it acts for.
    pub user: String,
    /// That user's team.
    pub team: String,
    /// `admin`, `member` or `viewer`. Kept as text here so that an unknown role is a 422 naming
    /// the roles there are.
    #[schema(value_type = PrincipalRole)]
    pub role: String,
    /// When it stops working; null or absent: never.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
    /// How far it reaches within its role; absent: as far as the role goes.
    #[serde(default)]
    pub scopes: Option<Scopes>,
}

/// Body of `PATCH /v1/admin/keys/{id}`: each field given replaces the key's.
#[derive(Debug, Clone, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateKeyRequest {
    /// A new name.
    #[serde(default)]
    pub name: Option<String>,
    /// A new role (`admin`, `member` or `viewer`).
    #[schema(value_type = Option<PrincipalRole>)]
    #[serde(default)]
    pub role: Option<String>,
    /// New scopes: the whole object, replacing the key's.
    #[serde(default)]
    pub scopes: Option<Scopes>,
    /// A new expiry; null: never.
    #[schema(value_type = Option<DateTime<Utc>>)]
    #[serde(default, deserialize_with = "present")]
    pub expires_at: Option<Option<DateTime<Utc>>>,
}

/// A field that is present (null included): `Some`, so that `"expiresAt": null` is told from an
/// absent field (which serde's `default` leaves `None`).
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

/// An API key as lists show it: never its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyView {
    /// Its public id (the `<id>` of `egk_<id>_<secret>`).
    pub id: String,
    /// Its name.
    pub name: String,
    /// The user it acts for.
    pub user: String,
    /// That user's team.
    pub team: String,
    /// What it may do.
    pub role: PrincipalRole,
    /// How far it reaches within its role.
    pub scopes: Scopes,
    /// When it stops working; null: never.
    pub expires_at: Option<DateTime<Utc>>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
    /// When it was last changed.
    pub updated_at: DateTime<Utc>,
    /// When it was revoked; null: it was not.
    pub revoked_at: Option<DateTime<Utc>>,
}

/// Answer of `POST /v1/admin/keys`: the key with its secret, shown this once.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedKey {
    /// The whole key, `egk_<id>_<secret>`, to give its user: the daemon keeps only its hash and
    /// cannot show it again.
    pub key: String,
    /// The key as lists show it.
    #[serde(flatten)]
    pub view: KeyView,
}

/// Answer of `GET /v1/admin/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyList {
    /// Every key, revoked ones included, oldest first.
    pub keys: Vec<KeyView>,
}

/// One entry of the access audit (`GET /v1/admin/audit`): a key's creation, change or
/// revocation, or a refused request. Never a secret.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessAuditEntry {
    /// Its id: later entries have greater ones (`before` pages back).
    pub id: i64,
    /// When it happened.
    pub at: DateTime<Utc>,
    /// `key_created`, `key_changed`, `key_revoked` or `refused`.
    pub kind: String,
    /// Who did it or was refused (a user), when known.
    pub actor: Option<String>,
    /// The key it concerns: the one created, changed or revoked, or the one a refused request
    /// came with.
    pub key_id: Option<String>,
    /// A refused request's method and path.
    pub route: Option<String>,
    /// The status a refused request was answered with (401 or 403).
    pub status: Option<u16>,
    /// Why a request was refused (e.g. `unknown_key`, `revoked_key`, `admin_only`).
    pub reason: Option<String>,
    /// What a key's creation or change set.
    #[schema(value_type = Option<Object>)]
    pub detail: Option<serde_json::Value>,
}

/// Answer of `GET /v1/admin/audit`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccessAuditList {
    /// The entries, newest first.
    pub entries: Vec<AccessAuditEntry>,
}
