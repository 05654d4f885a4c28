//! API keys (see [`KeyStore`]): found by their public id, the primary key. A change is one
//! statement, so that two admins changing one key at once each change what they named.

use super::SqlBackend;
use crate::codec::{parse, parse_ts, ts};
use crate::rows::RowRead;
use crate::{KeyChange, KeyStore, StoreError, StoreResult, StoredKey};
use async_trait::async_trait;
use chrono::Utc;
use sqlx::{Database, Encode, Executor, Type};

#[async_trait]
impl<S> KeyStore for S
where
    S: SqlBackend,
    for<'c> &'c mut <S::Db as Database>::Connection: Executor<'c, Database = S::Db>,
    for<'q> String: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> Option<String>: Encode<'q, S::Db> + Type<S::Db>,
    for<'q> i64: Encode<'q, S::Db> + Type<S::Db>,
{
    async fn create_key(&self, key: &StoredKey) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO api_keys (id, name, user_name, team, role, scopes, secret_hash, \
             created_at, expires_at, revoked_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, \
             $8, $9, $10, $11)",
        )
        .bind(key.id.clone())
        .bind(key.name.clone())
        .bind(key.user.clone())
        .bind(key.team.clone())
        .bind(key.role.to_string())
        .bind(scopes_text(&key.scopes)?)
        .bind(key.secret_hash.clone())
        .bind(ts(&key.created_at))
        .bind(key.expires_at.as_ref().map(ts))
        .bind(key.revoked_at.as_ref().map(ts))
        .bind(ts(&key.updated_at))
        .execute(self.shared().write)
        .await?;
        Ok(())
    }

    async fn get_key(&self, id: &str) -> StoreResult<Option<StoredKey>> {
        let row = sqlx::query("SELECT * FROM api_keys WHERE id = $1")
            .bind(id.to_owned())
            .fetch_optional(self.shared().read)
            .await?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn list_keys(&self) -> StoreResult<Vec<StoredKey>> {
        let rows = sqlx::query("SELECT * FROM api_keys ORDER BY created_at, id")
            .fetch_all(self.shared().read)
            .await?;
        rows.iter().map(key_from_row).collect()
    }

    async fn update_key(&self, id: &str, change: &KeyChange) -> StoreResult<Option<StoredKey>> {
        let scopes = change.scopes.as_ref().map(scopes_text).transpose()?;
        let row = sqlx::query(
            "UPDATE api_keys SET name = COALESCE($1, name), role = COALESCE($2, role), scopes = \
             COALESCE($3, scopes), expires_at = CASE WHEN $4 = 1 THEN $5 ELSE expires_at END, \
             updated_at = $6 WHERE id = $7 AND revoked_at IS NULL RETURNING *",
        )
        .bind(change.name.clone())
        .bind(change.role.map(|r| r.to_string()))
        .bind(scopes)
        .bind(i64::from(change.expires_at.is_some()))
        .bind(change.expires_at.flatten().as_ref().map(ts))
        .bind(ts(&Utc::now()))
        .bind(id.to_owned())
        .fetch_optional(self.shared().write)
        .await?;
        row.as_ref().map(key_from_row).transpose()
    }

    async fn revoke_key(&self, id: &str) -> StoreResult<Option<StoredKey>> {
        let now = ts(&Utc::now());
        let row = sqlx::query(
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1), updated_at = $1 WHERE id \
             = $2 RETURNING *",
        )
        .bind(now)
        .bind(id.to_owned())
        .fetch_optional(self.shared().write)
        .await?;
        row.as_ref().map(key_from_row).transpose()
    }
}

fn scopes_text(scopes: &elfgate_core::Scopes) -> StoreResult<String> {
    serde_json::to_string(scopes).map_err(|e| StoreError::Corrupt(format!("key scopes: {e}")))
}

fn key_from_row(r: &impl RowRead) -> StoreResult<StoredKey> {
    let scopes: String = r.text("scopes")?;
    Ok(StoredKey {
        id: r.text("id")?,
        name: r.text("name")?,
        user: r.text("user_name")?,
        team: r.text("team")?,
        role: parse("key role", &r.text("role")?)?,
        scopes: serde_json::from_str(&scopes)
            .map_err(|e| StoreError::Corrupt(format!("key scopes: {e}")))?,
        secret_hash: r.text("secret_hash")?,
        created_at: parse_ts(&r.text("created_at")?)?,
        expires_at: r
            .opt_text("expires_at")?
            .map(|s| parse_ts(&s))
            .transpose()?,
        revoked_at: r
            .opt_text("revoked_at")?
            .map(|s| parse_ts(&s))
            .transpose()?,
        updated_at: parse_ts(&r.text("updated_at")?)?,
    })
}
