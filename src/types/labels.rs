//! Label selectors: the string syntax of `labelSelector` (`a=b,c!=d,e in (f,g),!h,i`), the
//! structured `LabelSelector` of specs, and matching against an object's labels.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The string map at `pointer` of an object (labels, a selector); absent or non-string
/// values are left out.
pub fn map_at(obj: &serde_json::Value, pointer: &str) -> BTreeMap<String, String> {
    obj.pointer(pointer)
        .and_then(serde_json::Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requirement {
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A conjunction of requirements; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    pub requirements: Vec<Requirement>,
}

impl Requirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Gt(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            Requirement::Lt(k, n) => labels
                .get(k)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

impl Selector {
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Parses the string form used in `labelSelector` query parameters.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut p = Parser {
            s: s.as_bytes(),
            i: 0,
        };
        let mut requirements = Vec::new();
        p.ws();
        if p.done() {
            return Ok(Self::default());
        }
        loop {
            requirements.push(p.requirement()?);
            p.ws();
            if p.done() {
                break;
            }
            p.expect(b',')?;
        }
        Ok(Self { requirements })
    }

    /// The selector of a spec field: `matchLabels` and `matchExpressions`.
    pub fn from_label_selector(v: &serde_json::Value) -> Result<Self, String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Expr {
            key: String,
            operator: String,
            #[serde(default)]
            values: Vec<String>,
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct LabelSelector {
            #[serde(default)]
            match_labels: BTreeMap<String, String>,
            #[serde(default)]
            match_expressions: Vec<Expr>,
        }
        let sel = LabelSelector::deserialize(v).map_err(|e| e.to_string())?;
        let mut requirements: Vec<Requirement> = sel
            .match_labels
            .into_iter()
            .map(|(k, v)| Requirement::In(k, vec![v]))
            .collect();
        for e in sel.match_expressions {
            requirements.push(match e.operator.as_str() {
                "In" => Requirement::In(e.key, e.values),
                "NotIn" => Requirement::NotIn(e.key, e.values),
                "Exists" => Requirement::Exists(e.key),
                "DoesNotExist" => Requirement::NotExists(e.key),
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            });
        }
        Ok(Self { requirements })
    }

    /// A selector that matches exactly these labels (a ReplicationController's selector).
    pub fn from_map(map: &BTreeMap<String, String>) -> Self {
        Self {
            requirements: map
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
        }
    }
}

/// A LabelSelector as a selector string, as `metav1.FormatLabelSelector` writes it (a
/// Scale's `status.selector`, the wide Table's column): requirements sorted by key,
/// `matchLabels` as `k=v`, expressions as `k in (a,b)`, `k notin (a)`, `k`, `!k`.
pub fn format_label_selector(sel: &serde_json::Value) -> String {
    use serde_json::Value;
    if !sel.is_object() {
        return String::new();
    }
    let mut parts: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            parts.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e["key"].as_str().unwrap_or("").to_string();
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        values.dedup();
        let text = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        parts.push((key, text));
    }
    parts.sort_by(|a, b| a.0.cmp(&b.0));
    let texts: Vec<String> = parts.into_iter().map(|(_, t)| t).collect();
    texts.join(",")
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Exists(k) => k.clone(),
                Requirement::NotExists(k) => format!("!{k}"),
                Requirement::In(k, vs) if vs.len() == 1 => format!("{k}={}", vs[0]),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) if vs.len() == 1 => format!("{k}!={}", vs[0]),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Gt(k, n) => format!("{k}>{n}"),
                Requirement::Lt(k, n) => format!("{k}<{n}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn ws(&mut self) {
        while self.peek() == Some(b' ') {
            self.i += 1;
        }
    }
    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!(
                "expected '{}' at position {} of label selector",
                c as char, self.i
            ))
        }
    }
    /// A key or value: everything up to an operator, comma, paren or space.
    fn word(&mut self) -> String {
        self.ws();
        let start = self.i;
        while let Some(c) = self.peek() {
            if matches!(c, b'=' | b'!' | b',' | b'(' | b')' | b' ' | b'<' | b'>') {
                break;
            }
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }
    fn keyword(&mut self, kw: &str) -> bool {
        self.ws();
        let end = self.i + kw.len();
        if self.s.get(self.i..end) == Some(kw.as_bytes())
            && matches!(self.s.get(end), Some(b' ' | b'('))
        {
            self.i = end;
            true
        } else {
            false
        }
    }
    fn values(&mut self) -> Result<Vec<String>, String> {
        self.expect(b'(')?;
        let mut vs = Vec::new();
        loop {
            let v = self.word();
            check_value(&v)?;
            vs.push(v);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b')') => {
                    self.i += 1;
                    return Ok(vs);
                }
                _ => return Err("unterminated value set in label selector".into()),
            }
        }
    }
    fn requirement(&mut self) -> Result<Requirement, String> {
        self.ws();
        if self.peek() == Some(b'!') {
            self.i += 1;
            let k = self.word();
            check_key(&k)?;
            return Ok(Requirement::NotExists(k));
        }
        let k = self.word();
        check_key(&k)?;
        self.ws();
        let rest = &self.s[self.i..];
        let (op, len) = if rest.starts_with(b"==") {
            ("=", 2)
        } else if rest.starts_with(b"!=") {
            ("!=", 2)
        } else if rest.starts_with(b"=") {
            ("=", 1)
        } else if rest.starts_with(b">") {
            (">", 1)
        } else if rest.starts_with(b"<") {
            ("<", 1)
        } else if self.keyword("in") {
            return Ok(Requirement::In(k, self.values()?));
        } else if self.keyword("notin") {
            return Ok(Requirement::NotIn(k, self.values()?));
        } else if self.done() || self.peek() == Some(b',') {
            return Ok(Requirement::Exists(k));
        } else {
            return Err(format!(
                "unexpected character at position {} of label selector",
                self.i
            ));
        };
        self.i += len;
        let v = self.word();
        match op {
            "=" => {
                check_value(&v)?;
                Ok(Requirement::In(k, vec![v]))
            }
            "!=" => {
                check_value(&v)?;
                Ok(Requirement::NotIn(k, vec![v]))
            }
            _ => {
                let n: i64 = v
                    .parse()
                    .map_err(|_| format!("for '{op}' the value must be an integer, got {v:?}"))?;
                Ok(if op == ">" {
                    Requirement::Gt(k, n)
                } else {
                    Requirement::Lt(k, n)
                })
            }
        }
    }
}

fn check_key(k: &str) -> Result<(), String> {
    let errs = super::names::qualified_name(k);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid label key {k:?}: {}", errs.join("; ")))
    }
}

fn check_value(v: &str) -> Result<(), String> {
    let errs = super::names::label_value(v);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("invalid label value: {v:?}: {}", errs.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_selectors_are_formatted_as_format_label_selector_does() {
        let sel = serde_json::json!({"matchLabels": {"tier": "fe"}, "matchExpressions": [
            {"key": "env", "operator": "NotIn", "values": ["prod", "dev"]},
            {"key": "app", "operator": "In", "values": ["web"]},
            {"key": "zone", "operator": "DoesNotExist"},
            {"key": "gpu", "operator": "Exists"},
        ]});
        assert_eq!(
            format_label_selector(&sel),
            "app in (web),env notin (dev,prod),gpu,tier=fe,!zone"
        );
        assert_eq!(format_label_selector(&serde_json::json!({})), "");
        let parsed = Selector::from_label_selector(&sel).unwrap();
        assert_eq!(parsed.requirements.len(), 5);
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn every_operator_parses_and_matches() {
        let l = labels(&[("app", "web"), ("tier", "fe"), ("n", "5")]);
        for (sel, want) in [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app=db", false),
            ("app in (db, web)", true),
            ("app notin (db,web)", false),
            ("missing notin (x)", true),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app=web,tier=fe", true),
            ("app=web,tier=be", false),
            ("n>4", true),
            ("n<5", false),
            (" app = web , tier in (fe) ", true),
            ("app.kubernetes.io/name=x", false),
        ] {
            let s = Selector::parse(sel).unwrap_or_else(|e| panic!("{sel}: {e}"));
            assert_eq!(s.matches(&l), want, "{sel}");
        }
    }

    #[test]
    fn bad_selectors_are_errors() {
        for bad in [
            "app in (a",
            "=x",
            "app=web,",
            "app in a",
            "-bad=x",
            "n>x",
            "app=b@d",
        ] {
            assert!(Selector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn structured_selectors() {
        let v = serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                 {"key": "legacy", "operator": "DoesNotExist"}]
        });
        let s = Selector::from_label_selector(&v).unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("tier", "be")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("tier", "be"), ("legacy", "1")])));
        assert_eq!(s.to_string(), "app=web,tier in (fe,be),!legacy");
    }
}
