//! Configuration kinds: ConfigMaps, Secrets and ServiceAccounts.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{
    Clock, Out, annotations_multiline, describe_events, labels_multiline_simple, list,
    name_and_namespace, text,
};
use crate::cli::tabwriter::Layout;
use crate::types::labels::map_at;

/// `kubectl describe configmap`: each key's value below a `----` rule, then the sizes of
/// the binary entries.
pub fn config_map(cm: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, cm);
    labels_multiline_simple(&mut out, "Labels", &map_at(cm, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(cm, "/metadata/annotations"),
    );
    out.w(0, "\nData\n====\n");
    for (k, v) in map_at(cm, "/data") {
        out.w(0, &format!("{k}:\n----\n"));
        out.w(0, &format!("{v}\n"));
        out.w(0, "\n");
    }
    out.w(0, "\nBinaryData\n====\n");
    for (k, v) in map_at(cm, "/binaryData") {
        out.w(0, &format!("{k}: {} bytes\n", decoded_len(&v)));
    }
    out.w(0, "\n");
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

/// The length of base64 data once decoded.
fn decoded_len(encoded: &str) -> usize {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map(|b| b.len())
        .unwrap_or(0)
}

const SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";

/// `kubectl describe secret`: the sizes of the entries, a service account token in clear.
pub fn secret(secret: &Value) -> String {
    let mut out = Out::default();
    name_and_namespace(&mut out, secret);
    labels_multiline_simple(&mut out, "Labels", &map_at(secret, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(secret, "/metadata/annotations"),
    );
    let kind = text(secret, "/type");
    out.w(0, &format!("\nType:\t{kind}\n"));
    out.w(0, "\nData\n====\n");
    for (k, v) in map_at(secret, "/data") {
        if k == "token" && kind == SERVICE_ACCOUNT_TOKEN {
            use base64::Engine;
            let token = base64::engine::general_purpose::STANDARD
                .decode(&v)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            out.w(0, &format!("{k}:\t{token}\n"));
        } else {
            out.w(0, &format!("{k}:\t{} bytes\n", decoded_len(&v)));
        }
    }
    out.finish(Layout::DESCRIBE)
}

/// `kubectl describe serviceaccount`. `secrets` are the namespace's secrets (`None` when
/// they could not be listed): tokens are those bound to the account, and named secrets
/// that do not exist are marked `(not found)`.
pub fn service_account(
    sa: &Value,
    secrets: Option<&[Value]>,
    events: Option<&[Value]>,
    clock: &Clock,
) -> String {
    let mut out = Out::default();
    let name = text(sa, "/metadata/name");
    out.w(0, &format!("Name:\t{name}\n"));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(sa, "/metadata/namespace")),
    );
    labels_multiline_simple(&mut out, "Labels", &map_at(sa, "/metadata/labels"));
    annotations_multiline(
        &mut out,
        "Annotations",
        &map_at(sa, "/metadata/annotations"),
    );
    let names = |pointer: &str| -> Vec<String> {
        list(sa, pointer)
            .iter()
            .map(|r| text(r, "/name").to_string())
            .collect()
    };
    let (pull, mount) = (names("/imagePullSecrets"), names("/secrets"));
    let mut tokens = Vec::new();
    let mut missing = BTreeSet::new();
    if let Some(secrets) = secrets {
        let uid = text(sa, "/metadata/uid");
        for s in secrets {
            let annotations = map_at(s, "/metadata/annotations");
            let bound = annotations
                .get("kubernetes.io/service-account.name")
                .map(String::as_str)
                == Some(name)
                && annotations
                    .get("kubernetes.io/service-account.uid")
                    .map(String::as_str)
                    == Some(uid);
            if text(s, "/type") == SERVICE_ACCOUNT_TOKEN && bound {
                tokens.push(text(s, "/metadata/name").to_string());
            }
        }
        let existing: BTreeSet<&str> = secrets.iter().map(|s| text(s, "/metadata/name")).collect();
        for n in pull.iter().chain(&mount) {
            if !existing.contains(n.as_str()) {
                missing.insert(n.clone());
            }
        }
    }
    let sections = [
        ("Image pull secrets:", pull),
        ("Mountable secrets: ", mount),
        ("Tokens:            ", tokens),
    ];
    for (header, names) in sections {
        if names.is_empty() {
            out.w(0, &format!("{header}\t<none>\n"));
            continue;
        }
        let mut prefix = header;
        for n in names {
            let note = if missing.contains(&n) {
                " (not found)"
            } else {
                ""
            };
            out.w(0, &format!("{prefix}\t{n}{note}\n"));
            prefix = "                   ";
        }
    }
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::describe::tests::{assert_text, clock};
    use serde_json::json;

    #[test]
    fn a_service_account_marks_secrets_that_do_not_exist() {
        let sa = json!({"metadata": {"name": "app", "namespace": "default", "uid": "u1"},
            "secrets": [{"name": "gone"}, {"name": "here"}],
            "imagePullSecrets": [{"name": "pull"}]});
        let secrets = [
            json!({"metadata": {"name": "here"}, "type": "Opaque"}),
            json!({"metadata": {"name": "pull"}, "type": "kubernetes.io/dockerconfigjson"}),
            json!({"metadata": {"name": "app-token", "annotations": {
                "kubernetes.io/service-account.name": "app",
                "kubernetes.io/service-account.uid": "u1"}},
                "type": "kubernetes.io/service-account-token"}),
        ];
        let out = service_account(&sa, Some(&secrets), Some(&[]), &clock());
        let expected = [
            "Name:                app",
            "Namespace:           default",
            "Labels:              <none>",
            "Annotations:         <none>",
            "Image pull secrets:  pull",
            "Mountable secrets:   gone (not found)",
            "                     here",
            "Tokens:              app-token",
            "Events:              <none>",
        ]
        .join("\n")
            + "\n";
        assert_text(&out, &expected);
    }
}
