//! `kubectl describe poddisruptionbudget`.

use serde_json::Value;

use super::{Clock, Out, describe_events, int, int_or_string, text};
use crate::cli::tabwriter::Layout;

/// `kubectl describe poddisruptionbudget`.
pub fn pod_disruption_budget(pdb: &Value, events: Option<&[Value]>, clock: &Clock) -> String {
    let mut out = Out::default();
    out.w(0, &format!("Name:\t{}\n", text(pdb, "/metadata/name")));
    out.w(
        0,
        &format!("Namespace:\t{}\n", text(pdb, "/metadata/namespace")),
    );
    let set = |p: &str| pdb.pointer(p).filter(|v| !v.is_null());
    if let Some(min) = set("/spec/minAvailable") {
        out.w(0, &format!("Min available:\t{}\n", int_or_string(min)));
    } else if let Some(max) = set("/spec/maxUnavailable") {
        out.w(0, &format!("Max unavailable:\t{}\n", int_or_string(max)));
    }
    match set("/spec/selector") {
        Some(sel) => out.w(
            0,
            &format!(
                "Selector:\t{}\n",
                crate::types::labels::format_label_selector(sel)
            ),
        ),
        None => out.w(0, "Selector:\t<unset>\n"),
    }
    out.w(0, "Status:\n");
    let n = |p: &str| int(pdb, p).unwrap_or(0);
    out.w(
        2,
        &format!(
            "Allowed disruptions:\t{}\n",
            n("/status/disruptionsAllowed")
        ),
    );
    out.w(2, &format!("Current:\t{}\n", n("/status/currentHealthy")));
    out.w(2, &format!("Desired:\t{}\n", n("/status/desiredHealthy")));
    out.w(2, &format!("Total:\t{}\n", n("/status/expectedPods")));
    if let Some(events) = events {
        describe_events(&mut out, events, clock);
    }
    out.finish(Layout::DESCRIBE)
}
