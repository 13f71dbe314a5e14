//! `/metrics` in the Prometheus text format: API requests by verb, resource and code, their
//! latencies, open watch streams, and the store's commit figures.

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
    pub fn new(store: &crate::store::Metrics) -> Self {
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
        store.register(&mut registry);
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

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().expect("metrics lock");
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing to a String cannot fail");
        out
    }
}
