//! The apps/v1 kinds' rules: defaults and validation as kube-apiserver's (apps/v1
//! `SetDefaults_*`, `ValidateReplicaSet*`, `ValidateDeployment*`, `ValidateStatefulSet*`),
//! and the label selector rules the workload kinds share.

use serde_json::{Value, json};

use super::strategy::{self, Scale, Strategy};
use super::{Cause, Part};
use crate::types::labels;

/// apps/v1 ReplicaSet: the replication manager's core keeps its pods.
pub struct ReplicaSet;

impl Strategy for ReplicaSet {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(reg, "replicasets", ns, name, old, obj, "/spec/template")
    }
    fn default(&self, obj: &mut Value) {
        if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
            spec.entry("replicas").or_insert_with(|| json!(1));
            if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
                strategy::default_pod_spec(tspec);
            }
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({"replicas": 0}));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_replicated(obj, causes);
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part != Part::Status {
            strategy::immutable(old, new, "/spec/selector", "spec.selector", causes);
        }
    }

    fn scale(&self, obj: &Value) -> Scale {
        Scale {
            replicas: obj.pointer("/spec/replicas").cloned().unwrap_or(json!(0)),
            status_replicas: obj.pointer("/status/replicas").cloned().unwrap_or(json!(0)),
            selector: selector_string(obj.pointer("/spec/selector")),
        }
    }
}

/// apps/v1 Deployment: the deployment controller rolls its template out through
/// ReplicaSets.
pub struct Deployment;

impl Strategy for Deployment {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(reg, "deployments", ns, name, old, obj, "/spec/template")
    }
    fn prepare_status_update(&self, old: &Value, new: &mut Value) {
        // As kube-apiserver: the status writer (the controller) does not relabel.
        super::strategy::keep_metadata(old, new, &["labels"]);
    }

    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        spec.entry("replicas").or_insert_with(|| json!(1));
        spec.entry("revisionHistoryLimit")
            .or_insert_with(|| json!(10));
        spec.entry("progressDeadlineSeconds")
            .or_insert_with(|| json!(600));
        let strategy = spec.entry("strategy").or_insert_with(|| json!({}));
        if let Some(st) = strategy.as_object_mut() {
            let kind = st.entry("type").or_insert_with(|| json!("RollingUpdate"));
            if kind == "RollingUpdate" {
                let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
                if let Some(ru) = ru.as_object_mut() {
                    ru.entry("maxUnavailable").or_insert_with(|| json!("25%"));
                    ru.entry("maxSurge").or_insert_with(|| json!("25%"));
                }
            }
        }
        if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
            strategy::default_pod_spec(tspec);
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_replicated(obj, causes);
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            return;
        };
        validate_deployment_strategy(spec.get("strategy"), causes);
        if let Some(v) = spec.get("revisionHistoryLimit").filter(|v| !v.is_null()) {
            nonnegative(v, "spec.revisionHistoryLimit", causes);
        }
        if let Some(v) = spec.get("progressDeadlineSeconds").filter(|v| !v.is_null()) {
            nonnegative(v, "spec.progressDeadlineSeconds", causes);
            let min_ready = spec["minReadySeconds"].as_i64().unwrap_or(0);
            if v.as_i64().is_some_and(|d| d <= min_ready) {
                causes.push(Cause::invalid(
                    "spec.progressDeadlineSeconds",
                    v,
                    "must be greater than minReadySeconds",
                ));
            }
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part != Part::Status {
            strategy::immutable(old, new, "/spec/selector", "spec.selector", causes);
        }
    }

    fn scale(&self, obj: &Value) -> Scale {
        ReplicaSet.scale(obj)
    }
}

fn nonnegative(v: &Value, field: &str, causes: &mut Vec<Cause>) {
    if v.as_i64().is_none_or(|n| n < 0) {
        causes.push(Cause::invalid(
            field,
            v,
            "must be greater than or equal to 0",
        ));
    }
}

/// `ValidateDeploymentStrategy` and `ValidateRollingUpdateDeployment`.
fn validate_deployment_strategy(strategy: Option<&Value>, causes: &mut Vec<Cause>) {
    let Some(st) = strategy.filter(|s| s.is_object()) else {
        return;
    };
    let rolling = st.get("rollingUpdate").filter(|r| !r.is_null());
    match st["type"].as_str().unwrap_or("") {
        "Recreate" => {
            if rolling.is_some() {
                causes.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => {
            let Some(ru) = rolling else {
                causes.push(Cause::required_with(
                    "spec.strategy.rollingUpdate",
                    "this should be defaulted and never be nil",
                ));
                return;
            };
            let mut zero = [true, true];
            for (i, f) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
                let at = format!("spec.strategy.rollingUpdate.{f}");
                let Some(v) = ru.get(f).filter(|v| !v.is_null()) else {
                    continue;
                };
                match crate::types::int_or_percent(v) {
                    None => causes.push(Cause::invalid(
                        &at,
                        v,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    )),
                    Some((n, _)) if n < 0 => causes.push(Cause::invalid(
                        &at,
                        v,
                        "must be greater than or equal to 0",
                    )),
                    Some((n, pct)) => {
                        zero[i] = n == 0;
                        if i == 0 && pct && n > 100 {
                            causes.push(Cause::invalid(&at, v, "must not be greater than 100%"));
                        }
                    }
                }
            }
            if zero == [true, true] {
                causes.push(Cause::invalid(
                    "spec.strategy.rollingUpdate.maxUnavailable",
                    ru.get("maxUnavailable").unwrap_or(&json!(0)),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            "spec.strategy.type",
            other,
            &["Recreate", "RollingUpdate"],
        )),
    }
}

/// apps/v1 StatefulSet: the statefulset controller keeps its pods, one per ordinal, with
/// their claims (`SetDefaults_StatefulSet`, `ValidateStatefulSet*`).
pub struct StatefulSet;

/// The fields of a StatefulSet's spec that an update may change (`ValidateStatefulSetUpdate`).
const STATEFUL_SET_MUTABLE: [&str; 7] = [
    "replicas",
    "ordinals",
    "template",
    "updateStrategy",
    "revisionHistoryLimit",
    "persistentVolumeClaimRetentionPolicy",
    "minReadySeconds",
];

impl Strategy for StatefulSet {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(reg, "statefulsets", ns, name, old, obj, "/spec/template")
    }
    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        spec.entry("podManagementPolicy")
            .or_insert_with(|| json!("OrderedReady"));
        let st = spec.entry("updateStrategy").or_insert_with(|| json!({}));
        if let Some(st) = st.as_object_mut() {
            if st.get("type").is_none_or(|t| t == "") {
                st.insert("type".into(), json!("RollingUpdate"));
                st.entry("rollingUpdate").or_insert_with(|| json!({}));
            }
            if st["type"] == "RollingUpdate"
                && let Some(ru) = st.get_mut("rollingUpdate").and_then(Value::as_object_mut)
            {
                ru.entry("partition").or_insert_with(|| json!(0));
            }
        }
        let policy = spec
            .entry("persistentVolumeClaimRetentionPolicy")
            .or_insert_with(|| json!({}));
        if let Some(p) = policy.as_object_mut() {
            for f in ["whenDeleted", "whenScaled"] {
                if p.get(f).is_none_or(|v| v == "") {
                    p.insert(f.into(), json!("Retain"));
                }
            }
        }
        spec.entry("replicas").or_insert_with(|| json!(1));
        spec.entry("revisionHistoryLimit")
            .or_insert_with(|| json!(10));
        if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
            strategy::default_pod_spec(tspec);
        }
        if let Some(claims) = spec
            .get_mut("volumeClaimTemplates")
            .and_then(Value::as_array_mut)
        {
            for claim in claims {
                strategy::default_claim(claim);
            }
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert(
                "status".into(),
                json!({"replicas": 0, "availableReplicas": 0}),
            );
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_replicated_as(obj, "statefulset", "StatefulSet", causes);
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            return;
        };
        if let Some(v) = spec.pointer("/ordinals/start").filter(|v| !v.is_null()) {
            nonnegative(v, "spec.ordinals.start", causes);
        }
        if let Some(v) = spec.get("revisionHistoryLimit").filter(|v| !v.is_null()) {
            nonnegative(v, "spec.revisionHistoryLimit", causes);
        }
        if let Some(name) = spec["serviceName"].as_str().filter(|n| !n.is_empty()) {
            for e in crate::types::names::dns1035_label(name) {
                causes.push(Cause::invalid("spec.serviceName", &json!(name), &e));
            }
        }
        match spec["podManagementPolicy"].as_str().unwrap_or("") {
            "OrderedReady" | "Parallel" => {}
            "" => causes.push(Cause::required("spec.podManagementPolicy")),
            other => causes.push(Cause::invalid(
                "spec.podManagementPolicy",
                &json!(other),
                "must be 'OrderedReady' or 'Parallel'",
            )),
        }
        validate_stateful_set_strategy(&spec["updateStrategy"], causes);
        let policy = &spec["persistentVolumeClaimRetentionPolicy"];
        for f in ["whenDeleted", "whenScaled"] {
            match policy[f].as_str() {
                None | Some("Retain" | "Delete") => {}
                Some(other) => causes.push(Cause::not_supported(
                    &format!("spec.persistentVolumeClaimRetentionPolicy.{f}"),
                    other,
                    &["Retain", "Delete"],
                )),
            }
        }
        let claims = spec["volumeClaimTemplates"].as_array();
        for (i, claim) in claims.into_iter().flatten().enumerate() {
            let at = format!("spec.volumeClaimTemplates[{i}]");
            match claim.pointer("/metadata/name").and_then(Value::as_str) {
                None | Some("") => causes.push(Cause::required(&format!("{at}.metadata.name"))),
                Some(name) => {
                    for e in crate::types::names::dns1123_subdomain(name) {
                        causes.push(Cause::invalid(
                            &format!("{at}.metadata.name"),
                            &json!(name),
                            &e,
                        ));
                    }
                }
            }
            strategy::validate_claim_spec(&claim["spec"], &format!("{at}.spec"), causes);
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part == Part::Status {
            return;
        }
        let rest = |obj: &Value| -> Value {
            let mut spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
            if let Some(m) = spec.as_object_mut() {
                for f in STATEFUL_SET_MUTABLE {
                    m.remove(f);
                }
            }
            spec
        };
        if rest(old) != rest(new) {
            causes.push(Cause::forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }

    fn scale(&self, obj: &Value) -> Scale {
        ReplicaSet.scale(obj)
    }
}

/// The update strategy's rules (`ValidateStatefulSetSpec`, `validateRollingUpdateStatefulSet`).
fn validate_stateful_set_strategy(st: &Value, causes: &mut Vec<Cause>) {
    let rolling = st.get("rollingUpdate").filter(|r| !r.is_null());
    match st["type"].as_str().unwrap_or("") {
        "RollingUpdate" => {
            let Some(ru) = rolling else {
                return;
            };
            if let Some(p) = ru.get("partition").filter(|v| !v.is_null()) {
                nonnegative(p, "spec.updateStrategy.rollingUpdate.partition", causes);
            }
            let at = "spec.updateStrategy.rollingUpdate.maxUnavailable";
            if let Some(v) = ru.get("maxUnavailable").filter(|v| !v.is_null()) {
                match crate::types::int_or_percent(v) {
                    None => causes.push(Cause::invalid(
                        at,
                        v,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    )),
                    Some((n, pct)) => {
                        if n < 0 {
                            causes.push(Cause::invalid(at, v, "must be greater than or equal to 0"));
                        }
                        if n == 0 {
                            causes.push(Cause::invalid(at, v, "cannot be 0"));
                        }
                        if pct && n > 100 {
                            causes.push(Cause::invalid(at, v, "must not be greater than 100%"));
                        }
                    }
                }
            }
        }
        "OnDelete" => {
            if let Some(ru) = rolling {
                causes.push(Cause::invalid(
                    "spec.updateStrategy.rollingUpdate",
                    ru,
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        _ => causes.push(Cause::invalid(
            "spec.updateStrategy",
            st,
            "must be 'RollingUpdate' or 'OnDelete'",
        )),
    }
}

/// apps/v1 ControllerRevision: an immutable snapshot of a controller's template, kept as
/// its history (`ValidateControllerRevision`, `ValidateControllerRevisionUpdate`).
pub struct ControllerRevision;

impl Strategy for ControllerRevision {
    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if obj.get("data").is_none_or(Value::is_null) {
            causes.push(Cause::required_with("data", "data is mandatory"));
        }
        match obj.get("revision") {
            None => causes.push(Cause::required("revision")),
            Some(r) if r.as_i64().is_none_or(|n| n < 0) => causes.push(Cause::invalid(
                "revision",
                r,
                "must be greater than or equal to 0",
            )),
            Some(_) => {}
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, _part: Part, causes: &mut Vec<Cause>) {
        strategy::immutable(old, new, "/data", "data", causes);
    }
}

/// apps/v1 DaemonSet: the daemon set controller keeps one pod of its template on each
/// eligible node (`SetDefaults_DaemonSet`, `ValidateDaemonSet*`).
pub struct DaemonSet;

impl Strategy for DaemonSet {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(reg, "daemonsets", ns, name, old, obj, "/spec/template")
    }
    fn default(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        let strategy = spec.entry("updateStrategy").or_insert_with(|| json!({}));
        if let Some(st) = strategy.as_object_mut() {
            let kind = st.entry("type").or_insert_with(|| json!("RollingUpdate"));
            if kind == "RollingUpdate" {
                let ru = st.entry("rollingUpdate").or_insert_with(|| json!({}));
                if let Some(ru) = ru.as_object_mut() {
                    ru.entry("maxUnavailable").or_insert_with(|| json!(1));
                    ru.entry("maxSurge").or_insert_with(|| json!(0));
                }
            }
        }
        spec.entry("revisionHistoryLimit")
            .or_insert_with(|| json!(10));
        if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
            strategy::default_pod_spec(tspec);
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            // The fields Go writes without omitempty.
            m.insert(
                "status".into(),
                json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                       "desiredNumberScheduled": 0, "numberReady": 0}),
            );
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        validate_daemon_set_spec(obj, causes);
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part != Part::Status {
            strategy::immutable(old, new, "/spec/selector", "spec.selector", causes);
        }
    }
}

/// `ValidateDaemonSetSpec`.
fn validate_daemon_set_spec(obj: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
        causes.push(Cause::required("spec"));
        return;
    };
    let selector = match spec.get("selector") {
        None | Some(Value::Null) => {
            causes.push(Cause::required("spec.selector"));
            None
        }
        Some(sel) => {
            validate_label_selector(sel, "spec.selector", causes);
            let labels = sel["matchLabels"].as_object().map_or(0, |m| m.len());
            let exprs = sel["matchExpressions"].as_array().map_or(0, Vec::len);
            if labels + exprs == 0 {
                causes.push(Cause::invalid(
                    "spec.selector",
                    sel,
                    "empty selector is invalid for daemonset",
                ));
            }
            labels::Selector::from_label_selector(sel).ok()
        }
    };
    let Some(template) = spec.get("template").filter(|t| t.is_object()) else {
        causes.push(Cause::required("spec.template"));
        return;
    };
    if let Some(selector) = selector.filter(|s| !s.is_empty())
        && !selector.matches(&labels::map_at(template, "/metadata/labels"))
    {
        causes.push(Cause::invalid(
            "spec.template.metadata.labels",
            template.pointer("/metadata/labels").unwrap_or(&Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    match template.get("spec") {
        None => causes.push(Cause::required("spec.template.spec")),
        Some(ts) => {
            strategy::validate_pod_spec(ts, "spec.template.spec", causes);
            let policy = ts["restartPolicy"].as_str().unwrap_or("Always");
            if policy != "Always" {
                causes.push(Cause::not_supported(
                    "spec.template.spec.restartPolicy",
                    policy,
                    &["Always"],
                ));
            }
            if let Some(v) = ts.get("activeDeadlineSeconds").filter(|v| !v.is_null()) {
                causes.push(Cause::invalid(
                    "spec.template.spec.activeDeadlineSeconds",
                    v,
                    "activeDeadlineSeconds in DaemonSet is not Supported",
                ));
            }
        }
    }
    if let Some(v) = spec.get("minReadySeconds").filter(|v| !v.is_null()) {
        nonnegative(v, "spec.minReadySeconds", causes);
    }
    if let Some(v) = spec.get("revisionHistoryLimit").filter(|v| !v.is_null()) {
        nonnegative(v, "spec.revisionHistoryLimit", causes);
    }
    validate_daemon_set_update_strategy(spec.get("updateStrategy"), causes);
}

/// `ValidateDaemonSetUpdateStrategy` and `ValidateRollingUpdateDaemonSet`: exactly one of
/// maxUnavailable and maxSurge is non-zero.
fn validate_daemon_set_update_strategy(strategy: Option<&Value>, causes: &mut Vec<Cause>) {
    const AT: &str = "spec.updateStrategy";
    let st = strategy.filter(|s| s.is_object());
    let kind = st.and_then(|s| s["type"].as_str()).unwrap_or("");
    match kind {
        "OnDelete" => {}
        "RollingUpdate" => {
            let Some(ru) = st
                .and_then(|s| s.get("rollingUpdate"))
                .filter(|r| !r.is_null())
            else {
                causes.push(Cause::required(&format!("{AT}.rollingUpdate")));
                return;
            };
            let mut nonzero = [false, false];
            for (i, f) in ["maxUnavailable", "maxSurge"].into_iter().enumerate() {
                let at = format!("{AT}.rollingUpdate.{f}");
                let Some(v) = ru.get(f).filter(|v| !v.is_null()) else {
                    continue;
                };
                match positive_int_or_percent(v, &at, causes) {
                    Some(n) => nonzero[i] = n != 0,
                    None => nonzero[i] = true,
                }
            }
            match nonzero {
                [true, true] => causes.push(Cause::invalid(
                    &format!("{AT}.rollingUpdate.maxSurge"),
                    &ru["maxSurge"],
                    "may not be set when maxUnavailable is non-zero",
                )),
                [false, false] => causes.push(Cause::required_with(
                    &format!("{AT}.rollingUpdate.maxUnavailable"),
                    "cannot be 0 when maxSurge is 0",
                )),
                _ => {}
            }
        }
        other => causes.push(Cause::not_supported(
            AT,
            other,
            &["OnDelete", "RollingUpdate"],
        )),
    }
}

/// `ValidatePositiveIntOrPercent` and `IsNotMoreThan100Percent`: the figure when `v` is
/// a valid one (a percentage counts by its figure).
pub(super) fn positive_int_or_percent(v: &Value, at: &str, causes: &mut Vec<Cause>) -> Option<i64> {
    match crate::types::int_or_percent(v) {
        None => {
            causes.push(Cause::invalid(
                at,
                v,
                "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
            ));
            None
        }
        Some((n, _)) if n < 0 => {
            causes.push(Cause::invalid(at, v, "must be greater than or equal to 0"));
            None
        }
        Some((n, pct)) => {
            if pct && n > 100 {
                causes.push(Cause::invalid(at, v, "must not be greater than 100%"));
            }
            Some(n)
        }
    }
}

/// A LabelSelector as a selector string (see [`labels::format_label_selector`]).
pub fn selector_string(selector: Option<&Value>) -> String {
    selector.map_or_else(String::new, labels::format_label_selector)
}

/// The rules of a spec that keeps replicas of a pod template by a LabelSelector
/// (`ValidateReplicaSetSpec`).
fn validate_replicated(obj: &Value, causes: &mut Vec<Cause>) {
    validate_replicated_as(obj, "deployment", "ReplicaSet", causes);
}

/// [`validate_replicated`] in the words of one kind: `selecting` names it in the empty
/// selector's message, `deadline` in the activeDeadlineSeconds one.
fn validate_replicated_as(obj: &Value, selecting: &str, deadline: &str, causes: &mut Vec<Cause>) {
    let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
        causes.push(Cause::required("spec"));
        return;
    };
    for field in ["replicas", "minReadySeconds"] {
        if let Some(v) = spec.get(field)
            && v.as_i64().is_none_or(|n| n < 0)
        {
            causes.push(Cause::invalid(
                &format!("spec.{field}"),
                v,
                "must be greater than or equal to 0",
            ));
        }
    }
    let selector = match spec.get("selector") {
        None | Some(Value::Null) => {
            causes.push(Cause::required("spec.selector"));
            None
        }
        Some(sel) => {
            validate_label_selector(sel, "spec.selector", causes);
            let labels = sel["matchLabels"].as_object().map_or(0, |m| m.len());
            let exprs = sel["matchExpressions"].as_array().map_or(0, Vec::len);
            if labels + exprs == 0 {
                causes.push(Cause::invalid(
                    "spec.selector",
                    sel,
                    &format!("empty selector is invalid for {selecting}"),
                ));
            }
            labels::Selector::from_label_selector(sel).ok()
        }
    };
    let Some(template) = spec.get("template").filter(|t| t.is_object()) else {
        causes.push(Cause::required("spec.template"));
        return;
    };
    if let Some(selector) = selector.filter(|s| !s.is_empty()) {
        let template_labels = labels::map_at(template, "/metadata/labels");
        if !selector.matches(&template_labels) {
            causes.push(Cause::invalid(
                "spec.template.metadata.labels",
                template.pointer("/metadata/labels").unwrap_or(&Value::Null),
                "`selector` does not match template `labels`",
            ));
        }
    }
    // A StatefulSet's pods get a volume for each claim template, which they may mount.
    let claims: Vec<&str> = spec["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
        .collect();
    match template.get("spec") {
        None => causes.push(Cause::required("spec.template.spec")),
        Some(ts) => {
            strategy::validate_pod_spec_with_claims(ts, "spec.template.spec", &claims, causes);
            let policy = ts["restartPolicy"].as_str().unwrap_or("Always");
            if policy != "Always" {
                causes.push(Cause::not_supported(
                    "spec.template.spec.restartPolicy",
                    policy,
                    &["Always"],
                ));
            }
            if ts
                .get("activeDeadlineSeconds")
                .is_some_and(|v| !v.is_null())
            {
                causes.push(Cause::forbidden(
                    "spec.template.spec.activeDeadlineSeconds",
                    &format!("activeDeadlineSeconds in {deadline} is not Supported"),
                ));
            }
        }
    }
}

/// A LabelSelector's rules (`ValidateLabelSelector`): known operators, values only
/// with `In` and `NotIn` and always with them, valid label keys and values.
pub fn validate_label_selector(sel: &Value, path: &str, causes: &mut Vec<Cause>) {
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            let at = format!("{path}.matchLabels");
            for e in crate::types::names::qualified_name(k) {
                causes.push(Cause::invalid(&at, &json!(k), &e));
            }
            let value = v.as_str().unwrap_or("");
            for e in crate::types::names::label_value(value) {
                causes.push(Cause::invalid(&at, v, &e));
            }
        }
    }
    let exprs = sel.get("matchExpressions").and_then(Value::as_array);
    for (i, e) in exprs.into_iter().flatten().enumerate() {
        let at = format!("{path}.matchExpressions[{i}]");
        let values = e["values"].as_array().map_or(0, Vec::len);
        let op = e["operator"].as_str().unwrap_or("");
        match op {
            "In" | "NotIn" if values == 0 => causes.push(Cause::required_with(
                &format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if values > 0 => causes.push(Cause::forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => causes.push(Cause::invalid(
                &format!("{at}.operator"),
                &json!(other),
                "not a valid selector operator",
            )),
        }
        let key = e["key"].as_str().unwrap_or("");
        for err in crate::types::names::qualified_name(key) {
            causes.push(Cause::invalid(&format!("{at}.key"), &json!(key), &err));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(selector: Value, labels: Value) -> Value {
        json!({"metadata": {"name": "web"}, "spec": {
            "selector": selector,
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "c", "image": "i"}]}},
        }})
    }

    fn fields(obj: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        ReplicaSet.validate(obj, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn a_replica_set_needs_a_selector_that_matches_its_template() {
        assert!(
            fields(&rs(
                json!({"matchLabels": {"app": "web"}}),
                json!({"app": "web"})
            ))
            .is_empty()
        );
        let no = fields(&rs(
            json!({"matchLabels": {"app": "db"}}),
            json!({"app": "web"}),
        ));
        assert_eq!(no.len(), 1, "{no:?}");
        assert!(
            no[0].starts_with("spec.template.metadata.labels: Invalid value"),
            "{no:?}"
        );
        let empty = fields(&rs(json!({}), json!({"app": "web"})));
        assert!(
            empty[0].contains("empty selector is invalid for deployment"),
            "{empty:?}"
        );
        let mut missing = rs(json!(null), json!({}));
        missing["spec"].as_object_mut().unwrap().remove("selector");
        assert_eq!(fields(&missing)[0], "spec.selector: Required value");
    }

    #[test]
    fn selector_expressions_are_checked_as_upstream() {
        let sel = json!({"matchExpressions": [
            {"key": "app", "operator": "In", "values": []},
            {"key": "tier", "operator": "Exists", "values": ["x"]},
            {"key": "bad key!", "operator": "Near"},
        ]});
        let mut causes = Vec::new();
        validate_label_selector(&sel, "spec.selector", &mut causes);
        let got: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            got,
            [
                "spec.selector.matchExpressions[0].values",
                "spec.selector.matchExpressions[1].values",
                "spec.selector.matchExpressions[2].operator",
                "spec.selector.matchExpressions[2].key",
            ]
        );
    }

    #[test]
    fn the_selector_cannot_change_and_the_template_restarts_always() {
        let old = rs(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "web"}),
        );
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "web", "x": "y"}});
        let mut causes = Vec::new();
        ReplicaSet.validate_update(&old, &new, Part::Main, &mut causes);
        assert_eq!(causes[0].field, "spec.selector");
        assert!(causes[0].message.contains("field is immutable"));
        let mut never = old.clone();
        never["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        assert!(
            fields(&never)[0].starts_with("spec.template.spec.restartPolicy: Unsupported value")
        );
    }

    #[test]
    fn a_revision_keeps_its_data() {
        let rev = json!({"metadata": {"name": "web-1"}, "data": {"spec": {}}, "revision": 1});
        let mut causes = Vec::new();
        ControllerRevision.validate(&rev, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
        ControllerRevision.validate(&json!({"revision": -1}), &mut causes);
        let got: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        assert_eq!(
            got,
            [
                "data: Required value: data is mandatory",
                "revision: Invalid value: -1: must be greater than or equal to 0"
            ]
        );
        let mut changed = rev.clone();
        changed["data"] = json!({"spec": {"x": 1}});
        changed["revision"] = json!(2);
        let mut causes = Vec::new();
        ControllerRevision.validate_update(&rev, &changed, Part::Main, &mut causes);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "data");
    }

    fn ds_fields(obj: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        DaemonSet.validate(obj, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn ds(strategy: Value) -> Value {
        let mut d = rs(
            json!({"matchLabels": {"app": "agent"}}),
            json!({"app": "agent"}),
        );
        d["spec"]["updateStrategy"] = strategy;
        d
    }

    #[test]
    fn a_daemon_set_defaults_to_one_unavailable_node_at_a_time() {
        let mut d = ds(Value::Null);
        d["spec"].as_object_mut().unwrap().remove("updateStrategy");
        DaemonSet.default(&mut d);
        assert_eq!(
            d["spec"]["updateStrategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        );
        assert_eq!(d["spec"]["revisionHistoryLimit"], 10);
        assert!(ds_fields(&d).is_empty(), "{:?}", ds_fields(&d));
        let mut on_delete = ds(json!({"type": "OnDelete"}));
        DaemonSet.default(&mut on_delete);
        assert_eq!(
            on_delete["spec"]["updateStrategy"],
            json!({"type": "OnDelete"})
        );
    }

    #[test]
    fn a_daemon_set_surges_or_leaves_nodes_unavailable_not_both() {
        let ru = |u: Value, s: Value| {
            ds(
                json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": u, "maxSurge": s}}),
            )
        };
        assert!(ds_fields(&ru(json!(0), json!("25%"))).is_empty());
        assert_eq!(
            ds_fields(&ru(json!(1), json!(1))),
            [
                "spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"
            ]
        );
        assert_eq!(
            ds_fields(&ru(json!(0), json!(0))),
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"
            ]
        );
        assert_eq!(
            ds_fields(&ru(json!("110%"), json!(0))),
            [
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: \"110%\": must not be greater than 100%"
            ]
        );
        assert!(
            ds_fields(&ds(json!({"type": "Sometimes"})))[0]
                .starts_with("spec.updateStrategy: Unsupported value: \"Sometimes\"")
        );
        assert_eq!(
            ds_fields(&ds(json!({"type": "RollingUpdate"}))),
            ["spec.updateStrategy.rollingUpdate: Required value"]
        );
    }

    #[test]
    fn a_daemon_set_needs_a_matching_selector_that_never_changes() {
        let mut d = ds(json!({"type": "OnDelete"}));
        d["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
        assert!(ds_fields(&d)[0].starts_with("spec.template.metadata.labels: Invalid value"));
        d["spec"]["selector"] = json!({});
        assert!(
            ds_fields(&d)
                .iter()
                .any(|f| f.contains("empty selector is invalid for daemonset"))
        );
        d["spec"].as_object_mut().unwrap().remove("selector");
        assert_eq!(ds_fields(&d), ["spec.selector: Required value"]);
        let old = ds(json!({"type": "OnDelete"}));
        let mut new = old.clone();
        new["spec"]["selector"] = json!({"matchLabels": {"app": "agent", "v": "2"}});
        let mut causes = Vec::new();
        DaemonSet.validate_update(&old, &new, Part::Main, &mut causes);
        assert_eq!(causes[0].field, "spec.selector");
    }

    #[test]
    fn the_scale_view_shows_the_selector_as_a_string() {
        let obj = rs(
            json!({"matchLabels": {"app": "web"}}),
            json!({"app": "web"}),
        );
        assert_eq!(ReplicaSet.scale(&obj).selector, "app=web");
    }
}
