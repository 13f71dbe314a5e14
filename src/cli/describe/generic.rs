//! kubectl's describer for kinds without their own (custom resources among them): every
//! field as a smart label.

use serde_json::Value;

use super::{
    Clock, Out, annotations_multiline, describe_events, go_slice, labels_multiline_simple,
    name_and_namespace, plain,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;

/// kubectl's describer for kinds without their own: metadata, then every other field as
/// `Smart Label:` lines, nested by indentation.
pub fn generic(obj: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, obj);
    labels_multiline_simple(&mut out, "Labels", &map_at(obj, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(obj, "/metadata/annotations"),
    );
    if let Some(content) = obj.as_object() {
        print_content(&mut out, 0, content, "");
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// The fields the generic describer has already shown or never shows.
const GENERIC_SKIPPED: [&str; 5] = [
    ".metadata.managedFields",
    ".metadata.name",
    ".metadata.namespace",
    ".metadata.labels",
    ".metadata.annotations",
];

/// `printUnstructuredContent`.
fn print_content(
    out: &mut Out,
    level: usize,
    content: &serde_json::Map<String, Value>,
    prefix: &str,
) {
    let mut fields: Vec<&String> = content.keys().collect();
    fields.sort();
    for field in fields {
        let path = format!("{prefix}.{field}");
        if GENERIC_SKIPPED.contains(&path.as_str()) {
            continue;
        }
        match &content[field] {
            Value::Object(map) => {
                out.w(level, &format!("{}:\n", smart_label(field)));
                print_content(out, level + 1, map, &path);
            }
            Value::Array(items) => {
                out.w(level, &format!("{}:\n", smart_label(field)));
                for item in items {
                    match item {
                        Value::Object(map) => print_content(out, level + 1, map, &path),
                        Value::Array(inner) => out.w(level + 1, &format!("{}\n", go_slice(inner))),
                        other => out.w(level + 1, &format!("{}\n", plain(other))),
                    }
                }
            }
            other => out.w(
                level,
                &format!("{}:\t{}\n", smart_label(field), plain(other)),
            ),
        }
    }
}

/// `smartLabelFor`: `apiVersion` → `API Version`, `lastObservedTime` → `Last Observed
/// Time`; names with characters other than letters and `-` stay as they are.
fn smart_label(field: &str) -> String {
    if field.chars().any(|c| !c.is_alphabetic() && c != '-') {
        return field.to_string();
    }
    const ACRONYMS: [&str; 5] = ["API", "URL", "UID", "OSB", "GUID"];
    camel_case_split(field)
        .into_iter()
        .filter(|p| p != "_")
        .map(|p| {
            let upper = p.to_uppercase();
            if ACRONYMS.contains(&upper.as_str()) {
                upper
            } else {
                let mut chars = p.chars();
                match chars.next() {
                    Some(first) => first.to_uppercase().chain(chars).collect(),
                    None => p,
                }
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `camelcase.Split`: runs of lower case, upper case, digits and other characters, an
/// upper-case run giving its last letter to a lower-case run after it (`HTTPServer` →
/// `HTTP`, `Server`).
fn camel_case_split(s: &str) -> Vec<String> {
    fn class(c: char) -> u8 {
        if c.is_lowercase() {
            1
        } else if c.is_uppercase() {
            2
        } else if c.is_numeric() {
            3
        } else {
            4
        }
    }
    let mut runs: Vec<Vec<char>> = Vec::new();
    let mut last = 0;
    for c in s.chars() {
        let k = class(c);
        match runs.last_mut() {
            Some(run) if k == last => run.push(c),
            _ => runs.push(vec![c]),
        }
        last = k;
    }
    for i in 0..runs.len().saturating_sub(1) {
        let (upper, lower) = (
            runs[i].first().map(|c| class(*c)) == Some(2),
            runs[i + 1].first().map(|c| class(*c)) == Some(1),
        );
        if upper
            && lower
            && let Some(c) = runs[i].pop()
        {
            runs[i + 1].insert(0, c);
        }
    }
    runs.into_iter()
        .filter(|r| !r.is_empty())
        .map(|r| r.into_iter().collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names_become_kubectls_smart_labels() {
        assert_eq!(smart_label("apiVersion"), "API Version");
        assert_eq!(smart_label("lastObservedTime"), "Last Observed Time");
        assert_eq!(smart_label("uid"), "UID");
        assert_eq!(
            smart_label("leaseDurationSeconds"),
            "Lease Duration Seconds"
        );
        assert_eq!(smart_label("HTTPServer"), "HTTP Server");
        assert_eq!(smart_label("podIPs"), "Pod I Ps");
        assert_eq!(smart_label("x.y"), "x.y");
        assert_eq!(camel_case_split("GL11Version"), ["GL", "11", "Version"]);
    }
}
