//! `wait --for=condition=C[=V] | --for=delete | --for=jsonpath='{...}'[=V]`: follows the
//! objects by watch until the condition holds, then prints `pod/x condition met`.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::client::Resource;
use crate::client::{Error as ClientError, Event, ListParams, WatchParams};

use super::apply::{FileArgs, read_manifests, report, resolve};
use super::resource::{Picked, Picking, object_ref, targets};
use super::{CliError, Conn, out};

#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// `TYPE NAME...` or `TYPE/NAME...`.
    pub resources: Vec<String>,
    #[command(flatten)]
    pub files: FileArgs,
    /// What to wait for: `delete`, `create`, `condition=Ready[=true]` or
    /// `jsonpath={.status.phase}=Running`.
    #[arg(long = "for")]
    pub for_: Option<String>,
    /// Wait for the objects matching this label selector.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Wait for the objects matching this field selector.
    #[arg(long)]
    pub field_selector: Option<String>,
    /// Wait for every object of the types given.
    #[arg(long)]
    pub all: bool,
    /// Give up after this long (`30s`, `5m`, `1h`; 0 checks once; negative waits a week).
    #[arg(long, default_value = "30s", allow_hyphen_values = true)]
    pub timeout: String,
}

/// What `--for` asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Condition {
    Delete,
    /// The object exists.
    Create,
    /// A `status.conditions` entry of this type with this status (case-insensitive).
    Status {
        name: String,
        value: String,
    },
    /// A JSONPath expression whose single result is `value`, or exists when `value` is None.
    JsonPath {
        expr: String,
        path: Vec<Step>,
        value: Option<String>,
    },
}

/// One step of a JSONPath expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Field(String),
    Index(i64),
    All,
    /// `[?(@.a.b=="x")]` / `!=`.
    Filter {
        path: Vec<String>,
        equal: bool,
        value: Value,
    },
}

impl Condition {
    pub fn parse(s: &str) -> Result<Condition, CliError> {
        let unrecognized = || CliError::msg(format!("unrecognized condition: {s:?}"));
        if s.eq_ignore_ascii_case("delete") {
            return Ok(Condition::Delete);
        }
        if s.eq_ignore_ascii_case("create") {
            return Ok(Condition::Create);
        }
        if let Some(rest) = s.strip_prefix("condition=") {
            let (name, value) = match rest.split_once('=') {
                Some((n, v)) => (n, v),
                None => (rest, "true"),
            };
            if name.is_empty() {
                return Err(unrecognized());
            }
            return Ok(Condition::Status {
                name: name.to_string(),
                value: value.to_string(),
            });
        }
        if let Some(rest) = s.strip_prefix("jsonpath=") {
            let (expr, value) = split_jsonpath(rest).ok_or_else(unrecognized)?;
            let path = parse_jsonpath(expr)
                .map_err(|e| CliError::msg(format!("unrecognized condition: {s:?}: {e}")))?;
            return Ok(Condition::JsonPath {
                expr: expr.to_string(),
                path,
                value: value.map(str::to_string),
            });
        }
        Err(unrecognized())
    }

    /// Whether an object (None: gone) is in the state asked for.
    pub fn met(&self, obj: Option<&Value>) -> bool {
        match (self, obj) {
            (Condition::Delete, None) | (Condition::Create, Some(_)) => true,
            (_, None) | (Condition::Delete, Some(_)) => false,
            (Condition::Status { name, value }, Some(o)) => {
                let generation = o.pointer("/metadata/generation").and_then(Value::as_i64);
                o.pointer("/status/conditions")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter(|c| {
                        c["type"]
                            .as_str()
                            .is_some_and(|t| t.eq_ignore_ascii_case(name))
                    })
                    .any(|c| {
                        let current = match (c["observedGeneration"].as_i64(), generation) {
                            (Some(seen), Some(g)) => seen == g,
                            _ => true,
                        };
                        current
                            && c["status"]
                                .as_str()
                                .is_some_and(|s| s.eq_ignore_ascii_case(value))
                    })
            }
            (Condition::JsonPath { path, value, .. }, Some(o)) => {
                let found = eval(path, o);
                match value {
                    None => !found.is_empty(),
                    Some(want) => found.len() == 1 && text(found[0]) == *want,
                }
            }
        }
    }
}

/// `{.a.b}=v` → (`.a.b`, Some(v)); braces optional.
fn split_jsonpath(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(inner) = s.strip_prefix('{') {
        let end = inner.find('}')?;
        let expr = &inner[..end];
        let rest = &inner[end + 1..];
        return match rest {
            "" => Some((expr, None)),
            r => r.strip_prefix('=').map(|v| (expr, Some(v))),
        };
    }
    // Without braces the value follows the first `=` outside brackets.
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            '=' if depth == 0 => return Some((&s[..i], Some(&s[i + 1..]))),
            _ => {}
        }
    }
    Some((s, None))
}

/// Parses the subset of JSONPath kubectl's waits use: `.a.b`, `['a.b']`, `[0]`, `[*]`,
/// `[?(@.type=="Ready")]`.
pub fn parse_jsonpath(expr: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    let s = expr.trim();
    let mut rest = s.strip_prefix('$').unwrap_or(s);
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let name = &r[..end];
            if name.is_empty() {
                return Err(format!("empty field name in {expr:?}"));
            }
            steps.push(if name == "*" {
                Step::All
            } else {
                Step::Field(name.to_string())
            });
            rest = &r[end..];
        } else if let Some(r) = rest.strip_prefix('[') {
            let end = r
                .find(']')
                .ok_or_else(|| format!("unclosed [ in {expr:?}"))?;
            let inner = r[..end].trim();
            rest = &r[end + 1..];
            if inner == "*" {
                steps.push(Step::All);
            } else if let Some(f) = inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')')) {
                let (lhs, rhs, equal) = match (f.split_once("=="), f.split_once("!=")) {
                    (Some((l, r)), _) => (l, r, true),
                    (None, Some((l, r))) => (l, r, false),
                    _ => return Err(format!("unsupported filter {f:?}")),
                };
                let path = lhs
                    .trim()
                    .strip_prefix("@.")
                    .ok_or_else(|| format!("unsupported filter {f:?}"))?
                    .split('.')
                    .map(str::to_string)
                    .collect();
                let rhs = rhs.trim();
                let value = if let Some(q) = rhs
                    .strip_prefix('"')
                    .and_then(|q| q.strip_suffix('"'))
                    .or_else(|| rhs.strip_prefix('\'').and_then(|q| q.strip_suffix('\'')))
                {
                    Value::String(q.to_string())
                } else {
                    serde_json::from_str(rhs).map_err(|_| format!("unsupported value {rhs:?}"))?
                };
                steps.push(Step::Filter { path, equal, value });
            } else if let Some(q) = inner
                .strip_prefix('\'')
                .and_then(|q| q.strip_suffix('\''))
                .or_else(|| inner.strip_prefix('"').and_then(|q| q.strip_suffix('"')))
            {
                steps.push(Step::Field(q.to_string()));
            } else {
                let i = inner
                    .parse()
                    .map_err(|_| format!("unsupported subscript [{inner}]"))?;
                steps.push(Step::Index(i));
            }
        } else {
            return Err(format!("unexpected {rest:?} in {expr:?}"));
        }
    }
    Ok(steps)
}

/// The values a JSONPath selects.
pub fn eval<'a>(steps: &[Step], root: &'a Value) -> Vec<&'a Value> {
    let mut cur = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for v in cur {
            match step {
                Step::Field(f) => next.extend(v.get(f.as_str())),
                Step::Index(i) => {
                    if let Some(a) = v.as_array() {
                        let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                        next.extend(usize::try_from(idx).ok().and_then(|i| a.get(i)));
                    }
                }
                Step::All => match v {
                    Value::Array(a) => next.extend(a.iter()),
                    Value::Object(m) => next.extend(m.values()),
                    _ => {}
                },
                Step::Filter { path, equal, value } => {
                    for e in v.as_array().into_iter().flatten() {
                        let got = path.iter().try_fold(e, |x, f| x.get(f.as_str()));
                        if (got == Some(value)) == *equal {
                            next.push(e);
                        }
                    }
                }
            }
        }
        cur = next;
    }
    cur
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Parses the Go duration of `--timeout` (`30s`, `1m30s`, `500ms`, `0`, `-1s`).
pub fn parse_duration(s: &str) -> Result<(bool, Duration), CliError> {
    parse_flag_duration(s, "--timeout")
}

/// Parses a Go duration given to `flag` (named in errors); whether it is negative, and its
/// length.
pub fn parse_flag_duration(s: &str, flag: &str) -> Result<(bool, Duration), CliError> {
    let fail = |why: String| {
        CliError::msg(format!(
            "invalid argument {s:?} for \"{flag}\" flag: time: {why}"
        ))
    };
    let invalid = || fail(format!("invalid duration {s:?}"));
    let (negative, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if body == "0" {
        return Ok((false, Duration::ZERO));
    }
    if body.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = body;
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..end].parse().map_err(|_| invalid())?;
        rest = &rest[end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "" => return Err(fail(format!("missing unit in duration {s:?}"))),
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(fail(format!("unknown unit {unit:?} in duration {s:?}"))),
        };
        total += n * scale;
        rest = &rest[unit_end..];
    }
    Ok((negative, Duration::from_secs_f64(total)))
}

/// The result of following one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Met,
    TimedOut,
}

/// Follows one object by list + watch (from the list's revision, so no change is missed)
/// until `met` holds for its state (None: the object is gone), the deadline passes, or
/// after one look when `once`.
pub async fn follow(
    conn: &Conn,
    res: &'static Resource,
    ns: Option<&str>,
    name: &str,
    deadline: Option<Instant>,
    once: bool,
    met: impl Fn(Option<&Value>) -> bool,
) -> Result<Outcome, CliError> {
    let selection = ListParams {
        label_selector: None,
        field_selector: Some(format!("metadata.name={name}")),
    };
    let run = async {
        loop {
            let list = conn
                .client
                .list(res, ns, &selection)
                .await
                .map_err(|e| conn.error(e))?;
            if met(list.items.first()) {
                return Ok(Outcome::Met);
            }
            if once {
                return Ok(Outcome::TimedOut);
            }
            let params = WatchParams {
                selection: selection.clone(),
                resource_version: list.resource_version,
                bookmarks: false,
                timeout: None,
            };
            let mut events = match conn.client.watch(res, ns, &params).await {
                Ok(w) => w,
                Err(ClientError::Gone(_)) => continue,
                Err(e) => return Err(conn.error(e)),
            };
            loop {
                match events.next().await {
                    Some(Ok(Event::Added(o) | Event::Modified(o))) => {
                        if met(Some(&o)) {
                            return Ok(Outcome::Met);
                        }
                    }
                    Some(Ok(Event::Deleted(_))) => {
                        if met(None) {
                            return Ok(Outcome::Met);
                        }
                    }
                    Some(Ok(Event::Bookmark(_))) => {}
                    // History compacted or stream ended: look again and watch anew.
                    Some(Err(ClientError::Gone(_))) | None => break,
                    Some(Err(e)) => return Err(conn.error(e)),
                }
            }
            tracing::debug!(name, "watch ended; listing again");
        }
    };
    match deadline {
        Some(d) => tokio::time::timeout_at(d, run)
            .await
            .unwrap_or(Ok(Outcome::TimedOut)),
        None => run.await,
    }
}

/// The message of a wait that gave up.
pub fn timed_out(res: &Resource, name: &str) -> CliError {
    CliError::msg(format!(
        "timed out waiting for the condition on {}/{name}",
        res.qualified_plural()
    ))
}

/// One object to wait for.
type Item = Picked;

/// `wait ...`
pub async fn run(conn: &Conn, args: WaitArgs) -> Result<i32, CliError> {
    let cond = Condition::parse(args.for_.as_deref().unwrap_or(""))?;
    let (negative, timeout) = parse_duration(&args.timeout)?;
    let once = !negative && timeout.is_zero();
    let deadline = (!negative && !once).then(|| Instant::now() + timeout);

    let mut items = Vec::new();
    for m in read_manifests(&args.files)? {
        let r = resolve(conn, &m)?;
        items.push(Item {
            name: r.name().to_string(),
            res: r.res,
            ns: r.ns,
        });
    }
    if !args.resources.is_empty() {
        let how = Picking {
            selector: args.selector.as_deref(),
            field_selector: args.field_selector.as_deref(),
            all: args.all,
            all_namespaces: false,
        };
        items.extend(conn.pick(targets(&args.resources)?, &how).await?);
    } else if args.files.filenames.is_empty() {
        return Err(CliError::msg(
            "resource name must be specified as TYPE/NAME or as TYPE NAME, or with -f",
        ));
    }
    if items.is_empty() {
        return Err(CliError::msg("no matching resources found"));
    }

    // Objects must exist to be waited on; those already gone are deleted, silently.
    let mut present = Vec::new();
    for it in items {
        match conn.client.get(it.res, it.ns.as_deref(), &it.name).await {
            Ok(_) => present.push(it),
            Err(e) if e.is_not_found() && cond == Condition::Delete => {}
            Err(e) if e.is_not_found() && cond == Condition::Create => present.push(it),
            Err(e) => return Err(conn.error(e)),
        }
    }
    let items = present;

    let cond = &cond;
    let waits = items.iter().map(|it| async move {
        let outcome = follow(
            conn,
            it.res,
            it.ns.as_deref(),
            &it.name,
            deadline,
            once,
            |o| cond.met(o),
        )
        .await?;
        match outcome {
            Outcome::Met => {
                out(&format!("{} condition met\n", object_ref(it.res, &it.name)));
                Ok(())
            }
            Outcome::TimedOut => Err(timed_out(it.res, &it.name)),
        }
    });
    let results = futures_util::future::join_all(waits).await;
    let errors: Vec<CliError> = results.into_iter().filter_map(Result::err).collect();
    report(errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn for_takes_delete_conditions_and_jsonpaths() {
        assert_eq!(Condition::parse("delete").unwrap(), Condition::Delete);
        assert_eq!(
            Condition::parse("condition=Ready").unwrap(),
            Condition::Status {
                name: "Ready".into(),
                value: "true".into()
            }
        );
        assert_eq!(
            Condition::parse("condition=Ready=False").unwrap(),
            Condition::Status {
                name: "Ready".into(),
                value: "False".into()
            }
        );
        let c = Condition::parse("jsonpath={.status.phase}=Running").unwrap();
        let Condition::JsonPath { path, value, .. } = c else {
            panic!()
        };
        assert_eq!(
            path,
            [Step::Field("status".into()), Step::Field("phase".into())]
        );
        assert_eq!(value.as_deref(), Some("Running"));
        assert_eq!(Condition::parse("Create").unwrap(), Condition::Create);
        assert_eq!(
            Condition::parse("").unwrap_err().text(),
            "error: unrecognized condition: \"\""
        );
        assert_eq!(
            Condition::parse("foo").unwrap_err().text(),
            "error: unrecognized condition: \"foo\""
        );
    }

    #[test]
    fn conditions_compare_without_case_and_honour_observed_generation() {
        let pod = json!({"metadata": {"generation": 2}, "status": {"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "Synced", "status": "True", "observedGeneration": 1},
        ]}});
        assert!(Condition::parse("condition=ready").unwrap().met(Some(&pod)));
        assert!(
            !Condition::parse("condition=Ready=false")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            !Condition::parse("condition=Synced")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(!Condition::parse("condition=Ready").unwrap().met(None));
        assert!(Condition::Delete.met(None));
        assert!(Condition::Create.met(Some(&pod)));
        assert!(!Condition::Create.met(None));
        assert!(!Condition::Delete.met(Some(&pod)));
        assert!(
            Condition::parse("jsonpath={.status.phase}=Running")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            Condition::parse(r#"jsonpath={.status.conditions[?(@.type=="Ready")].status}=True"#)
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            Condition::parse("jsonpath={.status.conditions[1].observedGeneration}=1")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            Condition::parse("jsonpath={.status.phase}")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            !Condition::parse("jsonpath={.status.nope}")
                .unwrap()
                .met(Some(&pod))
        );
        assert!(
            !Condition::parse("jsonpath={.status.conditions[*].status}=True")
                .unwrap()
                .met(Some(&pod))
        );
    }

    #[test]
    fn durations_read_like_go() {
        assert_eq!(
            parse_duration("30s").unwrap(),
            (false, Duration::from_secs(30))
        );
        assert_eq!(
            parse_duration("1m30s").unwrap(),
            (false, Duration::from_secs(90))
        );
        assert_eq!(
            parse_duration("500ms").unwrap(),
            (false, Duration::from_millis(500))
        );
        assert_eq!(parse_duration("0").unwrap(), (false, Duration::ZERO));
        assert!(parse_duration("-1s").unwrap().0);
        assert_eq!(
            parse_duration("30").unwrap_err().text(),
            "error: invalid argument \"30\" for \"--timeout\" flag: time: missing unit in duration \"30\""
        );
        assert_eq!(
            parse_duration("3x").unwrap_err().text(),
            "error: invalid argument \"3x\" for \"--timeout\" flag: time: unknown unit \"x\" in duration \"3x\""
        );
        assert!(parse_duration("x").is_err());
    }
}
