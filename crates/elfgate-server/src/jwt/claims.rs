//! Who a checked token's claims say its holder is: the user from `user_claim`; the team and
//! role from `team_claim` and `role_claim` when configured and present, else from the token's
//! groups mapped by `[auth.jwt.groups]` (of those, the one with the highest role). A token that
//! leaves the user, team or role unknown is refused: nothing falls back to a default role.

use super::JwtRefused;
use crate::config::{GroupGrant, JwtConfig};
use elfgate_core::principal::ROOT_USER;
use elfgate_core::{Principal, PrincipalRole, Scopes};
use serde_json::{Map, Value};

/// The principal the claims of a verified token name.
pub(super) fn principal(
    config: &JwtConfig,
    claims: &Map<String, Value>,
) -> Result<Principal, JwtRefused> {
    let user = string_claim(claims, &config.user_claim)
        .ok_or_else(|| JwtRefused::MissingClaim(config.user_claim.clone()))?;
    // The root key's user owns what was made before principals existed and what the root key
    // makes: a provider's user of that name must not become its owner.
    if user == ROOT_USER {
        return Err(JwtRefused::ReservedUser);
    }
    let group = best_group(config, claims);
    let team = config
        .team_claim
        .as_deref()
        .and_then(|name| string_claim(claims, name))
        .or_else(|| group.map(|g| g.team.clone()))
        .ok_or(JwtRefused::NoTeam)?;
    let role = match config
        .role_claim
        .as_deref()
        .and_then(|name| string_claim(claims, name))
    {
        Some(role) => role.parse().map_err(|_| JwtRefused::UnknownRole)?,
        None => group.map(|g| g.role).ok_or(JwtRefused::NoRole)?,
    };
    Ok(Principal {
        user,
        team,
        role,
        key_id: None,
        scopes: Scopes::default(),
    })
}

/// A claim's non-blank string.
fn string_claim(claims: &Map<String, Value>, name: &str) -> Option<String> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// How much a role may do, to pick the strongest of several groups.
fn rank(role: PrincipalRole) -> u8 {
    match role {
        PrincipalRole::Admin => 2,
        PrincipalRole::Member => 1,
        PrincipalRole::Viewer => 0,
    }
}

/// Of the token's groups that `[auth.jwt.groups]` names, the one with the highest role (on a
/// tie, the first in the mapping's name order, so that the answer does not depend on the order
/// the provider lists them in).
fn best_group<'a>(config: &'a JwtConfig, claims: &Map<String, Value>) -> Option<&'a GroupGrant> {
    let held: Vec<&str> = match claims.get(&config.groups_claim) {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(one)) => vec![one.as_str()],
        _ => return None,
    };
    let mut best: Option<&GroupGrant> = None;
    for (name, grant) in &config.groups {
        if held.contains(&name.as_str()) && best.is_none_or(|b| rank(grant.role) > rank(b.role)) {
            best = Some(grant);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(extra: &str) -> JwtConfig {
        use figment::providers::Format as _;
        let text = format!(
            "issuer = \"https://idp\"\naudience = \"elfgate\"\njwks_url = \"https://idp/jwks\"\n{extra}"
        );
        figment::Figment::from(figment::providers::Toml::string(&text))
            .extract()
            .unwrap()
    }

    fn claims(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn claims_name_team_and_role() {
        let c = config("team_claim = \"team\"\nrole_claim = \"role\"");
        let p = principal(
            &c,
            &claims(json!({"sub": "alice", "team": "research", "role": "member"})),
        )
        .unwrap();
        assert_eq!(
            (p.user.as_str(), p.team.as_str(), p.role),
            ("alice", "research", PrincipalRole::Member)
        );
        assert_eq!(p.key_id, None);
        let e = principal(
            &c,
            &claims(json!({"sub": "alice", "team": "research", "role": "owner"})),
        );
        assert!(matches!(e, Err(JwtRefused::UnknownRole)));
    }

    #[test]
    fn groups_give_the_strongest_role() {
        let c = config(
            "[groups]\nresearch-readers = { team = \"research\", role = \"viewer\" }\n\
             research-devs = { team = \"research\", role = \"member\" }\n\
             ops = { team = \"ops\", role = \"admin\" }",
        );
        let p = principal(
            &c,
            &claims(
                json!({"sub": "bob", "groups": ["other", "research-readers", "research-devs"]}),
            ),
        )
        .unwrap();
        assert_eq!(
            (p.team.as_str(), p.role),
            ("research", PrincipalRole::Member)
        );
        let p = principal(&c, &claims(json!({"sub": "carol", "groups": "ops"}))).unwrap();
        assert_eq!((p.team.as_str(), p.role), ("ops", PrincipalRole::Admin));
    }

    #[test]
    fn nothing_falls_back() {
        let c =
            config("team_claim = \"team\"\n[groups]\ndevs = { team = \"d\", role = \"member\" }");
        // No group: a team from the claim, but no role.
        let e = principal(&c, &claims(json!({"sub": "dan", "team": "t"})));
        assert!(matches!(e, Err(JwtRefused::NoRole)));
        let e = principal(&c, &claims(json!({"team": "t", "groups": ["devs"]})));
        assert!(matches!(e, Err(JwtRefused::MissingClaim(ref c)) if c == "sub"));
        let e = principal(&c, &claims(json!({"sub": "root", "groups": ["devs"]})));
        assert!(matches!(e, Err(JwtRefused::ReservedUser)));
        let c = config("role_claim = \"role\"");
        let e = principal(&c, &claims(json!({"sub": "erin", "role": "member"})));
        assert!(matches!(e, Err(JwtRefused::NoTeam)));
    }
}
