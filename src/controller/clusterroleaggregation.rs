//! ClusterRole aggregation (upstream's `clusterrole-aggregation` controller): a ClusterRole
//! with an `aggregationRule` gets as its rules the union of the rules of the ClusterRoles
//! its selectors select (by name order, each rule once), so `admin`, `edit` and `view`
//! take in the rules of roles labelled `rbac.authorization.k8s.io/aggregate-to-*`. Any
//! change of a ClusterRole may change what some aggregated role selects, so every change
//! brings all of them up to date (one key for all: there are few).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Action, Context, Result, Supervisor, runtime};
use crate::client::informer::Informer;
use crate::client::{Client, Kind, Patch, catalog};
use crate::types::json::str_at;
use crate::types::labels::Selector;

const ALL: &str = "all";

struct Aggregator {
    client: Client,
    roles: Informer,
}

fn labels(role: &Value) -> BTreeMap<String, String> {
    role.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The rules `role` aggregates from `all` (sorted by name), or `None` when it aggregates
/// nothing.
pub fn aggregated_rules(role: &Value, all: &[Arc<Value>]) -> Option<Vec<Value>> {
    let selectors: Vec<Selector> = role
        .pointer("/aggregationRule/clusterRoleSelectors")?
        .as_array()?
        .iter()
        .filter_map(|s| Selector::from_label_selector(s).ok())
        .collect();
    let name = str_at(role, "/metadata/name");
    let mut sources: Vec<&Arc<Value>> = all
        .iter()
        .filter(|r| str_at(r, "/metadata/name") != name)
        .filter(|r| {
            let l = labels(r);
            selectors.iter().any(|s| s.matches(&l))
        })
        .collect();
    sources.sort_by_key(|r| str_at(r, "/metadata/name").to_string());
    let mut rules: Vec<Value> = Vec::new();
    for r in sources {
        for rule in r["rules"].as_array().into_iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

impl Aggregator {
    async fn reconcile(self: Arc<Self>, _key: String) -> Result<Action> {
        let all = self.roles.list();
        for role in &all {
            let Some(rules) = aggregated_rules(role, &all) else {
                continue;
            };
            let current = role["rules"].as_array().cloned().unwrap_or_default();
            if current == rules {
                continue;
            }
            let name = str_at(role, "/metadata/name");
            let patch = json!({
                "metadata": {"resourceVersion": str_at(role, "/metadata/resourceVersion")},
                "rules": rules,
            });
            match self
                .client
                .patch(self.roles.resource(), None, name, &Patch::Merge(patch))
                .await
            {
                Ok(_) => {}
                // Gone meanwhile; a change brings the key back.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Action::Done)
    }
}

/// Registers the aggregation controller's handler and starts it.
pub fn start(ctx: &Context, sup: &mut Supervisor) {
    let roles = ctx.informers.get(catalog::of(Kind::ClusterRole));
    let state = Arc::new(Aggregator {
        client: ctx.client.clone(),
        roles: roles.clone(),
    });
    runtime::Controller::new("clusterrole-aggregation")
        .watches(&roles, |_, queue| queue.add(ALL.to_string()))
        .run_with(sup, state, Aggregator::reconcile);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_takes_the_rules_of_the_roles_it_selects_once_each() {
        let rule = |r: &str| json!({"verbs": ["get"], "apiGroups": [""], "resources": [r]});
        let view = json!({"metadata": {"name": "view"}, "aggregationRule": {
            "clusterRoleSelectors": [{"matchLabels": {"agg": "view"}}]}, "rules": []});
        let b = json!({"metadata": {"name": "b", "labels": {"agg": "view"}},
            "rules": [rule("pods"), rule("secrets")]});
        let a = json!({"metadata": {"name": "a", "labels": {"agg": "view"}},
            "rules": [rule("secrets")]});
        let other = json!({"metadata": {"name": "c"}, "rules": [rule("nodes")]});
        let all: Vec<Arc<Value>> = [view.clone(), b, a, other]
            .into_iter()
            .map(Arc::new)
            .collect();
        assert_eq!(
            aggregated_rules(&view, &all).unwrap(),
            vec![rule("secrets"), rule("pods")]
        );
        assert_eq!(aggregated_rules(&all[3], &all), None);
    }
}
