//! `/metrics` in the format the scraper asks for (OpenMetrics, or Prometheus' classic text
//! format): API requests by verb, resource and code, their latencies, open watch streams,
//! and the store's commit figures.

use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub resource: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    pub verb: String,
    pub resource: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.00005, 2.0, 18))
}

/// The API server's metrics; cheap to clone.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Mutex<Registry>>,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    pub watches: Gauge,
}

impl Metrics {
    /// The server's metrics, with the registry's own (the store's commits) beside them.
    pub fn new(engine: &crate::registry::Registry) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<LatencyLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let watches = Gauge::default();
        registry.register(
            "apiserver_request",
            "API requests by verb, resource and HTTP code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Time to answer API requests (watches: until the stream starts)",
            latency.clone(),
        );
        registry.register(
            "apiserver_watch_streams",
            "Open watch streams",
            watches.clone(),
        );
        engine.register_metrics(&mut registry);
        Self {
            registry: Arc::new(Mutex::new(registry)),
            requests,
            latency,
            watches,
        }
    }

    /// Counts one answered request.
    pub fn observe(&self, verb: &str, resource: &str, code: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
                code: code.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&LatencyLabels {
                verb: verb.to_string(),
                resource: resource.to_string(),
            })
            .observe(seconds);
    }

    /// The exposition in the format an `Accept` header asks for, with its content type:
    /// OpenMetrics for a scraper that offers it (Prometheus does), the classic text format
    /// otherwise.
    pub fn render(&self, accept: &str) -> (&'static str, String) {
        let mut out = String::new();
        let registry = self.registry.lock().expect("metrics lock");
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        drop(registry);
        if accept.contains("application/openmetrics-text") {
            (OPENMETRICS, out)
        } else {
            (CLASSIC, classic_text(&out))
        }
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const CLASSIC: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The classic text format of an OpenMetrics exposition: a counter's HELP and TYPE name
/// its samples (`x_total`), and there are no UNIT lines and no `# EOF`.
fn classic_text(open: &str) -> String {
    let counters: std::collections::HashSet<&str> = open
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(open.len());
    for line in open.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let comment = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match comment {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) && !name.ends_with("_total") {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_classic_format_names_counters_by_their_samples_and_has_no_eof() {
        let open = "# HELP req Requests.\n# TYPE req counter\nreq_total{a=\"b\"} 1\n\
                    # HELP up Up.\n# TYPE up gauge\n# UNIT up seconds\nup 1\n# EOF\n";
        assert_eq!(
            classic_text(open),
            "# HELP req_total Requests.\n# TYPE req_total counter\nreq_total{a=\"b\"} 1\n\
             # HELP up Up.\n# TYPE up gauge\nup 1\n"
        );
    }
}
