//! `cargo bench --bench rollout`: DeploymentConfig rollouts as one JSON object on stdout,
//! measured against the real `berth` binary: its controllers, its node agent running the
//! deployer pods (`berth deploy`) and the application pods as processes.
//!
//! For a Rolling and a Recreate DC of 3 replicas whose pods are ready as soon as they run
//! (no probes): 10 rollouts back to back (`instantiate` with `force`), each timed from the
//! request until the new deployment is `Complete` (5 with `BERTH_BENCH_QUICK=1`).

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::time::{Duration, Instant};

mod common;

use berth::client::{Client, DeleteParams, Event, ListParams, WatchParams};
use berth::registry::{Kind, catalog};
use common::{Unit, percentiles, quick, start_with};
use serde_json::{Value, json};

const NS: &str = "default";

fn dc(name: &str, strategy: &str) -> Value {
    json!({
        "apiVersion": "apps.openshift.io/v1", "kind": "DeploymentConfig",
        "metadata": {"name": name},
        "spec": {
            "replicas": 3,
            "selector": {"app": name},
            "triggers": [],
            "strategy": {"type": strategy},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "busybox",
                                    "command": ["sleep", "86400"]}],
                },
            },
        },
    })
}

fn phase(rc: &Value) -> &str {
    rc["metadata"]["annotations"]["openshift.io/deployment.phase"]
        .as_str()
        .unwrap_or("")
}

/// Waits (by watch) until deployment `name` is Complete; panics if it fails.
async fn complete(c: &Client, name: &str) {
    let rcs = catalog::of(Kind::ReplicationController);
    let params = WatchParams {
        selection: ListParams {
            field_selector: Some(format!("metadata.name={name}")),
            ..ListParams::default()
        },
        ..WatchParams::default()
    };
    let mut watch = c.watch(rcs, Some(NS), &params).await.unwrap();
    while let Some(ev) = watch.next().await {
        if let Event::Added(rc) | Event::Modified(rc) = ev.unwrap() {
            match phase(&rc) {
                "Complete" => return,
                "Failed" => panic!("deployment {name} failed: {rc}"),
                _ => {}
            }
        }
    }
    panic!("the watch ended");
}

async fn rollouts(s: &common::Server, c: &Client, name: &str, strategy: &str, n: usize) -> Value {
    let http = https_client(s);
    let base = format!("/apis/apps.openshift.io/v1/namespaces/{NS}/deploymentconfigs");
    let r = s
        .req(&http, reqwest::Method::POST, &base)
        .json(&dc(name, strategy))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.text().await.unwrap());
    let mut times = Vec::new();
    for version in 1..=n {
        let started = Instant::now();
        let r = s
            .req(
                &http,
                reqwest::Method::POST,
                &format!("{base}/{name}/instantiate"),
            )
            .json(
                &json!({"kind": "DeploymentRequest", "apiVersion": "apps.openshift.io/v1",
                          "name": name, "latest": true, "force": true}),
            )
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap());
        complete(c, &format!("{name}-{version}")).await;
        times.push(started.elapsed());
    }
    // Everything goes before the server does (containers outlive berth).
    let r = s
        .req(&http, reqwest::Method::DELETE, &format!("{base}/{name}"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    percentiles(times, Unit::Millis)
}

fn https_client(s: &common::Server) -> reqwest::Client {
    common::https::client_with(&s.ca, false)
}

async fn pods_left(c: &Client) -> usize {
    c.list(catalog::of(Kind::Pod), Some(NS), &ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::main]
async fn main() {
    let s = start_with(&[]).await;
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
    let n = if quick() { 5 } else { 10 };
    let rolling = rollouts(&s, &c, "bench-rolling", "Rolling", n).await;
    let recreate = rollouts(&s, &c, "bench-recreate", "Recreate", n).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while pods_left(&c).await > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Pods left past the deadline are deleted by force, so no process outlives the bench.
    let pods = c
        .list(catalog::of(Kind::Pod), Some(NS), &ListParams::default())
        .await
        .unwrap();
    for p in pods.items {
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        let name = p["metadata"]["name"].as_str().unwrap_or("");
        let _ = c
            .delete(catalog::of(Kind::Pod), Some(NS), name, &params)
            .await;
    }
    let out = json!({"rollout": {
        "replicas": 3,
        "rollouts_each": n,
        "rolling_instantiate_to_complete": rolling,
        "recreate_instantiate_to_complete": recreate,
    }});
    println!("{out}");
}
