//! Bearer tokens. Cluster tokens (the admin's) are kept as a SHA-256 digest only, under
//! `/registry/berth.io/tokens/<hex digest>`, so the store never holds a usable credential.
//! Service-account tokens live in their Secret (`type: kubernetes.io/service-account-token`,
//! as Kubernetes keeps them) and name that Secret, so checking one is a single lookup;
//! deleting the Secret or the service account revokes the token.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use base64::Engine;
use serde_json::Value;

use super::{Error, Kind, Registry, Result, catalog};
use crate::store::Outcome;
pub use crate::types::accounts::{
    SA_NAME, SA_UID, SERVICE_ACCOUNT_TOKEN, new_service_account_token, parse_service_account_token,
};

/// The group of every authenticated user.
pub const AUTHENTICATED: &str = "system:authenticated";

/// Who a token belongs to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    /// A unique id, when the authenticator (or an impersonation) gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(default)]
    pub groups: Vec<String>,
    /// The namespace of a service account; `None` for other users. (Authorization is
    /// RBAC's: this grants nothing.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

fn key(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("/registry/berth.io/tokens/{hex}")
}

impl Registry {
    /// The user a bearer token belongs to.
    pub fn authenticate(&self, token: &str) -> Option<User> {
        if super::satoken::looks_like_jwt(token) {
            return super::satoken::authenticate(self, token);
        }
        if let Some(rec) = self.store.get(&key(token)) {
            let v: serde_json::Value = serde_json::from_slice(&rec.value).ok()?;
            let mut user: User = serde_json::from_value(v.get("user")?.clone()).ok()?;
            if !user.groups.iter().any(|g| g == AUTHENTICATED) {
                user.groups.push(AUTHENTICATED.into());
            }
            return Some(user);
        }
        self.service_account(token)
    }

    /// The service account whose token Secret holds `token`.
    fn service_account(&self, token: &str) -> Option<User> {
        let (ns, secret) = parse_service_account_token(token)?;
        let secrets = catalog::of(Kind::Secret);
        let rec = self.store.get(&secrets.key(Some(&ns), &secret))?;
        let s: Value = serde_json::from_slice(&rec.value).ok()?;
        if s["type"] != SERVICE_ACCOUNT_TOKEN || s.pointer("/metadata/deletionTimestamp").is_some()
        {
            return None;
        }
        let stored = s
            .pointer("/data/token")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())?;
        // Compare digests: equal length, and no early exit on the secret's bytes.
        if Sha256::digest(&stored) != Sha256::digest(token.as_bytes()) {
            return None;
        }
        let annotation = |k: &str| {
            s.pointer("/metadata/annotations")
                .and_then(|a| a.get(k))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let sa_name = annotation(SA_NAME)?;
        let sa_uid = annotation(SA_UID)?;
        let sas = catalog::of(Kind::ServiceAccount);
        let sa: Value =
            serde_json::from_slice(&self.store.get(&sas.key(Some(&ns), &sa_name))?.value).ok()?;
        if sa.pointer("/metadata/uid").and_then(Value::as_str) != Some(sa_uid.as_str()) {
            return None;
        }
        Some(User {
            name: format!("system:serviceaccount:{ns}:{sa_name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                AUTHENTICATED.into(),
            ],
            namespace: Some(ns),
            uid: Some(sa_uid),
        })
    }

    /// Records `token` as belonging to `user` (idempotent).
    pub async fn register_token(&self, token: &str, user: &User) -> Result<()> {
        let value = serde_json::json!({"metadata": {"name": user.name}, "user": user});
        let bytes = serde_json::to_vec(&value).expect("JSON serializes");
        match self.store.create(&key(token), bytes).await? {
            Outcome::Written(_) | Outcome::AlreadyExists(_) => Ok(()),
            other => Err(Error::Internal(format!("register token: {other:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_tokens_name_their_secret() {
        let t = new_service_account_token("team-a", "default-token");
        assert_eq!(
            parse_service_account_token(&t),
            Some(("team-a".into(), "default-token".into()))
        );
        assert_ne!(t, new_service_account_token("team-a", "default-token"));
        assert_eq!(parse_service_account_token("bsa.x"), None);
        assert_eq!(parse_service_account_token("random-admin-token"), None);
        assert_eq!(parse_service_account_token(&format!("{t}.extra")), None);
    }
}
