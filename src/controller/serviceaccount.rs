//! Service accounts: a `default` and a `deployer` ServiceAccount in every namespace (the
//! deployer pods of DeploymentConfigs run as `deployer`, as in OpenShift), and a token for each
//! service account, kept in a Secret `<account>-token` of type
//! `kubernetes.io/service-account-token` owned by the account (so the garbage collector
//! removes it with the account); deleting the Secret revokes it and a new one is made.
//! What a token may do is RBAC's: `deployer` is bound to `system:deployer` in its
//! namespace (the RoleBinding `system:deployers`), `default` to nothing.
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
    /// The namespaces whose deployer binding this process made (or found).
    deployers_bound: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

pub use crate::types::accounts::token_secret_name;

impl Accounts {
    async fn reconcile(self: Arc<Self>, key: String) -> Result<Action> {
        match key.split_once(':') {
            Some(("ns", name)) => self.ensure_default(name).await,
            Some(("sa", account)) => self.ensure_token(account).await,
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
        if !self.deployers_bound.lock().is_ok_and(|b| b.contains(ns)) {
            self.bind_deployer(ns).await?;
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

    /// A live service account has a token Secret that names it, and lists it.
    async fn ensure_token(&self, key: &str) -> Result<Action> {
        let Some(sa) = self.accounts.get(key) else {
            return Ok(Action::Done);
        };
        let sa: ServiceAccount = decode(&sa)?;
        if sa.metadata.is_deleting() {
            return Ok(Action::Done);
        }
        let (Some(ns), name) = split_key(key) else {
            return Ok(Action::Done);
        };
        let uid = sa.metadata.uid();
        let secret_name = token_secret_name(name);
        let current: Option<Secret> = match self.secrets.get(&format!("{ns}/{secret_name}")) {
            Some(s) => Some(decode(&s)?),
            None => None,
        };
        let valid = current.as_ref().is_some_and(|s| {
            s.type_.as_deref() == Some(SERVICE_ACCOUNT_TOKEN)
                && s.metadata.annotation(SA_UID).unwrap_or("") == uid
                && !s.metadata.is_deleting()
        });
        if !valid {
            if let Some(stale) = &current {
                // A token of an earlier account of the same name: replace it.
                let params = crate::client::DeleteParams {
                    uid: Some(stale.metadata.uid().to_string()),
                    ..Default::default()
                };
                match self
                    .client
                    .delete(self.secrets.resource(), Some(ns), &secret_name, &params)
                    .await
                {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() || e.is_conflict() => {}
                    Err(e) => return Err(e.into()),
                }
                // The deletion brings this key back through the secret informer.
                return Ok(Action::Done);
            }
            let token = new_service_account_token(ns, &secret_name);
            let b64 = |s: &str| {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD.encode(s)
            };
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "type": SERVICE_ACCOUNT_TOKEN,
                "metadata": {
                    "name": secret_name,
                    "namespace": ns,
                    "annotations": {SA_NAME: name, SA_UID: uid},
                    "ownerReferences": [{
                        "apiVersion": "v1",
                        "kind": "ServiceAccount",
                        "name": name,
                        "uid": uid,
                    }],
                },
                "data": {"token": b64(&token), "namespace": b64(ns)},
            });
            match self
                .client
                .create(self.secrets.resource(), Some(ns), &secret)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_already_exists() => return Ok(Action::Done),
                Err(crate::client::Error::Forbidden(_)) => return Ok(Action::Done),
                Err(e) => return Err(e.into()),
            }
        }
        let listed = sa
            .secrets
            .iter()
            .flatten()
            .any(|s| s.name.as_deref() == Some(secret_name.as_str()));
        if !listed {
            let mut secrets: Vec<serde_json::Value> =
                sa.secrets.iter().flatten().map(|s| json!(s)).collect();
            secrets.push(json!({"name": secret_name}));
            let patch = json!({
                "metadata": {"resourceVersion": sa.metadata.resource_version},
                "secrets": secrets,
            });
            match self
                .client
                .patch(
                    self.accounts.resource(),
                    Some(ns),
                    name,
                    &crate::client::Patch::Merge(patch),
                )
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::Done)
    }
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
        deployers_bound: Arc::default(),
    });
    runtime::Controller::new("service-accounts")
        .watches(&namespaces, |change, queue| {
            if !matches!(change, Change::Deleted(_)) {
                queue.add(format!("ns:{}", str_at(change.object(), "/metadata/name")));
            }
        })
        .watches(&accounts, |change, queue| {
            let obj = change.object();
            let ns = str_at(obj, "/metadata/namespace");
            match change {
                Change::Deleted(_) => {
                    if ACCOUNTS.contains(&str_at(obj, "/metadata/name")) {
                        queue.add(format!("ns:{ns}"));
                    }
                }
                _ => queue.add(format!("sa:{}", crate::client::key_of(obj))),
            }
        })
        .watches(&secrets, |change, queue| {
            let obj = change.object();
            if str_at(obj, "/type") != SERVICE_ACCOUNT_TOKEN {
                return;
            }
            let account = str_at(
                obj,
                &format!("/metadata/annotations/{}", SA_NAME.replace('/', "~1")),
            );
            if !account.is_empty() {
                queue.add(format!(
                    "sa:{}/{account}",
                    str_at(obj, "/metadata/namespace")
                ));
            }
        })
        .workers(WORKERS)
        .run_with(sup, controller, Accounts::reconcile);
}
