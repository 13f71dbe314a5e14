//! DeploymentConfig rules: defaults (spec §3), what create and update do to status and
//! generation (§4), validation with the spec's messages (§5), and the Table cells (§1).

use serde_json::{Map, Value, json};

use super::{DEPLOYMENT_CONFIG_POD_LABEL, deployment_name};
use crate::registry::Cause;
use crate::registry::strategy::{default_pod_spec, validate_pod_spec};
use crate::types::names;

/// Default deadline of deployer pods (`MaxDeploymentDurationSeconds`).
pub const MAX_DEPLOYMENT_DURATION_SECONDS: i64 = 21600;
/// Default rolling and recreate timeouts.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 600;
/// Default rolling interval and update period.
pub const DEFAULT_PERIOD_SECONDS: i64 = 1;
/// Default `revisionHistoryLimit` on the group API.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i64 = 10;

fn obj_mut<'a>(m: &'a mut Map<String, Value>, field: &str) -> &'a mut Map<String, Value> {
    let e = m.entry(field).or_insert_with(|| json!({}));
    if !e.is_object() {
        *e = json!({});
    }
    e.as_object_mut().expect("just made an object")
}

fn is_zero(v: &Value) -> bool {
    v.as_i64() == Some(0) || v.as_str() == Some("0%")
}

/// §3: fills in the defaults; idempotent, so it runs on create and every update.
pub fn default(dc: &mut Value) {
    let namespace = dc
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let Some(spec) = dc.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    // 1. Spec.
    if spec.get("triggers").is_none_or(Value::is_null) {
        spec.insert("triggers".into(), json!([{"type": "ConfigChange"}]));
    }
    let template_labels = spec
        .get("template")
        .and_then(|t| t.pointer("/metadata/labels"))
        .cloned();
    let selector_empty = spec
        .get("selector")
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty);
    if selector_empty
        && spec.get("template").is_some_and(Value::is_object)
        && let Some(labels) = template_labels.filter(Value::is_object)
    {
        spec.insert("selector".into(), labels);
    }
    let only_container = spec
        .get("template")
        .and_then(|t| t.pointer("/spec/containers"))
        .and_then(Value::as_array)
        .filter(|cs| cs.len() == 1)
        .and_then(|cs| cs[0].get("name"))
        .and_then(Value::as_str)
        .map(str::to_string);
    // 2. Strategy.
    let strategy = obj_mut(spec, "strategy");
    if strategy
        .get("type")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        strategy.insert("type".into(), json!("Rolling"));
    }
    match strategy.get("type").and_then(Value::as_str) {
        Some("Rolling") => {
            strategy.entry("rollingParams").or_insert_with(|| {
                json!({
                    "intervalSeconds": DEFAULT_PERIOD_SECONDS,
                    "updatePeriodSeconds": DEFAULT_PERIOD_SECONDS,
                    "timeoutSeconds": DEFAULT_TIMEOUT_SECONDS,
                })
            });
        }
        Some("Recreate") => {
            strategy
                .entry("recreateParams")
                .or_insert_with(|| json!({}));
        }
        _ => {}
    }
    strategy
        .entry("activeDeadlineSeconds")
        .or_insert_with(|| json!(MAX_DEPLOYMENT_DURATION_SECONDS));
    // 3. Rolling params.
    if let Some(p) = strategy
        .get_mut("rollingParams")
        .and_then(Value::as_object_mut)
    {
        for f in ["intervalSeconds", "updatePeriodSeconds"] {
            p.entry(f).or_insert_with(|| json!(DEFAULT_PERIOD_SECONDS));
        }
        p.entry("timeoutSeconds")
            .or_insert_with(|| json!(DEFAULT_TIMEOUT_SECONDS));
        match (p.get("maxUnavailable").cloned(), p.get("maxSurge").cloned()) {
            (None, None) => {
                p.insert("maxUnavailable".into(), json!("25%"));
                p.insert("maxSurge".into(), json!("25%"));
            }
            (None, Some(s)) if is_zero(&s) => {
                p.insert("maxUnavailable".into(), json!("25%"));
            }
            (Some(u), None) if is_zero(&u) => {
                p.insert("maxSurge".into(), json!("25%"));
            }
            _ => {}
        }
    }
    // 4. Recreate params.
    if let Some(p) = strategy
        .get_mut("recreateParams")
        .and_then(Value::as_object_mut)
    {
        p.entry("timeoutSeconds")
            .or_insert_with(|| json!(DEFAULT_TIMEOUT_SECONDS));
    }
    // 1 (hooks): the only container names every hook's container.
    if let Some(name) = &only_container {
        for (params, hooks) in [
            ("recreateParams", &["pre", "mid", "post"][..]),
            ("rollingParams", &["pre", "post"][..]),
        ] {
            for h in hooks {
                if let Some(hook) = strategy
                    .get_mut(params)
                    .and_then(|p| p.get_mut(*h))
                    .and_then(Value::as_object_mut)
                {
                    default_hook_container(hook, name);
                }
            }
        }
    }
    // 5. Triggers.
    if let Some(triggers) = spec.get_mut("triggers").and_then(Value::as_array_mut) {
        for t in triggers {
            if t.get("type").and_then(Value::as_str) != Some("ImageChange") {
                continue;
            }
            if let Some(from) = t
                .pointer_mut("/imageChangeParams/from")
                .and_then(Value::as_object_mut)
            {
                for (field, value) in [("kind", "ImageStreamTag"), ("namespace", &namespace)] {
                    if from
                        .get(field)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        from.insert(field.into(), json!(value));
                    }
                }
            }
        }
    }
    // 7. The pod template gets the Pod defaults.
    if let Some(tspec) = spec.get_mut("template").and_then(|t| t.get_mut("spec")) {
        default_pod_spec(tspec);
    }
}

fn default_hook_container(hook: &mut Map<String, Value>, name: &str) {
    let empty = |v: Option<&Value>| v.and_then(Value::as_str).is_none_or(str::is_empty);
    if let Some(exec) = hook.get_mut("execNewPod").and_then(Value::as_object_mut)
        && empty(exec.get("containerName"))
    {
        exec.insert("containerName".into(), json!(name));
    }
    if let Some(tags) = hook.get_mut("tagImages").and_then(Value::as_array_mut) {
        for t in tags.iter_mut().filter_map(Value::as_object_mut) {
            if empty(t.get("containerName")) {
                t.insert("containerName".into(), json!(name));
            }
        }
    }
}

/// The status every DC starts with (§4.1).
pub fn zero_status() -> Value {
    json!({
        "latestVersion": 0, "observedGeneration": 0, "replicas": 0, "updatedReplicas": 0,
        "availableReplicas": 0, "unavailableReplicas": 0,
    })
}

/// §4.1 and §3.6: what a create does beyond the defaults: a zero status, no triggered
/// images, and the group API's `revisionHistoryLimit`.
pub fn prepare_create(dc: &mut Value) {
    if let Some(m) = dc.as_object_mut() {
        m.insert("status".into(), zero_status());
    }
    if let Some(spec) = dc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("revisionHistoryLimit")
            .or_insert_with(|| json!(DEFAULT_REVISION_HISTORY_LIMIT));
        if let Some(triggers) = spec.get_mut("triggers").and_then(Value::as_array_mut) {
            for t in triggers {
                if t.get("type").and_then(Value::as_str) == Some("ImageChange")
                    && let Some(p) = t
                        .get_mut("imageChangeParams")
                        .and_then(Value::as_object_mut)
                {
                    p.insert("lastTriggeredImage".into(), json!(""));
                }
            }
        }
    }
}

fn latest_version(dc: &Value) -> i64 {
    dc.pointer("/status/latestVersion")
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// §4.2: an update of the main resource keeps the stored status, except a latestVersion
/// one above the stored one, which starts a deployment. `incoming` is the status the client
/// sent, `merged` the object about to be stored (with the old status already in place).
pub fn keep_status_on_update(old: &Value, incoming: Option<&Value>, merged: &mut Value) {
    let old_latest = latest_version(old);
    let wanted = incoming
        .and_then(|s| s.get("latestVersion"))
        .and_then(Value::as_i64);
    if wanted == Some(old_latest + 1)
        && let Some(status) = merged.get_mut("status").and_then(Value::as_object_mut)
    {
        status.insert("latestVersion".into(), json!(old_latest + 1));
    }
}

/// §4.2: a new latestVersion counts as a change for `metadata.generation`.
pub fn latest_version_changed(old: &Value, new: &Value) -> bool {
    latest_version(old) != latest_version(new)
}

fn invalid(causes: &mut Vec<Cause>, field: &str, value: &Value, detail: &str) {
    causes.push(Cause::invalid(field, value, detail));
}

fn required(causes: &mut Vec<Cause>, field: &str) {
    causes.push(Cause::required(field));
}

fn required_because(causes: &mut Vec<Cause>, field: &str, detail: &str) {
    let mut c = Cause::required(field);
    c.message = format!("Required value: {detail}");
    causes.push(c);
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v.get(field).and_then(Value::as_str).unwrap_or("")
}

const C_IDENTIFIER: &str = "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')";

fn is_c_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn validate_env(env: Option<&Value>, path: &str, causes: &mut Vec<Cause>) {
    for (i, e) in env
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("{path}[{i}].name");
        match str_of(e, "name") {
            "" => required(causes, &at),
            n if !is_c_identifier(n) => invalid(causes, &at, &json!(n), C_IDENTIFIER),
            _ => {}
        }
    }
}

/// §5: the semantic rules of a DeploymentConfig (beyond its schema).
pub fn validate(dc: &Value, causes: &mut Vec<Cause>) {
    let Some(spec) = dc.get("spec").filter(|s| s.is_object()) else {
        required(causes, "spec.template");
        return;
    };
    let image_containers = validate_triggers(spec, causes);
    let template = spec.get("template").filter(|t| t.is_object());
    match template {
        None => required(causes, "spec.template"),
        Some(t) => {
            validate_strategy(spec, t, causes);
            validate_template(spec, t, &image_containers, causes);
        }
    }
    for field in ["revisionHistoryLimit", "minReadySeconds"] {
        if let Some(v) = spec.get(field).and_then(Value::as_i64).filter(|v| *v < 0) {
            invalid(
                causes,
                &format!("spec.{field}"),
                &json!(v),
                "must be greater than or equal to 0",
            );
        }
    }
    if let Some(r) = spec
        .get("replicas")
        .and_then(Value::as_i64)
        .filter(|r| *r < 0)
    {
        invalid(
            causes,
            "spec.replicas",
            &json!(r),
            "replicas cannot be negative",
        );
    }
    let selector = spec.get("selector");
    if selector
        .and_then(Value::as_object)
        .is_none_or(Map::is_empty)
    {
        invalid(
            causes,
            "spec.selector",
            selector.unwrap_or(&json!({})),
            "selector cannot be empty",
        );
    }
    validate_status(dc, causes);
}

/// The containers that ImageChange triggers fill in (their image may be empty).
fn validate_triggers(spec: &Value, causes: &mut Vec<Cause>) -> Vec<String> {
    let mut named = Vec::new();
    let triggers = spec.get("triggers").and_then(Value::as_array);
    for (i, t) in triggers.into_iter().flatten().enumerate() {
        let at = format!("spec.triggers[{i}]");
        match str_of(t, "type") {
            "" => required(causes, &format!("{at}.type")),
            "ConfigChange" => {}
            "ImageChange" => {
                let Some(p) = t.get("imageChangeParams").filter(|p| p.is_object()) else {
                    required(causes, &format!("{at}.imageChangeParams"));
                    continue;
                };
                let pat = format!("{at}.imageChangeParams");
                let from = p.get("from").cloned().unwrap_or_else(|| json!({}));
                let name = str_of(&from, "name");
                if name.is_empty() {
                    required(causes, &format!("{pat}.from"));
                } else {
                    if str_of(&from, "kind") != "ImageStreamTag" {
                        invalid(
                            causes,
                            &format!("{pat}.from.kind"),
                            &json!(str_of(&from, "kind")),
                            "kind must be an ImageStreamTag",
                        );
                    }
                    let ok = name.split_once(':').is_some_and(|(stream, tag)| {
                        !tag.is_empty()
                            && !tag.contains(':')
                            && names::dns1123_subdomain(stream).is_empty()
                    });
                    if !ok {
                        invalid(
                            causes,
                            &format!("{pat}.from.name"),
                            &json!(name),
                            "must be in the form of <name>:<tag>",
                        );
                    }
                }
                let ns = str_of(&from, "namespace");
                if !ns.is_empty() && !names::dns1123_subdomain(ns).is_empty() {
                    invalid(
                        causes,
                        &format!("{pat}.from.namespace"),
                        &json!(ns),
                        "namespace must be a valid subdomain",
                    );
                }
                let containers = p.get("containerNames").and_then(Value::as_array);
                match containers {
                    Some(cs) if !cs.is_empty() => {
                        named.extend(cs.iter().filter_map(Value::as_str).map(str::to_string))
                    }
                    _ => required(causes, &format!("{pat}.containerNames")),
                }
            }
            other => causes.push(Cause::not_supported(
                &format!("{at}.type"),
                other,
                &["ConfigChange", "ImageChange"],
            )),
        }
    }
    named
}

fn positive(p: &Value, field: &str, path: &str, causes: &mut Vec<Cause>) {
    if let Some(v) = p.get(field).and_then(Value::as_i64).filter(|v| *v < 1) {
        invalid(causes, &format!("{path}.{field}"), &json!(v), "must be >0");
    }
}

/// `(n, false)` for a number, `(n, true)` for `"N%"`; the error text otherwise.
fn int_or_percent(v: &Value) -> Result<(i64, bool), &'static str> {
    crate::types::int_or_percent(v).ok_or("value should be int(5) or percentage(5%)")
}

fn validate_strategy(spec: &Value, template: &Value, causes: &mut Vec<Cause>) {
    let s = spec.get("strategy").cloned().unwrap_or_else(|| json!({}));
    let path = "spec.strategy";
    let has = |field: &str| s.get(field).is_some_and(Value::is_object);
    match str_of(&s, "type") {
        "" => required(causes, &format!("{path}.type")),
        "Rolling" if !has("rollingParams") => {
            required(causes, &format!("{path}.rollingParams"));
        }
        "Custom" if !has("customParams") => required(causes, &format!("{path}.customParams")),
        "Rolling" | "Recreate" | "Custom" => {}
        other => invalid(
            causes,
            &format!("{path}.type"),
            &json!(other),
            "unsupported strategy type, use \"Custom\" instead and specify your own strategy",
        ),
    }
    if let Some(c) = s.get("customParams").filter(|p| p.is_object()) {
        validate_env(
            c.get("environment"),
            &format!("{path}.customParams.environment"),
            causes,
        );
    }
    let mut strategy_timeout = None;
    if let Some(p) = s.get("recreateParams").filter(|p| p.is_object()) {
        let at = format!("{path}.recreateParams");
        positive(p, "timeoutSeconds", &at, causes);
        for h in ["pre", "mid", "post"] {
            if let Some(hook) = p.get(h).filter(|h| h.is_object()) {
                validate_hook(hook, &format!("{at}.{h}"), template, causes);
            }
        }
        if str_of(&s, "type") == "Recreate" {
            strategy_timeout = p.get("timeoutSeconds").and_then(Value::as_i64);
        }
    }
    if let Some(p) = s.get("rollingParams").filter(|p| p.is_object()) {
        let at = format!("{path}.rollingParams");
        for f in ["intervalSeconds", "updatePeriodSeconds", "timeoutSeconds"] {
            positive(p, f, &at, causes);
        }
        let mut zero = [false, false];
        for (i, f) in ["maxUnavailable", "maxSurge"].iter().enumerate() {
            let Some(v) = p.get(*f) else {
                zero[i] = true;
                continue;
            };
            match int_or_percent(v) {
                Err(e) => invalid(causes, &format!("{at}.{f}"), v, e),
                Ok((n, _)) if n < 0 => {
                    invalid(causes, &format!("{at}.{f}"), v, "must be non-negative")
                }
                Ok((n, pct)) => {
                    zero[i] = n == 0;
                    if *f == "maxUnavailable" && pct && n > 100 {
                        invalid(
                            causes,
                            &format!("{at}.{f}"),
                            v,
                            "should not be more than 100%",
                        );
                    }
                }
            }
        }
        if zero == [true, true] {
            invalid(
                causes,
                &format!("{at}.maxUnavailable"),
                p.get("maxUnavailable").unwrap_or(&json!(0)),
                "cannot be 0 when maxSurge is 0 as well",
            );
        }
        for h in ["pre", "post"] {
            if let Some(hook) = p.get(h).filter(|h| h.is_object()) {
                validate_hook(hook, &format!("{at}.{h}"), template, causes);
            }
        }
        if str_of(&s, "type") == "Rolling" {
            strategy_timeout = p.get("timeoutSeconds").and_then(Value::as_i64);
        }
    }
    for field in ["labels", "annotations"] {
        for (k, _) in s
            .get(field)
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
        {
            for e in names::qualified_name(k) {
                invalid(causes, &format!("{path}.{field}"), &json!(k), &e);
            }
        }
    }
    let deadline = s.get("activeDeadlineSeconds").and_then(Value::as_i64);
    match deadline {
        Some(d) if d < 0 => invalid(
            causes,
            &format!("{path}.activeDeadlineSeconds"),
            &json!(d),
            "must be greater than or equal to 0",
        ),
        Some(d) if strategy_timeout.is_some_and(|t| d <= t) => invalid(
            causes,
            &format!("{path}.activeDeadlineSeconds"),
            &json!(d),
            "activeDeadlineSeconds must be greater than timeoutSeconds",
        ),
        _ => {}
    }
    if let Some(min) = spec
        .get("minReadySeconds")
        .and_then(Value::as_i64)
        .filter(|m| *m >= 0)
    {
        let timeout = strategy_timeout.unwrap_or(DEFAULT_TIMEOUT_SECONDS);
        if timeout > 0 && min >= timeout {
            invalid(
                causes,
                "spec.minReadySeconds",
                &json!(min),
                &format!("must be less than the deployment timeout ({timeout}s)"),
            );
        }
        if let Some(d) = deadline.filter(|d| *d >= 0 && min >= *d) {
            invalid(
                causes,
                "spec.minReadySeconds",
                &json!(min),
                &format!(
                    "must be less than activeDeadlineSeconds ({d}s - used by the deployer pod)"
                ),
            );
        }
    }
}

fn validate_hook(hook: &Value, path: &str, template: &Value, causes: &mut Vec<Cause>) {
    if str_of(hook, "failurePolicy").is_empty() {
        required(causes, &format!("{path}.failurePolicy"));
    }
    let exec = hook.get("execNewPod").filter(|e| e.is_object());
    let tags = hook
        .get("tagImages")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty());
    match (exec, tags) {
        (Some(_), Some(_)) => invalid(
            causes,
            path,
            &json!("<hook>"),
            "only one of 'execNewPod' or 'tagImages' may be specified",
        ),
        (None, None) => invalid(
            causes,
            path,
            &json!("<empty>"),
            "One of execNewPod or tagImages must be specified",
        ),
        _ => {}
    }
    if let Some(e) = exec {
        let at = format!("{path}.execNewPod");
        if e.get("command")
            .and_then(Value::as_array)
            .is_none_or(Vec::is_empty)
        {
            required(causes, &format!("{at}.command"));
        }
        if str_of(e, "containerName").is_empty() {
            required(causes, &format!("{at}.containerName"));
        }
        validate_env(e.get("env"), &format!("{at}.env"), causes);
        for (i, v) in e
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if v.as_str().is_none_or(str::is_empty) {
                invalid(
                    causes,
                    &format!("{at}.volumes[{i}]"),
                    v,
                    "must not be empty",
                );
            }
        }
    }
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| {
            template
                .pointer(&format!("/spec/{l}"))
                .and_then(Value::as_array)
        })
        .flatten()
        .collect();
    for (i, t) in tags.into_iter().flatten().enumerate() {
        let at = format!("{path}.tagImages[{i}]");
        match str_of(t, "containerName") {
            "" => required_because(
                causes,
                &format!("{at}.containerName"),
                "a containerName is required",
            ),
            name => {
                let found = containers
                    .iter()
                    .any(|c| str_of(c, "name") == name && !str_of(c, "image").trim().is_empty());
                if !found {
                    invalid(
                        causes,
                        &format!("{at}.containerName"),
                        &json!(name),
                        &format!("no container {name:?} found"),
                    );
                }
            }
        }
        let to = t.get("to").cloned().unwrap_or_else(|| json!({}));
        let kind = str_of(&to, "kind");
        if !kind.is_empty() && kind != "ImageStreamTag" {
            invalid(
                causes,
                &format!("{at}.to.kind"),
                &json!(kind),
                "Must be 'ImageStreamTag'",
            );
        }
        if str_of(&to, "name").is_empty() {
            required_because(
                causes,
                &format!("{at}.to.name"),
                "a destination tag name is required",
            );
        }
    }
}

fn validate_template(
    spec: &Value,
    t: &Value,
    image_containers: &[String],
    causes: &mut Vec<Cause>,
) {
    let labels = t.pointer("/metadata/labels").and_then(Value::as_object);
    if let Some(selector) = spec.get("selector").and_then(Value::as_object) {
        let matches = selector
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
        if !matches {
            invalid(
                causes,
                "spec.template.metadata.labels",
                &labels.map_or(Value::Null, |l| Value::Object(l.clone())),
                "`selector` does not match template `labels`",
            );
        }
    }
    let Some(ts) = t.get("spec") else {
        required(causes, "spec.template.spec");
        return;
    };
    let mut pod_causes = Vec::new();
    validate_pod_spec(ts, "spec.template.spec", &mut pod_causes);
    let containers = ts.get("containers").and_then(Value::as_array);
    pod_causes.retain(|c| {
        if c.field == "spec.template.spec.restartPolicy" {
            return false;
        }
        // A container an ImageChange trigger fills in may come without an image.
        !containers.into_iter().flatten().enumerate().any(|(i, ct)| {
            c.field == format!("spec.template.spec.containers[{i}].image")
                && image_containers.iter().any(|n| n == str_of(ct, "name"))
        })
    });
    causes.extend(pod_causes);
    if let Some(p) = ts.get("restartPolicy").and_then(Value::as_str)
        && p != "Always"
    {
        causes.push(Cause::not_supported(
            "spec.template.spec.restartPolicy",
            p,
            &["Always"],
        ));
    }
}

const STATUS_COUNTERS: &[&str] = &[
    "latestVersion",
    "observedGeneration",
    "replicas",
    "updatedReplicas",
    "readyReplicas",
    "availableReplicas",
    "unavailableReplicas",
];

/// §5.3: status counters are never negative.
fn validate_status(dc: &Value, causes: &mut Vec<Cause>) {
    for f in STATUS_COUNTERS {
        if let Some(v) = dc
            .pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .filter(|v| *v < 0)
        {
            invalid(
                causes,
                &format!("status.{f}"),
                &json!(v),
                "must be greater than or equal to 0",
            );
        }
    }
}

/// §5.3: on update, latestVersion and observedGeneration never go down.
pub fn validate_update(old: &Value, new: &Value, causes: &mut Vec<Cause>) {
    for f in ["latestVersion", "observedGeneration"] {
        let ptr = format!("/status/{f}");
        let o = old.pointer(&ptr).and_then(Value::as_i64).unwrap_or(0);
        let n = new.pointer(&ptr).and_then(Value::as_i64).unwrap_or(0);
        if n < o {
            invalid(
                causes,
                &format!("status.{f}"),
                &json!(n),
                &format!("{f} cannot be decremented"),
            );
        }
    }
}

/// §6.4: the pods a DC's Scale selects: its selector plus `deploymentconfig=<dc>`.
pub fn scale_selector(dc: &Value) -> std::collections::BTreeMap<String, String> {
    let mut sel = crate::types::labels::map_at(dc, "/spec/selector");
    let name = dc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    sel.insert(DEPLOYMENT_CONFIG_POD_LABEL.into(), name.into());
    sel
}

/// §1: the `TRIGGERED BY` column: `config`, `image(<stream:tag>)` (with container names
/// when the trigger does not name them all), or the raw type; sorted, comma-joined.
pub fn triggered_by(dc: &Value) -> String {
    let containers: Vec<&str> = dc
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("name").and_then(Value::as_str))
        .collect();
    let mut out: Vec<String> = Vec::new();
    for t in dc
        .pointer("/spec/triggers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let entry = match str_of(t, "type") {
            "ConfigChange" => "config".to_string(),
            "ImageChange" => {
                let p = t.get("imageChangeParams").cloned().unwrap_or_default();
                if p.get("automatic").and_then(Value::as_bool) != Some(true) {
                    continue;
                }
                let from = p
                    .pointer("/from/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                let names: Vec<&str> = p
                    .get("containerNames")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let all = containers.iter().all(|c| names.contains(c));
                if containers.len() != 1 && !all {
                    format!("{}:image({from})", names.join(","))
                } else {
                    format!("image({from})")
                }
            }
            other => other.to_string(),
        };
        if !out.contains(&entry) {
            out.push(entry);
        }
    }
    out.sort();
    out.join(",")
}

/// §1: the Table cells of a DC: NAME, REVISION, DESIRED, CURRENT, TRIGGERED BY.
pub fn cells(dc: &Value) -> Vec<Value> {
    let num = |p: &str| dc.pointer(p).and_then(Value::as_i64).unwrap_or(0);
    let replicas = num("/spec/replicas");
    let desired = if dc.pointer("/spec/test").and_then(Value::as_bool) == Some(true) {
        format!("{replicas} (during test)")
    } else {
        replicas.to_string()
    };
    vec![
        dc.pointer("/metadata/name").cloned().unwrap_or(json!("")),
        json!(num("/status/latestVersion")),
        json!(desired),
        json!(num("/status/updatedReplicas")),
        json!(triggered_by(dc)),
    ]
}

/// The RC (deployment) of the DC's latest version.
pub fn latest_deployment_name(dc: &Value) -> String {
    let name = dc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    deployment_name(name, latest_version(dc))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dc() -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "busybox"}]},
                },
            },
        })
    }

    fn causes_of(dc: &Value) -> Vec<(String, String)> {
        let mut causes = Vec::new();
        validate(dc, &mut causes);
        causes.into_iter().map(|c| (c.field, c.message)).collect()
    }

    #[test]
    fn a_minimal_config_gets_the_spec_defaults() {
        let mut d = dc();
        default(&mut d);
        prepare_create(&mut d);
        let spec = &d["spec"];
        assert_eq!(spec["triggers"], json!([{"type": "ConfigChange"}]));
        assert_eq!(spec["selector"], json!({"app": "web"}));
        assert_eq!(spec["revisionHistoryLimit"], 10);
        assert_eq!(spec["strategy"]["type"], "Rolling");
        assert_eq!(spec["strategy"]["activeDeadlineSeconds"], 21600);
        assert_eq!(
            spec["strategy"]["rollingParams"],
            json!({"intervalSeconds": 1, "updatePeriodSeconds": 1, "timeoutSeconds": 600,
                   "maxUnavailable": "25%", "maxSurge": "25%"})
        );
        assert_eq!(spec["template"]["spec"]["restartPolicy"], "Always");
        assert_eq!(d["status"]["latestVersion"], 0);
        let again = d.clone();
        default(&mut d);
        assert_eq!(d, again, "defaulting is idempotent");
        assert!(causes_of(&d).is_empty(), "{:?}", causes_of(&d));
    }

    #[test]
    fn empty_triggers_stay_empty_and_surge_follows_unavailable() {
        let mut d = dc();
        d["spec"]["triggers"] = json!([]);
        d["spec"]["strategy"] = json!({"rollingParams": {"maxUnavailable": 0}});
        default(&mut d);
        assert_eq!(d["spec"]["triggers"], json!([]));
        assert_eq!(d["spec"]["strategy"]["rollingParams"]["maxSurge"], "25%");
        let mut r = dc();
        r["spec"]["strategy"] = json!({"type": "Recreate", "recreateParams": {"pre": {
            "failurePolicy": "Abort", "execNewPod": {"command": ["true"]}}}});
        default(&mut r);
        let p = &r["spec"]["strategy"]["recreateParams"];
        assert_eq!(p["timeoutSeconds"], 600);
        assert_eq!(p["pre"]["execNewPod"]["containerName"], "app");
        assert!(r["spec"]["strategy"].get("rollingParams").is_none());
    }

    #[test]
    fn image_triggers_default_their_source_and_forget_the_last_image_on_create() {
        let mut d = dc();
        d["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {
            "containerNames": ["app"], "from": {"name": "web:latest"}, "lastTriggeredImage": "x"}}]);
        default(&mut d);
        prepare_create(&mut d);
        let p = &d["spec"]["triggers"][0]["imageChangeParams"];
        assert_eq!(
            p["from"],
            json!({"kind": "ImageStreamTag", "name": "web:latest", "namespace": "default"})
        );
        assert_eq!(p["lastTriggeredImage"], "");
        assert!(causes_of(&d).is_empty(), "{:?}", causes_of(&d));
    }

    #[test]
    fn spec_problems_come_back_with_the_spec_messages() {
        let mut d = dc();
        d["spec"]["replicas"] = json!(-1);
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        d["spec"]["strategy"] = json!({"type": "Fancy"});
        d["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {
            "from": {"kind": "DockerImage", "name": "nope"}}}]);
        default(&mut d);
        let got = causes_of(&d);
        let want = [
            (
                "spec.replicas",
                "Invalid value: -1: replicas cannot be negative",
            ),
            (
                "spec.template.spec.restartPolicy",
                "Unsupported value: \"Never\": supported values: \"Always\"",
            ),
            (
                "spec.strategy.type",
                "Invalid value: \"Fancy\": unsupported strategy type, use \"Custom\" instead and specify your own strategy",
            ),
            (
                "spec.triggers[0].imageChangeParams.from.kind",
                "Invalid value: \"DockerImage\": kind must be an ImageStreamTag",
            ),
            (
                "spec.triggers[0].imageChangeParams.from.name",
                "Invalid value: \"nope\": must be in the form of <name>:<tag>",
            ),
            (
                "spec.triggers[0].imageChangeParams.containerNames",
                "Required value",
            ),
        ];
        for (f, m) in want {
            assert!(
                got.contains(&(f.to_string(), m.to_string())),
                "{f}: {m} not in {got:?}"
            );
        }
    }

    #[test]
    fn rolling_and_hook_rules() {
        let mut d = dc();
        d["spec"]["minReadySeconds"] = json!(700);
        d["spec"]["strategy"] = json!({"type": "Rolling", "activeDeadlineSeconds": 5,
            "rollingParams": {"maxUnavailable": "0%", "maxSurge": 0, "intervalSeconds": 0,
            "pre": {"execNewPod": {"command": ["x"]}, "tagImages": [{"containerName": "x"}]}}});
        default(&mut d);
        let got = causes_of(&d);
        for (f, m) in [
            (
                "spec.strategy.rollingParams.intervalSeconds",
                "Invalid value: 0: must be >0",
            ),
            (
                "spec.strategy.rollingParams.maxUnavailable",
                "Invalid value: \"0%\": cannot be 0 when maxSurge is 0 as well",
            ),
            (
                "spec.strategy.rollingParams.pre.failurePolicy",
                "Required value",
            ),
            (
                "spec.strategy.rollingParams.pre",
                "Invalid value: \"<hook>\": only one of 'execNewPod' or 'tagImages' may be specified",
            ),
            (
                "spec.strategy.activeDeadlineSeconds",
                "Invalid value: 5: activeDeadlineSeconds must be greater than timeoutSeconds",
            ),
            (
                "spec.minReadySeconds",
                "Invalid value: 700: must be less than the deployment timeout (600s)",
            ),
            (
                "spec.minReadySeconds",
                "Invalid value: 700: must be less than activeDeadlineSeconds (5s - used by the deployer pod)",
            ),
            (
                "spec.strategy.rollingParams.pre.tagImages[0].to.name",
                "Required value: a destination tag name is required",
            ),
            (
                "spec.strategy.rollingParams.pre.tagImages[0].containerName",
                "Invalid value: \"x\": no container \"x\" found",
            ),
        ] {
            assert!(
                got.contains(&(f.to_string(), m.to_string())),
                "{f}: {m} not in {got:?}"
            );
        }
        let mut bad = dc();
        bad["spec"]["strategy"] =
            json!({"rollingParams": {"maxSurge": "x", "maxUnavailable": "150%"}});
        default(&mut bad);
        let got = causes_of(&bad);
        assert!(
            got.contains(&(
                "spec.strategy.rollingParams.maxSurge".into(),
                "Invalid value: \"x\": value should be int(5) or percentage(5%)".into()
            )),
            "{got:?}"
        );
        assert!(
            got.contains(&(
                "spec.strategy.rollingParams.maxUnavailable".into(),
                "Invalid value: \"150%\": should not be more than 100%".into()
            )),
            "{got:?}"
        );
    }

    #[test]
    fn missing_template_and_selector_are_reported() {
        let d = json!({"metadata": {"name": "x"}, "spec": {}});
        let got = causes_of(&d);
        assert!(
            got.contains(&("spec.template".into(), "Required value".into())),
            "{got:?}"
        );
        assert!(
            got.contains(&(
                "spec.selector".into(),
                "Invalid value: {}: selector cannot be empty".into()
            )),
            "{got:?}"
        );
    }

    #[test]
    fn images_filled_by_triggers_may_be_empty() {
        let mut d = dc();
        d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        default(&mut d);
        assert!(causes_of(&d).contains(&(
            "spec.template.spec.containers[0].image".into(),
            "Required value".into()
        )));
        d["spec"]["triggers"] = json!([{"type": "ImageChange", "imageChangeParams": {
            "containerNames": ["app"], "from": {"name": "web:latest"}}}]);
        default(&mut d);
        assert!(causes_of(&d).is_empty(), "{:?}", causes_of(&d));
    }

    #[test]
    fn status_rules_on_update() {
        let old = json!({"status": {"latestVersion": 3, "observedGeneration": 4}});
        let new = json!({"status": {"latestVersion": 2, "observedGeneration": 4}});
        let mut causes = Vec::new();
        validate_update(&old, &new, &mut causes);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "status.latestVersion");
        assert_eq!(
            causes[0].message,
            "Invalid value: 2: latestVersion cannot be decremented"
        );
        let mut merged = old.clone();
        keep_status_on_update(&old, Some(&json!({"latestVersion": 4})), &mut merged);
        assert_eq!(merged["status"]["latestVersion"], 4);
        let mut merged = old.clone();
        keep_status_on_update(&old, Some(&json!({"latestVersion": 9})), &mut merged);
        assert_eq!(merged["status"]["latestVersion"], 3);
    }

    #[test]
    fn triggered_by_names_config_and_automatic_images() {
        let mut d = dc();
        d["spec"]["triggers"] = json!([
            {"type": "ImageChange", "imageChangeParams": {"automatic": true, "containerNames": ["app"], "from": {"name": "web:1"}}},
            {"type": "ConfigChange"},
            {"type": "ImageChange", "imageChangeParams": {"automatic": false, "containerNames": ["app"], "from": {"name": "web:2"}}},
        ]);
        assert_eq!(triggered_by(&d), "config,image(web:1)");
        d["spec"]["test"] = json!(true);
        assert_eq!(cells(&d)[2], "2 (during test)");
        assert_eq!(
            scale_selector(&d).into_iter().collect::<Vec<_>>(),
            vec![("deploymentconfig".to_string(), "web".to_string())]
        );
    }
}
