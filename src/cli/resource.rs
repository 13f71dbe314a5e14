//! What the client verbs act on: resource types by any of kubectl's spellings (plural,
//! singular, short name, kind, group-qualified, categories such as `all`) and the
//! `TYPE NAME...`, `TYPE/NAME`, `TYPE1,TYPE2` argument forms.

use crate::client::ListParams;
use crate::client::{Resource, catalog};

use super::{CliError, Conn};

/// Finds the resource type `spelling` names (case-insensitive).
pub fn resolve(spelling: &str) -> Result<&'static Resource, CliError> {
    let s = spelling.to_ascii_lowercase();
    let (name, group) = match s.split_once('.') {
        Some((n, g)) => (n.to_string(), Some(g.to_string())),
        None => (s.clone(), None),
    };
    // `resource.version.group` and `resource.group` both name a group.
    let group_matches = |r: &Resource| match &group {
        None => true,
        Some(g) => {
            *g == r.group
                || g.strip_prefix(r.version.as_str())
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|rest| rest == r.group)
                || (r.group.is_empty() && *g == r.version)
        }
    };
    catalog::RESOURCES
        .iter()
        .map(|r| &**r)
        .filter(|r| group_matches(r))
        .find(|r| {
            r.plural == name
                || r.singular == name
                || r.kind_name.eq_ignore_ascii_case(&name)
                || r.short_names.contains(&name)
        })
        // `events` names the core Event first; events.k8s.io only when asked for.
        .ok_or_else(|| {
            CliError::msg(format!(
                "the server doesn't have a resource type \"{spelling}\""
            ))
        })
}

/// The resource types a category (`all`) or a type name stands for.
pub fn expand(spelling: &str) -> Result<Vec<&'static Resource>, CliError> {
    let lower = spelling.to_ascii_lowercase();
    let in_category: Vec<&'static Resource> = catalog::RESOURCES
        .iter()
        .map(|r| &**r)
        .filter(|r| r.categories.contains(&lower))
        .collect();
    if !in_category.is_empty() && resolve(spelling).is_err() {
        return Ok(in_category);
    }
    Ok(vec![resolve(spelling)?])
}

/// One type with the names asked for (none: all objects of the type).
#[derive(Debug, Clone)]
pub struct Target {
    pub res: &'static Resource,
    pub names: Vec<String>,
}

/// Reads kubectl's argument forms: `TYPE[,TYPE...] [NAME...]` or `TYPE/NAME...`.
pub fn targets(args: &[String]) -> Result<Vec<Target>, CliError> {
    let Some(first) = args.first() else {
        return Err(CliError::msg(
            "You must specify the type of resource to get. Use \"berth api-resources\" for a \
             complete list of supported resources.",
        ));
    };
    if args.iter().any(|a| a.contains('/')) {
        let mut out: Vec<Target> = Vec::new();
        for a in args {
            let Some((kind, name)) = a.split_once('/') else {
                return Err(CliError::msg(
                    "there is no need to specify a resource type as a separate argument when \
                     passing arguments in resource/name form (e.g. 'berth get resource/<resource_name>' \
                     instead of 'berth get resource resource/<resource_name>'",
                ));
            };
            if name.is_empty() {
                return Err(CliError::msg(format!(
                    "arguments in resource/name form must have a single resource and name: {a}"
                )));
            }
            let res = resolve(kind)?;
            match out.iter_mut().find(|t| std::ptr::eq(t.res, res)) {
                Some(t) => t.names.push(name.to_string()),
                None => out.push(Target {
                    res,
                    names: vec![name.to_string()],
                }),
            }
        }
        return Ok(out);
    }
    let names: Vec<String> = args[1..].to_vec();
    let mut out = Vec::new();
    for kind in first.split(',').filter(|k| !k.is_empty()) {
        for res in expand(kind)? {
            if !out.iter().any(|t: &Target| std::ptr::eq(t.res, res)) {
                out.push(Target {
                    res,
                    names: names.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// How a verb picks objects among those of its types when no names are given.
#[derive(Debug, Clone, Copy, Default)]
pub struct Picking<'a> {
    /// `-l`.
    pub selector: Option<&'a str>,
    /// `--field-selector`.
    pub field_selector: Option<&'a str>,
    /// `--all`: every object of the type.
    pub all: bool,
    /// `-A`: in every namespace.
    pub all_namespaces: bool,
}

impl Picking<'_> {
    fn selecting(&self) -> bool {
        self.all || self.selector.is_some() || self.field_selector.is_some()
    }
}

/// One object to act on.
#[derive(Debug, Clone)]
pub struct Picked {
    pub res: &'static Resource,
    pub ns: Option<String>,
    pub name: String,
}

impl Conn {
    /// The namespace for `res`: none for cluster-scoped types.
    pub fn ns_for(&self, res: &Resource) -> Option<&str> {
        res.namespaced.then_some(self.namespace.as_str())
    }

    /// The objects `targets` name, or those the selection picks among their types, with
    /// kubectl's refusals of names beside a selector and of types without either.
    pub async fn pick(
        &self,
        targets: Vec<Target>,
        how: &Picking<'_>,
    ) -> Result<Vec<Picked>, CliError> {
        let mut picked = Vec::new();
        for t in targets {
            let ns = self.ns_for(t.res).map(str::to_string);
            if !t.names.is_empty() {
                if how.selecting() {
                    return Err(CliError::msg(
                        "name cannot be provided when a selector is specified",
                    ));
                }
                picked.extend(t.names.into_iter().map(|name| Picked {
                    res: t.res,
                    ns: ns.clone(),
                    name,
                }));
                continue;
            }
            if !how.selecting() {
                return Err(CliError::msg(
                    "resource(s) were provided, but no name was specified",
                ));
            }
            let params = ListParams {
                label_selector: how.selector.map(str::to_string),
                field_selector: how.field_selector.map(str::to_string),
            };
            let scope = if how.all_namespaces {
                None
            } else {
                ns.as_deref()
            };
            let list = self
                .client
                .list(t.res, scope, &params)
                .await
                .map_err(|e| self.error(e))?;
            picked.extend(list.items.iter().map(|o| Picked {
                res: t.res,
                ns: o["metadata"]["namespace"].as_str().map(str::to_string),
                name: o["metadata"]["name"].as_str().unwrap_or_default().into(),
            }));
        }
        Ok(picked)
    }
}

/// How kubectl names an object in messages: `pod/x`, `deploymentconfig.apps.openshift.io/x`.
pub fn object_ref(res: &Resource, name: &str) -> String {
    if res.group.is_empty() {
        format!("{}/{name}", res.singular)
    } else {
        format!("{}.{}/{name}", res.singular, res.group)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::Kind;

    #[test]
    fn every_spelling_of_a_type_resolves() {
        for s in [
            "pods",
            "pod",
            "po",
            "Pod",
            "pods.v1",
            "pods.v1.",
            "replicationcontrollers",
            "rc",
            "dc",
            "deploymentconfig",
            "DeploymentConfig",
            "deploymentconfigs.apps.openshift.io",
            "deploymentconfigs.v1.apps.openshift.io",
        ] {
            let r = resolve(s.trim_end_matches('.'));
            assert!(r.is_ok(), "{s}");
        }
        assert_eq!(resolve("po").unwrap().kind, Kind::Pod);
        assert_eq!(resolve("dc").unwrap().kind, Kind::DeploymentConfig);
        assert_eq!(resolve("ev").unwrap().kind, Kind::Event);
        assert_eq!(
            resolve("events.events.k8s.io").unwrap().kind,
            Kind::EventsV1Event
        );
        assert_eq!(
            resolve("foo").err().unwrap().message,
            "the server doesn't have a resource type \"foo\""
        );
    }

    #[test]
    fn arguments_take_kubectls_forms() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let t = targets(&args(&["pods,rc", "a", "b"])).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].res.kind, Kind::Pod);
        assert_eq!(t[1].names, ["a", "b"]);

        let t = targets(&args(&["pod/a", "rc/b", "po/c"])).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].names, ["a", "c"]);

        assert!(targets(&args(&["pods", "rc/b"])).is_err());
        assert!(targets(&args(&["pod/"])).is_err());
        assert!(targets(&[]).is_err());

        let all = targets(&args(&["all"])).unwrap();
        assert!(all.iter().any(|t| t.res.kind == Kind::Pod));
        assert!(all.iter().any(|t| t.res.kind == Kind::DeploymentConfig));
        assert!(!all.iter().any(|t| t.res.kind == Kind::Secret));
    }

    #[test]
    fn objects_are_named_like_kubectl_names_them() {
        assert_eq!(object_ref(catalog::of(Kind::Pod), "x"), "pod/x");
        assert_eq!(
            object_ref(catalog::of(Kind::DeploymentConfig), "x"),
            "deploymentconfig.apps.openshift.io/x"
        );
    }
}
