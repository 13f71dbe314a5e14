//! Helpers shared by the benchmarks: phase selection, percentiles, the HTTPS client.

#![allow(dead_code)]

use std::time::Duration;

use serde_json::{Value, json};

#[path = "../../tests/it/https.rs"]
pub mod https;

/// `BERTH_BENCH_QUICK=1` shrinks every phase (a smoke run).
pub fn quick() -> bool {
    std::env::var_os("BERTH_BENCH_QUICK").is_some()
}

/// Whether to run a phase: all of them, or those named in `BERTH_BENCH_ONLY`
/// (comma-separated).
pub fn phase(name: &str) -> bool {
    std::env::var("BERTH_BENCH_ONLY").map_or(true, |only| only.split(',').any(|p| p == name))
}

/// The unit percentiles are printed in.
#[derive(Clone, Copy)]
pub enum Unit {
    Micros,
    Millis,
}

/// p50 and p99 of `samples`, as `{"p50_us"|"p50_ms", "p99_…", "samples"}`.
pub fn percentiles(mut samples: Vec<Duration>, unit: Unit) -> Value {
    samples.sort();
    let (scale, suffix) = match unit {
        Unit::Micros => (1e6, "us"),
        Unit::Millis => (1e3, "ms"),
    };
    let at = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * scale
    };
    json!({
        format!("p50_{suffix}"): at(0.50),
        format!("p99_{suffix}"): at(0.99),
        "samples": samples.len(),
    })
}
