//! Service accounts: a `default` and a `deployer` ServiceAccount in every namespace (the
//! deployer pods of DeploymentConfigs run as `deployer`, as in OpenShift), and the legacy
//! long-lived tokens, only when asked for (as upstream since 1.24): a Secret of type
//! `kubernetes.io/service-account-token` annotated `kubernetes.io/service-account.name`
//! gets the account's token, the CA and the namespace, and the account as its owner (so
//! the garbage collector removes it with the account). The API accepts the token for
//! requests its RBAC bindings allow; deleting the Secret revokes it. Pods get bound
//! tokens from the TokenRequest API instead. `deployer` is bound to `system:deployer` in
//! its namespace (the RoleBinding `system:deployers`), `default` to nothing.
//!
//! A reconcile decodes the namespace, account and token Secret it reads as their
//! k8s-openapi types (`Namespace`, `ServiceAccount`, `Secret`); the watch handlers read the
//! informers' JSON through [`crate::types::json`].

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use serde_json::json;

use super::{Action, Context, Result, Supervisor, decode, runtime};
use crate::client::informer::{Change, Informer};
use crate::client::{Client, split_key};
use crate::client::{Kind, catalog};
use crate::types::accounts::{SA_NAME, SA_UID, SERVICE_ACCOUNT_TOKEN, new_service_account_token};
use crate::types::json::str_at;
use crate::types::meta::Meta;

const WORKERS: usize = 2;
/// The accounts every live namespace has.
const ACCOUNTS: [&str; 2] = ["default", "deployer"];

#[derive(Clone)]
struct Accounts {
    client: Client,
    namespaces: Informer,
    accounts: Informer,
    secrets: Informer,
    /// The cluster's CA, written into the token Secrets.
    ca_pem: Option<String>,
    /// The namespaces whose deployer binding this process made (or found).
    deployers_bound: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

impl Accounts {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        match key.split_once(':') {
            Some(("ns", name)) => self.ensure_default(name).await,
            Some(("secret", secret)) => self.fill_token(secret).await,
            _ => Ok(Action::Done),
        }
    }

    /// A live namespace has the `default` and `deployer` service accounts.
    async fn ensure_default(&self, ns: &str) -> Result<Action> {
        let Some(namespace) = self.namespaces.get(ns) else {
            return Ok(Action::Done);
        };
        let namespace: Namespace = decode(&namespace)?;
        let phase = namespace.status.as_ref().and_then(|s| s.phase.as_deref());
        if namespace.metadata.is_deleting() || phase == Some("Terminating") {
            return Ok(Action::Done);
        }
        for name in ACCOUNTS {
            if self.accounts.get(&format!("{ns}/{name}")).is_some() {
                continue;
            }
            let sa = json!({
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": ns},
            });
            match self
                .client
                .create(self.accounts.resource(), Some(ns), &sa)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_already_exists() => {}
                // The namespace started terminating meanwhile.
                Err(crate::client::Error::Forbidden(_) | crate::client::Error::NotFound(_)) => {
                    return Ok(Action::Done);
                }
                Err(e) => return Err(e.into()),
            }
        }
        // After the accounts: a deployer pod waits for its account, not for this.
        if !self.deployers_bound.lock().is_ok_and(|b| b.contains(ns)) {
            self.bind_deployer(ns).await?;
        }
        Ok(Action::Done)
    }

    /// The `deployer` account of `ns` holds the ClusterRole `system:deployer` through the
    /// RoleBinding `system:deployers`, as OpenShift binds it: made once per namespace
    /// (put back when the namespace changes after a restart, not when deleted).
    async fn bind_deployer(&self, ns: &str) -> Result<()> {
        let binding = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "system:deployers", "namespace": ns,
                         "annotations": {"openshift.io/description":
                "Allows deploymentconfigs in this namespace to rollout pods in this namespace."}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "system:deployer"},
            "subjects": [{"kind": "ServiceAccount", "name": "deployer", "namespace": ns}],
        });
        let bindings = catalog::of(Kind::RoleBinding);
        match self.client.create(bindings, Some(ns), &binding).await {
            Ok(_) => {}
            Err(e) if e.is_already_exists() => {}
            // The namespace started terminating meanwhile.
            Err(crate::client::Error::Forbidden(_) | crate::client::Error::NotFound(_)) => {
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        if let Ok(mut bound) = self.deployers_bound.lock() {
            bound.insert(ns.to_string());
        }
        Ok(())
    }

    /// A Secret of type `kubernetes.io/service-account-token` naming an account gets
    /// that account's token (the legacy, long-lived kind, made only when asked for this
    /// way, as upstream's tokens controller does), the cluster's CA and the namespace,
    /// and the account as its owner (the garbage collector removes it with the account).
    /// One naming an account that is not there, or an earlier account of that name, is
    /// deleted.
    async fn fill_token(&self, key: &str) -> Result<Action> {
        let Some(secret) = self.secrets.get(key) else {
            return Ok(Action::Done);
        };
        let secret: Secret = decode(&secret)?;
        if secret.type_.as_deref() != Some(SERVICE_ACCOUNT_TOKEN) || secret.metadata.is_deleting() {
            return Ok(Action::Done);
        }
        let (Some(ns), secret_name) = split_key(key) else {
            return Ok(Action::Done);
        };
        let Some(account) = secret.metadata.annotation(SA_NAME).map(str::to_string) else {
            return Ok(Action::Done);
        };
        let sa = match self.accounts.get(&format!("{ns}/{account}")) {
            Some(sa) => Some(sa),
            // The informer may lag behind an account made with its Secret: ask.
            None => match self
                .client
                .get(self.accounts.resource(), Some(ns), &account)
                .await
            {
                Ok(sa) => Some(Arc::new(sa)),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.into()),
            },
        };
        let sa: Option<ServiceAccount> = sa.map(|sa| decode(&sa)).transpose()?;
        let uid = sa.as_ref().map(|sa| sa.metadata.uid().to_string());
        let named_uid = secret.metadata.annotation(SA_UID).unwrap_or("");
        let stale = match &uid {
            None => true,
            Some(uid) => !named_uid.is_empty() && named_uid != uid,
        };
        if stale {
            let params = crate::client::DeleteParams {
                uid: Some(secret.metadata.uid().to_string()),
                ..Default::default()
            };
            return match self
                .client
                .delete(self.secrets.resource(), Some(ns), secret_name, &params)
                .await
            {
                Ok(_) => Ok(Action::Done),
                Err(e) if e.is_not_found() || e.is_conflict() => Ok(Action::Done),
                Err(e) => Err(e.into()),
            };
        }
        let filled = secret
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("token"));
        if filled && !named_uid.is_empty() {
            return Ok(Action::Done);
        }
        let uid = uid.unwrap_or_default();
        let token = new_service_account_token(ns, secret_name);
        let b64 = |s: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(s)
        };
        let mut data = json!({"token": b64(&token), "namespace": b64(ns)});
        if let Some(ca) = &self.ca_pem {
            data["ca.crt"] = json!(b64(ca));
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": secret.metadata.resource_version,
                "annotations": {SA_UID: uid},
                "ownerReferences": [{
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "name": account,
                    "uid": uid,
                }],
            },
            "data": data,
        });
        match self
            .client
            .patch(
                self.secrets.resource(),
                Some(ns),
                secret_name,
                &crate::client::Patch::Merge(patch),
            )
            .await
        {
            Ok(_) => Ok(Action::Done),
            Err(e) if e.is_not_found() => Ok(Action::Done),
            Err(e) => Err(e.into()),
        }
    }
}

/// Whether `secret` is a token Secret naming service account `account`.
fn names_account(secret: &serde_json::Value, account: &str) -> bool {
    str_at(secret, "/type") == SERVICE_ACCOUNT_TOKEN
        && str_at(
            secret,
            &format!("/metadata/annotations/{}", SA_NAME.replace('/', "~1")),
        ) == account
}

/// Registers the service-account controller's handlers and starts its workers.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let namespaces = ctx.informers.get(catalog::of(Kind::Namespace));
    let accounts = ctx.informers.get(catalog::of(Kind::ServiceAccount));
    let secrets = ctx.informers.get(catalog::of(Kind::Secret));
    let controller = Arc::new(Accounts {
        client: ctx.client.clone(),
        namespaces: namespaces.clone(),
        accounts: accounts.clone(),
        secrets: secrets.clone(),
        ca_pem: ctx.config.root_ca.clone(),
        deployers_bound: Arc::default(),
    });
    let secrets_of = secrets.clone();
    runtime::Controller::new("service-accounts")
        .watches(&namespaces, |change, queue| {
            if !matches!(change, Change::Deleted(_)) {
                queue.add(format!("ns:{}", str_at(change.object(), "/metadata/name")));
            }
        })
        .watches(&accounts, move |change, queue| {
            let obj = change.object();
            let ns = str_at(obj, "/metadata/namespace");
            match change {
                Change::Deleted(_) => {
                    if ACCOUNTS.contains(&str_at(obj, "/metadata/name")) {
                        queue.add(format!("ns:{ns}"));
                    }
                }
                // The Secrets that name the account wait for it, or go with an
                // earlier account of its name.
                _ => {
                    let name = str_at(obj, "/metadata/name");
                    for secret in secrets_of.list_namespace(ns) {
                        if names_account(&secret, name) {
                            queue.add(format!("secret:{}", crate::client::key_of(&secret)));
                        }
                    }
                }
            }
        })
        .watches(&secrets, |change, queue| {
            let obj = change.object();
            if !matches!(change, Change::Deleted(_))
                && str_at(obj, "/type") == SERVICE_ACCOUNT_TOKEN
            {
                queue.add(format!("secret:{}", crate::client::key_of(obj)));
            }
        })
        .workers(WORKERS)
        .run_with(sup, controller, Accounts::reconcile);
}
