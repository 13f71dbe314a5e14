//! The batch/v1 kinds' rules: defaults and validation as kube-apiserver's (batch/v1
//! `SetDefaults_Job`, `SetDefaults_CronJob`, `ValidateJob*`, `ValidateCronJob*`), and the
//! selector a Job is given at creation (`batch.kubernetes.io/controller-uid`).

use serde_json::{Value, json};

use super::strategy::{self, Strategy};
use super::{Cause, Part};
use crate::types::{cron, labels};

pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";
/// The most completions (and parallelism) of an Indexed Job.
const MAX_INDEXED: i64 = 100_000;
/// The most rules of a pod failure policy.
const MAX_RULES: usize = 20;

fn is_true(v: Option<&Value>) -> bool {
    v.and_then(Value::as_bool).unwrap_or(false)
}

/// batch/v1 Job: the job controller runs its pods to completion.
pub struct Job;

impl Strategy for Job {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(reg, "jobs", ns, name, old, obj, "/spec/template")
    }
    fn default(&self, obj: &mut Value) {
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .map(str::to_string);
        let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else {
            return;
        };
        default_job_spec(spec);
        // The generated selector, as `generateSelector` makes it at creation.
        if let (Some(uid), false) = (uid, is_true(spec.get("manualSelector"))) {
            if spec.get("selector").is_none_or(Value::is_null) {
                spec["selector"] = json!({"matchLabels": {CONTROLLER_UID: uid}});
            }
            if let Some(t) = spec.get_mut("template").filter(|t| t.is_object()) {
                if !t["metadata"].is_object() {
                    t["metadata"] = json!({});
                }
                if !t["metadata"]["labels"].is_object() {
                    t["metadata"]["labels"] = json!({});
                }
                let l = t["metadata"]["labels"].as_object_mut().expect("an object");
                l.entry(CONTROLLER_UID).or_insert_with(|| json!(uid));
                l.entry(LEGACY_CONTROLLER_UID).or_insert_with(|| json!(uid));
                if let Some(name) = name {
                    l.entry(JOB_NAME).or_insert_with(|| json!(name));
                    l.entry(LEGACY_JOB_NAME).or_insert_with(|| json!(name));
                }
            }
        }
        // A Job without labels of its own carries its template's (`SetDefaults_Job`).
        let template_labels = obj.pointer("/spec/template/metadata/labels").cloned();
        if let (Some(tl), Some(meta)) = (template_labels, obj.get_mut("metadata")) {
            let empty = meta
                .get("labels")
                .and_then(Value::as_object)
                .is_none_or(|m| m.is_empty());
            if empty && tl.as_object().is_some_and(|m| !m.is_empty()) {
                meta["labels"] = tl;
            }
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            causes.push(Cause::required("spec"));
            return;
        };
        validate_job_spec(spec, "spec", true, causes);
    }

    fn validate_create(&self, obj: &Value, causes: &mut Vec<Cause>) {
        let spec = &obj["spec"];
        if is_true(spec.get("manualSelector")) {
            return;
        }
        let uid = obj.pointer("/metadata/uid").cloned().unwrap_or(Value::Null);
        let generated = json!({"matchLabels": {CONTROLLER_UID: uid}});
        if spec.get("selector").is_some_and(|s| *s != generated) {
            causes.push(Cause::invalid(
                "spec.selector",
                &spec["selector"],
                "`selector` not auto-generated",
            ));
        }
    }

    fn validate_update(&self, old: &Value, new: &Value, part: Part, causes: &mut Vec<Cause>) {
        if part == Part::Status {
            return;
        }
        for f in [
            "selector",
            "completionMode",
            "podFailurePolicy",
            "successPolicy",
            "backoffLimitPerIndex",
            "manualSelector",
        ] {
            strategy::immutable(
                old,
                new,
                &format!("/spec/{f}"),
                &format!("spec.{f}"),
                causes,
            );
        }
        // Elastic Indexed Jobs: completions may follow parallelism.
        let elastic = new.pointer("/spec/completionMode") == Some(&json!("Indexed"))
            && new.pointer("/spec/completions") == new.pointer("/spec/parallelism");
        if !elastic {
            strategy::immutable(old, new, "/spec/completions", "spec.completions", causes);
        }
        // A suspended Job that never started may change where its pods go.
        let (mut was, mut now) = (
            old["spec"]["template"].clone(),
            new["spec"]["template"].clone(),
        );
        let never_started = is_true(old.pointer("/spec/suspend"))
            && old.pointer("/status/startTime").is_none_or(Value::is_null);
        if never_started {
            for t in [&mut was, &mut now] {
                if let Some(m) = t.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.remove("labels");
                    m.remove("annotations");
                }
                if let Some(s) = t.get_mut("spec").and_then(Value::as_object_mut) {
                    for f in ["nodeSelector", "tolerations", "affinity", "schedulingGates"] {
                        s.remove(f);
                    }
                }
            }
        }
        if was != now {
            causes.push(Cause::invalid(
                "spec.template",
                &new["spec"]["template"],
                "field is immutable",
            ));
        }
    }
}

/// `SetDefaults_Job`, for a Job's spec and a CronJob's job template alike.
fn default_job_spec(spec: &mut Value) {
    let Some(s) = spec.as_object_mut() else {
        return;
    };
    let (has_c, has_p) = (
        s.get("completions").is_some_and(|v| !v.is_null()),
        s.get("parallelism").is_some_and(|v| !v.is_null()),
    );
    if !has_c && !has_p {
        s.insert("completions".into(), json!(1));
    }
    if !has_p {
        s.insert("parallelism".into(), json!(1));
    }
    if s.get("backoffLimit").is_none_or(Value::is_null) {
        let per_index = s.get("backoffLimitPerIndex").is_some_and(|v| !v.is_null());
        s.insert(
            "backoffLimit".into(),
            json!(if per_index { i32::MAX as i64 } else { 6 }),
        );
    }
    s.entry("completionMode")
        .or_insert_with(|| json!("NonIndexed"));
    s.entry("suspend").or_insert_with(|| json!(false));
    let pfp = s.get("podFailurePolicy").is_some_and(|v| !v.is_null());
    s.entry("podReplacementPolicy")
        .or_insert_with(|| json!(if pfp { "Failed" } else { "TerminatingOrFailed" }));
    if let Some(rules) = s
        .get_mut("podFailurePolicy")
        .and_then(|p| p.get_mut("rules"))
        .and_then(Value::as_array_mut)
    {
        for rule in rules {
            if let Some(patterns) = rule
                .get_mut("onPodConditions")
                .and_then(Value::as_array_mut)
            {
                for p in patterns.iter_mut().filter_map(Value::as_object_mut) {
                    p.entry("status").or_insert_with(|| json!("True"));
                }
            }
        }
    }
    if let Some(tspec) = s.get_mut("template").and_then(|t| t.get_mut("spec")) {
        strategy::default_pod_spec(tspec);
    }
}

fn nonnegative(spec: &Value, f: &str, path: &str, causes: &mut Vec<Cause>) {
    if let Some(v) = spec.get(f).filter(|v| !v.is_null())
        && v.as_i64().is_none_or(|n| n < 0)
    {
        causes.push(Cause::invalid(
            &format!("{path}.{f}"),
            v,
            "must be greater than or equal to 0",
        ));
    }
}

/// `validateJobSpec`; `with_selector` is false for a CronJob's template (its Jobs get
/// their selector when they are made).
/// The most rules a success policy may have, and the longest `succeededIndexes`.
const MAX_SUCCESS_RULES: usize = 20;
const MAX_SUCCEEDED_INDEXES_LEN: usize = 64 * 1024;

/// `validateSuccessPolicy` and `validateSuccessPolicyRule`.
fn validate_success_policy(spec: &Value, sp: &Value, path: &str, causes: &mut Vec<Cause>) {
    if spec["completionMode"] != "Indexed" {
        causes.push(Cause::invalid(path, sp, "requires indexed completion mode"));
    }
    let rules = sp["rules"].as_array().map_or(&[][..], Vec::as_slice);
    if rules.is_empty() {
        causes.push(Cause::required_with(
            &format!("{path}.rules"),
            "at least one rules must be specified when the successPolicy is specified",
        ));
    }
    if rules.len() > MAX_SUCCESS_RULES {
        causes.push(Cause::invalid(
            &format!("{path}.rules"),
            &json!(rules.len()),
            &format!("must have at most {MAX_SUCCESS_RULES} items"),
        ));
    }
    let completions = spec["completions"].as_i64().unwrap_or(0);
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{path}.rules[{i}]");
        let indexes = rule.get("succeededIndexes").and_then(Value::as_str);
        let count = rule.get("succeededCount").and_then(Value::as_i64);
        if indexes.is_none() && count.is_none() {
            causes.push(Cause::required_with(
                &at,
                "at least one of succeededCount or succeededIndexes must be specified",
            ));
        }
        let mut total = 0;
        if let Some(text) = indexes {
            let field = format!("{at}.succeededIndexes");
            if text.len() > MAX_SUCCEEDED_INDEXES_LEN {
                causes.push(Cause::invalid(
                    &field,
                    &json!(text),
                    &format!("may not be more than {MAX_SUCCEEDED_INDEXES_LEN} bytes"),
                ));
            }
            match index_count(text, completions) {
                Ok(n) => total = n,
                Err(e) => causes.push(Cause::invalid(
                    &field,
                    &json!(text),
                    &format!("error parsing succeededIndexes: {e}"),
                )),
            }
        }
        if let Some(n) = count {
            let field = format!("{at}.succeededCount");
            if n < 0 {
                causes.push(Cause::invalid(
                    &field,
                    &json!(n),
                    "must be greater than or equal to 0",
                ));
            }
            if n > completions {
                causes.push(Cause::invalid(
                    &field,
                    &json!(n),
                    &format!("must be less than or equal to {completions} (the number of specified completions)"),
                ));
            }
            if indexes.is_some() && n > total {
                causes.push(Cause::invalid(
                    &field,
                    &json!(n),
                    &format!("must be less than or equal to {total} (the number of indexes in the specified succeededIndexes field)"),
                ));
            }
        }
    }
}

/// `validateIndexesFormat`: how many indexes `1,3-5` names, each below `completions`,
/// in increasing order without overlaps.
fn index_count(text: &str, completions: i64) -> Result<i64, String> {
    let mut total = 0;
    let mut previous: Option<i64> = None;
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| {
            s.parse::<i64>()
                .map_err(|_| format!("cannot convert string to integer for index: {s:?}"))
        };
        let (a, b) = (parse(a)?, parse(b)?);
        if a < 0 || b >= completions {
            return Err(format!("too large index: {:?}", if a < 0 { a } else { b }));
        }
        if a > b {
            return Err(format!("non-increasing order, previous: {a}, current: {b}"));
        }
        if previous.is_some_and(|p| a <= p) {
            return Err(format!(
                "overlapping intervals, previous: {}, current: {a}",
                previous.unwrap_or(0)
            ));
        }
        previous = Some(b);
        total += b - a + 1;
    }
    Ok(total)
}

fn validate_job_spec(spec: &Value, path: &str, with_selector: bool, causes: &mut Vec<Cause>) {
    for f in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ] {
        nonnegative(spec, f, path, causes);
    }
    let int = |f: &str| spec.get(f).and_then(Value::as_i64);
    let mode = spec["completionMode"].as_str().unwrap_or("NonIndexed");
    match mode {
        "NonIndexed" => {}
        "Indexed" => {
            match int("completions") {
                None => causes.push(Cause::required_with(
                    &format!("{path}.completions"),
                    "when completion mode is Indexed",
                )),
                Some(c) if c > MAX_INDEXED => causes.push(Cause::invalid(
                    &format!("{path}.completions"),
                    &json!(c),
                    "must be less than or equal to 100000 when completion mode is Indexed",
                )),
                Some(_) => {}
            }
            if let Some(p) = int("parallelism").filter(|&p| p > MAX_INDEXED) {
                causes.push(Cause::invalid(
                    &format!("{path}.parallelism"),
                    &json!(p),
                    "must be less than or equal to 100000 when completion mode is Indexed",
                ));
            }
        }
        other => causes.push(Cause::not_supported(
            &format!("{path}.completionMode"),
            other,
            &["NonIndexed", "Indexed"],
        )),
    }
    let per_index = spec
        .get("backoffLimitPerIndex")
        .is_some_and(|v| !v.is_null());
    if per_index && mode != "Indexed" {
        causes.push(Cause::forbidden(
            &format!("{path}.backoffLimitPerIndex"),
            "requires indexed completion mode",
        ));
    }
    if let Some(m) = spec.get("maxFailedIndexes").filter(|v| !v.is_null()) {
        if !per_index {
            causes.push(Cause::required_with(
                &format!("{path}.backoffLimitPerIndex"),
                "when maxFailedIndexes is specified",
            ));
        }
        if let (Some(n), Some(c)) = (m.as_i64(), int("completions"))
            && n > c
        {
            causes.push(Cause::invalid(
                &format!("{path}.maxFailedIndexes"),
                m,
                "must be less than or equal to completions",
            ));
        }
    }
    if let Some(p) = spec["podReplacementPolicy"].as_str() {
        let pfp = spec.get("podFailurePolicy").is_some_and(|v| !v.is_null());
        let allowed: &[&str] = if pfp {
            &["Failed"]
        } else {
            &["TerminatingOrFailed", "Failed"]
        };
        if !allowed.contains(&p) {
            causes.push(Cause::not_supported(
                &format!("{path}.podReplacementPolicy"),
                p,
                allowed,
            ));
        }
    }
    let selector = if with_selector {
        match spec.get("selector").filter(|s| !s.is_null()) {
            None => {
                causes.push(Cause::required(&format!("{path}.selector")));
                None
            }
            Some(sel) => {
                super::apps::validate_label_selector(sel, &format!("{path}.selector"), causes);
                labels::Selector::from_label_selector(sel).ok()
            }
        }
    } else {
        if is_true(spec.get("manualSelector")) {
            causes.push(Cause::not_supported(
                &format!("{path}.manualSelector"),
                "true",
                &["nil", "false"],
            ));
        }
        None
    };
    let Some(template) = spec.get("template").filter(|t| t.is_object()) else {
        causes.push(Cause::required(&format!("{path}.template")));
        return;
    };
    if let Some(sel) = selector.filter(|s| !s.is_empty())
        && !sel.matches(&labels::map_at(template, "/metadata/labels"))
    {
        causes.push(Cause::invalid(
            &format!("{path}.template.metadata.labels"),
            template.pointer("/metadata/labels").unwrap_or(&Value::Null),
            "`selector` does not match template `labels`",
        ));
    }
    for (k, v) in template
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        for e in crate::types::names::label_value(v.as_str().unwrap_or("")) {
            causes.push(Cause::invalid(
                &format!("{path}.template.metadata.labels"),
                v,
                &format!("{e} (label {k})"),
            ));
        }
    }
    let Some(ts) = template.get("spec") else {
        causes.push(Cause::required(&format!("{path}.template.spec")));
        return;
    };
    strategy::validate_pod_spec(ts, &format!("{path}.template.spec"), causes);
    let restart = ts["restartPolicy"].as_str().unwrap_or("Always");
    if restart != "OnFailure" && restart != "Never" {
        causes.push(Cause::not_supported(
            &format!("{path}.template.spec.restartPolicy"),
            restart,
            &["OnFailure", "Never"],
        ));
    }
    if let Some(sp) = spec.get("successPolicy").filter(|v| !v.is_null()) {
        validate_success_policy(spec, sp, &format!("{path}.successPolicy"), causes);
    }
    if let Some(pfp) = spec.get("podFailurePolicy").filter(|v| !v.is_null()) {
        if restart != "Never" {
            causes.push(Cause::invalid(
                &format!("{path}.template.spec.restartPolicy"),
                &json!(restart),
                "only \"Never\" is supported when podFailurePolicy is specified",
            ));
        }
        validate_pod_failure_policy(pfp, &format!("{path}.podFailurePolicy"), per_index, causes);
    }
}

fn validate_pod_failure_policy(pfp: &Value, path: &str, per_index: bool, causes: &mut Vec<Cause>) {
    let rules = pfp["rules"].as_array().map_or(&[][..], Vec::as_slice);
    if rules.len() > MAX_RULES {
        causes.push(Cause {
            reason: "FieldValueTooMany".into(),
            message: format!(
                "Too many: {}: must have at most {MAX_RULES} items",
                rules.len()
            ),
            field: format!("{path}.rules"),
        });
    }
    for (i, rule) in rules.iter().enumerate() {
        let at = format!("{path}.rules[{i}]");
        let action = rule["action"].as_str().unwrap_or("");
        let mut allowed = vec!["Count", "FailJob", "Ignore"];
        if per_index {
            allowed.insert(1, "FailIndex");
        }
        if !allowed.contains(&action) {
            causes.push(Cause::not_supported(
                &format!("{at}.action"),
                action,
                &allowed,
            ));
        }
        let codes = rule.get("onExitCodes").filter(|v| !v.is_null());
        let conds = rule.get("onPodConditions").filter(|v| !v.is_null());
        match (codes, conds) {
            (Some(_), Some(_)) => causes.push(Cause::invalid(
                &at,
                &Value::String(String::new()),
                "specifying both OnExitCodes and OnPodConditions is not supported",
            )),
            (None, None) => causes.push(Cause::invalid(
                &at,
                &Value::String(String::new()),
                "specifying one of OnExitCodes and OnPodConditions is required",
            )),
            _ => {}
        }
        if let Some(c) = codes {
            let at = format!("{at}.onExitCodes");
            let op = c["operator"].as_str().unwrap_or("");
            if op != "In" && op != "NotIn" {
                causes.push(Cause::not_supported(
                    &format!("{at}.operator"),
                    op,
                    &["In", "NotIn"],
                ));
            }
            let values = c["values"].as_array().map_or(&[][..], Vec::as_slice);
            if values.is_empty() {
                causes.push(Cause::invalid(
                    &format!("{at}.values"),
                    &json!(values),
                    "at least one value is required",
                ));
            }
            let mut last: Option<i64> = None;
            for (j, v) in values.iter().enumerate() {
                let n = v.as_i64().unwrap_or(-1);
                let vat = format!("{at}.values[{j}]");
                if op == "In" && n == 0 {
                    causes.push(Cause::invalid(&vat, v, "must not be 0 for the In operator"));
                }
                if last.is_some_and(|l| l >= n) {
                    let msg = if last == Some(n) {
                        "duplicated values are not allowed"
                    } else {
                        "must be ordered"
                    };
                    causes.push(Cause::invalid(&vat, v, msg));
                }
                last = Some(n);
            }
        }
        for (j, p) in conds
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let s = p["status"].as_str().unwrap_or("");
            if !matches!(s, "True" | "False" | "Unknown") {
                causes.push(Cause::not_supported(
                    &format!("{at}.onPodConditions[{j}].status"),
                    s,
                    &["True", "False", "Unknown"],
                ));
            }
        }
    }
}

/// batch/v1 CronJob: the cronjob controller makes its Jobs on schedule.
pub struct CronJob;

impl Strategy for CronJob {
    // Pod Security: the pods it makes are warned of when it is written.
    fn police(
        &self,
        reg: &super::Registry,
        ns: Option<&str>,
        name: &str,
        old: Option<&Value>,
        obj: &Value,
    ) -> Result<Vec<String>, super::Error> {
        super::podsecurity::admit(
            reg,
            "cronjobs",
            ns,
            name,
            old,
            obj,
            "/spec/jobTemplate/spec/template",
        )
    }
    fn default(&self, obj: &mut Value) {
        let Some(s) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        s.entry("concurrencyPolicy")
            .or_insert_with(|| json!("Allow"));
        s.entry("suspend").or_insert_with(|| json!(false));
        s.entry("successfulJobsHistoryLimit")
            .or_insert_with(|| json!(3));
        s.entry("failedJobsHistoryLimit")
            .or_insert_with(|| json!(1));
        if let Some(tspec) = s
            .get_mut("jobTemplate")
            .and_then(|t| t.pointer_mut("/spec/template/spec"))
        {
            strategy::default_pod_spec(tspec);
        }
    }

    fn prepare_create(&self, obj: &mut Value) {
        if let Some(m) = obj.as_object_mut() {
            m.insert("status".into(), json!({}));
        }
    }

    fn validate(&self, obj: &Value, causes: &mut Vec<Cause>) {
        if let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) {
            // Its Jobs are named NAME-<11 digits>, and a Job's name is a label value.
            if name.len() > 52 {
                causes.push(Cause::invalid(
                    "metadata.name",
                    &json!(name),
                    "must be no more than 52 characters",
                ));
            }
        }
        let Some(spec) = obj.get("spec").filter(|s| s.is_object()) else {
            causes.push(Cause::required("spec"));
            return;
        };
        match spec["schedule"].as_str() {
            None | Some("") => causes.push(Cause::required("spec.schedule")),
            Some(s) => {
                if let Err(e) = cron::parse(s) {
                    causes.push(Cause::invalid("spec.schedule", &json!(s), &e));
                }
                if s.contains("TZ") {
                    causes.push(Cause::invalid(
                        "spec.schedule",
                        &json!(s),
                        "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
                    ));
                }
            }
        }
        if let Some(tz) = spec["timeZone"].as_str()
            && (tz.trim() != tz || tz.is_empty() || jiff::tz::db().get(tz).is_err())
        {
            causes.push(Cause::invalid(
                "spec.timeZone",
                &json!(tz),
                &format!("unknown time zone {tz}"),
            ));
        }
        let policy = spec["concurrencyPolicy"].as_str().unwrap_or("");
        if !matches!(policy, "Allow" | "Forbid" | "Replace") {
            causes.push(Cause::not_supported(
                "spec.concurrencyPolicy",
                policy,
                &["Allow", "Forbid", "Replace"],
            ));
        }
        for f in [
            "startingDeadlineSeconds",
            "successfulJobsHistoryLimit",
            "failedJobsHistoryLimit",
        ] {
            nonnegative(spec, f, "spec", causes);
        }
        match spec.pointer("/jobTemplate/spec").filter(|s| s.is_object()) {
            None => causes.push(Cause::required("spec.jobTemplate.spec")),
            Some(js) => validate_job_spec(js, "spec.jobTemplate.spec", false, causes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Value {
        json!({"metadata": {"name": "pi", "uid": "u-1"}, "spec": {
            "template": {"spec": {"restartPolicy": "Never",
                                  "containers": [{"name": "c", "image": "i"}]}},
        }})
    }

    fn causes_of(s: &dyn Strategy, obj: &Value) -> Vec<String> {
        let mut causes = Vec::new();
        s.validate(obj, &mut causes);
        s.validate_create(obj, &mut causes);
        causes
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn success_policies_are_checked_as_upstream() {
        let with = |mode: &str, rules: Value| {
            let mut j = job();
            j["spec"]["completionMode"] = json!(mode);
            j["spec"]["completions"] = json!(5);
            j["spec"]["successPolicy"] = json!({"rules": rules});
            Job.default(&mut j);
            causes_of(&Job, &j)
        };
        assert!(
            with(
                "Indexed",
                json!([{"succeededIndexes": "0-2,4", "succeededCount": 3}])
            )
            .is_empty()
        );
        assert_eq!(
            with("NonIndexed", json!([{"succeededCount": 1}])),
            [
                "spec.successPolicy: Invalid value: {\"rules\":[{\"succeededCount\":1}]}: requires indexed completion mode"
            ]
        );
        assert_eq!(
            with("Indexed", json!([{}])),
            [
                "spec.successPolicy.rules[0]: Required value: at least one of succeededCount or succeededIndexes must be specified"
            ]
        );
        let bad = with(
            "Indexed",
            json!([{"succeededIndexes": "0-7", "succeededCount": 6}]),
        );
        assert!(
            bad.iter()
                .any(|c| c.contains("succeededIndexes") && c.contains("too large index")),
            "{bad:?}"
        );
        assert!(
            bad.iter().any(|c| c.ends_with(
                "must be less than or equal to 5 (the number of specified completions)"
            )),
            "{bad:?}"
        );
        assert_eq!(
            with(
                "Indexed",
                json!([{"succeededIndexes": "1", "succeededCount": 2}])
            ),
            [
                "spec.successPolicy.rules[0].succeededCount: Invalid value: 2: must be less than or equal to 1 (the number of indexes in the specified succeededIndexes field)"
            ]
        );
    }

    #[test]
    fn a_job_is_defaulted_and_given_its_selector() {
        let mut j = job();
        Job.default(&mut j);
        let spec = &j["spec"];
        assert_eq!(spec["completions"], 1);
        assert_eq!(spec["parallelism"], 1);
        assert_eq!(spec["backoffLimit"], 6);
        assert_eq!(spec["completionMode"], "NonIndexed");
        assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {CONTROLLER_UID: "u-1"}})
        );
        let l = &spec["template"]["metadata"]["labels"];
        assert_eq!(l[JOB_NAME], "pi");
        assert_eq!(l["controller-uid"], "u-1");
        assert!(causes_of(&Job, &j).is_empty(), "{:?}", causes_of(&Job, &j));
        // Parallelism alone leaves completions unset (a work queue).
        let mut q = job();
        q["spec"]["parallelism"] = json!(3);
        Job.default(&mut q);
        assert!(q["spec"].get("completions").is_none());
        // Per-index limits make the global one unlimited.
        let mut pi = job();
        pi["spec"]["backoffLimitPerIndex"] = json!(1);
        Job.default(&mut pi);
        assert_eq!(pi["spec"]["backoffLimit"], i32::MAX as i64);
    }

    #[test]
    fn bad_jobs_are_refused_with_their_fields() {
        let mut j = job();
        j["spec"]["template"]["spec"]["restartPolicy"] = json!("Always");
        j["spec"]["completionMode"] = json!("Indexed");
        j["spec"]["completions"] = json!(null);
        j["spec"]["parallelism"] = json!(-1);
        j["spec"]["backoffLimitPerIndex"] = json!(1);
        j["spec"]["selector"] = json!({"matchLabels": {"app": "other"}});
        Job.default(&mut j);
        let got = causes_of(&Job, &j);
        let fields: Vec<&str> = got.iter().map(|c| c.split(':').next().unwrap()).collect();
        for want in [
            "spec.parallelism",
            "spec.completions",
            "spec.template.metadata.labels",
            "spec.template.spec.restartPolicy",
            "spec.selector",
        ] {
            assert!(fields.contains(&want), "{want} missing from {got:?}");
        }
        let mut pfp = job();
        pfp["spec"]["podFailurePolicy"] = json!({"rules": [
            {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0, 2, 2]}},
            {"action": "Skip", "onPodConditions": [{"type": "DisruptionTarget"}]},
        ]});
        Job.default(&mut pfp);
        let got = causes_of(&Job, &pfp);
        assert_eq!(
            got,
            [
                "spec.podFailurePolicy.rules[0].onExitCodes.values[0]: Invalid value: 0: must not be 0 for the In operator",
                "spec.podFailurePolicy.rules[0].onExitCodes.values[2]: Invalid value: 2: duplicated values are not allowed",
                "spec.podFailurePolicy.rules[1].action: Unsupported value: \"Skip\": supported values: \"Count\", \"FailJob\", \"Ignore\"",
            ]
        );
    }

    #[test]
    fn a_jobs_template_is_immutable_unless_it_never_started() {
        let mut old = job();
        Job.default(&mut old);
        let mut new = old.clone();
        new["spec"]["template"]["spec"]["nodeSelector"] = json!({"disk": "ssd"});
        let mut causes = Vec::new();
        Job.validate_update(&old, &new, Part::Main, &mut causes);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template");
        old["spec"]["suspend"] = json!(true);
        new["spec"]["suspend"] = json!(true);
        let mut causes = Vec::new();
        Job.validate_update(&old, &new, Part::Main, &mut causes);
        assert!(causes.is_empty(), "{causes:?}");
    }

    #[test]
    fn cron_jobs_check_their_schedule_and_zone() {
        let mut cj = json!({"metadata": {"name": "hello"}, "spec": {
            "schedule": "*/1 * * * *",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "OnFailure",
                "containers": [{"name": "c", "image": "i"}]}}}},
        }});
        CronJob.default(&mut cj);
        assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
        assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
        assert!(
            causes_of(&CronJob, &cj).is_empty(),
            "{:?}",
            causes_of(&CronJob, &cj)
        );
        cj["spec"]["schedule"] = json!("every minute");
        cj["spec"]["timeZone"] = json!("Mars/Olympus_Mons");
        cj["spec"]["concurrencyPolicy"] = json!("Sometimes");
        let got = causes_of(&CronJob, &cj);
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(got[0].starts_with(
            "spec.schedule: Invalid value: \"every minute\": expected exactly 5 fields"
        ));
        assert_eq!(
            got[1],
            "spec.timeZone: Invalid value: \"Mars/Olympus_Mons\": unknown time zone Mars/Olympus_Mons"
        );
        cj["spec"]["schedule"] = json!("TZ=UTC 0 * * * *");
        cj["spec"]["timeZone"] = json!("Europe/Berlin");
        cj["spec"]["concurrencyPolicy"] = json!("Forbid");
        let got = causes_of(&CronJob, &cj);
        assert!(
            got.iter().any(|c| c.contains("use timeZone field instead")),
            "{got:?}"
        );
    }
}
