//! Bearer tokens. Only a SHA-256 digest of each token is stored, under
//! `/registry/berth.io/tokens/<hex digest>`, so the store never holds a usable credential.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Error, Registry, Result};
use crate::store::Outcome;

/// Who a token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub name: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Limits the user to one namespace (service accounts); `None` for cluster-wide.
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
        let rec = self.store.get(&key(token))?;
        let v: serde_json::Value = serde_json::from_slice(&rec.value).ok()?;
        serde_json::from_value(v.get("user")?.clone()).ok()
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
