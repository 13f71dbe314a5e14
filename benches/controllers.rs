//! `cargo bench --bench controllers`: the control plane's figures as one JSON object on
//! stdout, measured against the real `berth` binary over HTTPS.
//!
//! A node-agent stand-in (this process) keeps one Ready node with a fresh lease and marks
//! every pod bound to it Running and Ready as soon as it sees it. Then:
//!
//! - an RC scaled from 0 to N replicas (1,000; 100 with `BERTH_BENCH_QUICK=1`): seconds
//!   until its status reports N ready; RSS growth per 1,000 pods;
//! - the RC scaled back to 0: seconds until no pod is left;
//! - the server's CPU at rest afterwards (controllers must not poll);
//! - a Deployment of 100 replicas: seconds from its creation to all available, then
//!   seconds for a rolling update of its template (25% surge and unavailability) to
//!   finish (the goal for each: under 2 s);
//! - 100 Deployments of one replica each at rest: the server's CPU (goal: about 0);
//! - a Job of 500 completions at parallelism 50 (100 with `BERTH_BENCH_QUICK=1`), each
//!   pod succeeding as soon as it runs: completions per second from its creation to
//!   `Complete`.

// A benchmark measures the wall clock (`std::time::Instant`).
#![allow(clippy::disallowed_types)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use berth::client::{Client, Event, ListParams, Patch, WatchParams};
use berth::registry::{Kind, catalog};
use common::{Server, quick, start_with};
use serde_json::{Value, json};

const NODE: &str = "bench-node";

async fn node_and_lease(c: &Client) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": NODE},
        "status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            "allocatable": {"cpu": "1000", "memory": "1Ti", "pods": "5000"},
            "capacity": {"cpu": "1000", "memory": "1Ti", "pods": "5000"},
        },
    });
    let made = c
        .create(catalog::of(Kind::Node), None, &node)
        .await
        .unwrap();
    if made.pointer("/status/conditions").is_none() {
        let mut with_status = made.clone();
        with_status["status"] = node["status"].clone();
        c.update_status(catalog::of(Kind::Node), &with_status)
            .await
            .unwrap();
    }
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NODE, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                 "renewTime": berth::types::now_micro()},
    });
    c.create(catalog::of(Kind::Lease), Some("kube-node-lease"), &lease)
        .await
        .unwrap();
}

/// Renews the lease every 10 s, as a node agent would.
async fn heartbeat(c: Client) {
    loop {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let patch = json!({"spec": {"renewTime": berth::types::now_micro()}});
        let _ = c
            .patch(
                catalog::of(Kind::Lease),
                Some("kube-node-lease"),
                NODE,
                &Patch::Merge(patch),
            )
            .await;
    }
}

/// Marks every pod bound to the node Running and Ready, once; a Job's pod succeeds at
/// once instead.
async fn agent(c: Client) {
    let pods = catalog::of(Kind::Pod);
    let params = WatchParams {
        selection: ListParams {
            field_selector: Some(format!("spec.nodeName={NODE}")),
            ..ListParams::default()
        },
        ..WatchParams::default()
    };
    let mut watch = c.watch(pods, None, &params).await.unwrap();
    let seen: Arc<Mutex<HashSet<String>>> = Arc::default();
    let limit = Arc::new(tokio::sync::Semaphore::new(32));
    while let Some(ev) = watch.next().await {
        let pod = match ev.unwrap() {
            Event::Added(p) | Event::Modified(p) => p,
            _ => continue,
        };
        if pod["metadata"]["deletionTimestamp"].is_string() {
            // Deleted gracefully: the "containers" are gone at once; finish the deletion.
            let c = c.clone();
            let permit = limit.clone().acquire_owned().await.unwrap();
            tokio::spawn(async move {
                let _permit = permit;
                let params = berth::client::DeleteParams {
                    uid: pod["metadata"]["uid"].as_str().map(str::to_string),
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                let ns = pod["metadata"]["namespace"].as_str().unwrap();
                let name = pod["metadata"]["name"].as_str().unwrap();
                let _ = c.delete(pods, Some(ns), name, &params).await;
            });
            continue;
        }
        let ready = berth::types::condition(&pod, "Ready").is_some_and(|c| c["status"] == "True");
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_string();
        if ready
            || pod["metadata"]["deletionTimestamp"].is_string()
            || !seen.lock().unwrap().insert(uid)
        {
            continue;
        }
        let c = c.clone();
        let permit = limit.clone().acquire_owned().await.unwrap();
        tokio::spawn(async move {
            let _permit = permit;
            let now = berth::types::now();
            let job = pod
                .pointer("/metadata/labels/batch.kubernetes.io~1job-name")
                .is_some();
            let patch = if job {
                json!({"status": {"phase": "Succeeded", "containerStatuses": [
                    {"name": "c", "ready": false, "restartCount": 0, "image": "busybox",
                     "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                     "startedAt": now, "finishedAt": now}}}
                ]}})
            } else {
                json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now}
                ]}})
            };
            let ns = pod["metadata"]["namespace"].as_str().unwrap();
            let name = pod["metadata"]["name"].as_str().unwrap();
            let _ = c
                .patch_status(pods, Some(ns), name, &Patch::Merge(patch))
                .await;
        });
    }
}

/// Waits until the RC's status satisfies `done`.
async fn rc_until(c: &Client, done: impl Fn(&Value) -> bool) {
    let rcs = catalog::of(Kind::ReplicationController);
    let params = WatchParams {
        selection: ListParams {
            field_selector: Some("metadata.name=bench".into()),
            ..ListParams::default()
        },
        ..WatchParams::default()
    };
    let mut watch = c.watch(rcs, Some("default"), &params).await.unwrap();
    while let Some(ev) = watch.next().await {
        if let Event::Added(rc) | Event::Modified(rc) = ev.unwrap()
            && done(&rc)
        {
            return;
        }
    }
    panic!("the watch ended");
}

async fn pods_left(c: &Client) -> usize {
    c.list(
        catalog::of(Kind::Pod),
        Some("default"),
        &ListParams {
            label_selector: Some("app=bench".into()),
            ..ListParams::default()
        },
    )
    .await
    .unwrap()
    .items
    .len()
}

async fn scale(c: &Client, replicas: usize) {
    c.patch(
        catalog::of(Kind::ReplicationController),
        Some("default"),
        "bench",
        &Patch::Merge(json!({"spec": {"replicas": replicas}})),
    )
    .await
    .unwrap();
}

async fn run(s: &Server) -> Value {
    let n = if quick() { 100 } else { 1000 };
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
    node_and_lease(&c).await;
    let beat = tokio::spawn(heartbeat(c.clone()));
    let agent = tokio::spawn(agent(c.clone()));
    let rc = json!({
        "apiVersion": "v1", "kind": "ReplicationController",
        "metadata": {"name": "bench"},
        "spec": {"replicas": 0, "selector": {"app": "bench"}, "template": {
            "metadata": {"labels": {"app": "bench"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
        }},
    });
    c.create(
        catalog::of(Kind::ReplicationController),
        Some("default"),
        &rc,
    )
    .await
    .unwrap();
    // Let the start-up work (service accounts, first lists) settle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_before, _) = s.usage();

    let t0 = Instant::now();
    scale(&c, n).await;
    rc_until(&c, |rc| rc["status"]["readyReplicas"] == n).await;
    let up = t0.elapsed();
    let (rss_loaded, cpu_loaded) = s.usage();

    let t1 = Instant::now();
    scale(&c, 0).await;
    rc_until(&c, |rc| rc["status"]["replicas"] == 0).await;
    while pods_left(&c).await > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let down = t1.elapsed();

    // At rest: nothing changes, so nothing may run.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, cpu0) = s.usage();
    let rest = Duration::from_secs(if quick() { 3 } else { 10 });
    tokio::time::sleep(rest).await;
    let (_, cpu1) = s.usage();
    beat.abort();
    agent.abort();
    json!({
        "pods": n,
        "scale_up_to_all_ready_s": up.as_secs_f64(),
        "scale_down_to_none_s": down.as_secs_f64(),
        "rss_mib_per_1000_pods": (rss_loaded - rss_before) * 1000.0 / n as f64,
        "rss_mib_loaded": rss_loaded,
        "server_cpu_s_through_scale_up": cpu_loaded,
        "cpu_percent_at_rest": (cpu1 - cpu0) / rest.as_secs_f64() * 100.0,
    })
}

/// Waits until the Deployment `name` is rolled out: every replica updated and available.
async fn deployment_rolled_out(c: &Client, name: &str) {
    let params = WatchParams {
        selection: ListParams {
            field_selector: Some(format!("metadata.name={name}")),
            ..ListParams::default()
        },
        ..WatchParams::default()
    };
    let mut watch = c
        .watch(catalog::of(Kind::Deployment), Some("default"), &params)
        .await
        .unwrap();
    while let Some(ev) = watch.next().await {
        if let Event::Added(d) | Event::Modified(d) = ev.unwrap() {
            let (st, want) = (&d["status"], &d["spec"]["replicas"]);
            if st["observedGeneration"] == d["metadata"]["generation"]
                && &st["updatedReplicas"] == want
                && &st["replicas"] == want
                && &st["availableReplicas"] == want
            {
                return;
            }
        }
    }
    panic!("the watch ended");
}

fn deployment(name: &str, replicas: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]},
        }},
    })
}

async fn deployments(s: &Server) -> Value {
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
    let res = catalog::of(Kind::Deployment);
    let beat = tokio::spawn(heartbeat(c.clone()));
    let agent = tokio::spawn(agent(c.clone()));
    let t0 = Instant::now();
    c.create(res, Some("default"), &deployment("web", 100))
        .await
        .unwrap();
    deployment_rolled_out(&c, "web").await;
    let created = t0.elapsed();
    let t1 = Instant::now();
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {"rev": "2"}}}}});
    c.patch(res, Some("default"), "web", &Patch::Merge(patch))
        .await
        .unwrap();
    deployment_rolled_out(&c, "web").await;
    let rolled = t1.elapsed();
    c.delete(res, Some("default"), "web", &Default::default())
        .await
        .unwrap();
    for i in 0..100 {
        c.create(res, Some("default"), &deployment(&format!("idle-{i}"), 1))
            .await
            .unwrap();
    }
    for i in 0..100 {
        deployment_rolled_out(&c, &format!("idle-{i}")).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, cpu0) = s.usage();
    let rest = Duration::from_secs(if quick() { 3 } else { 10 });
    tokio::time::sleep(rest).await;
    let (_, cpu1) = s.usage();
    beat.abort();
    agent.abort();
    json!({
        "replicas": 100,
        "create_to_all_available_s": created.as_secs_f64(),
        "rolling_update_s": rolled.as_secs_f64(),
        "goal_s": 2.0,
        "idle_deployments": 100,
        "cpu_percent_at_rest_with_100_deployments": (cpu1 - cpu0) / rest.as_secs_f64() * 100.0,
    })
}

/// A Job of many completions run by the stand-in agent: completions per second.
async fn job(s: &Server) -> Value {
    let completions = if quick() { 100 } else { 500 };
    let parallelism = 50;
    let c = Client::http(&s.url, &s.ca, &s.token).unwrap();
    let res = catalog::of(Kind::Job);
    let beat = tokio::spawn(heartbeat(c.clone()));
    let agent = tokio::spawn(agent(c.clone()));
    let body = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "many"},
        "spec": {"completions": completions, "parallelism": parallelism, "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]},
        }},
    });
    let params = WatchParams {
        selection: ListParams {
            field_selector: Some("metadata.name=many".into()),
            ..ListParams::default()
        },
        ..WatchParams::default()
    };
    let mut watch = c.watch(res, Some("default"), &params).await.unwrap();
    let t0 = Instant::now();
    c.create(res, Some("default"), &body).await.unwrap();
    let mut succeeded = 0;
    while let Some(ev) = watch.next().await {
        if let Event::Added(j) | Event::Modified(j) = ev.unwrap() {
            succeeded = j["status"]["succeeded"].as_i64().unwrap_or(0);
            if berth::types::condition(&j, "Complete").is_some_and(|c| c["status"] == "True") {
                break;
            }
        }
    }
    let took = t0.elapsed();
    beat.abort();
    agent.abort();
    json!({
        "completions": completions,
        "parallelism": parallelism,
        "succeeded": succeeded,
        "create_to_complete_s": took.as_secs_f64(),
        "completions_per_s": completions as f64 / took.as_secs_f64(),
    })
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(async {
        // The stand-in is the only node: no agent of this machine.
        let s = start_with(&["--no-node"]).await;
        let mut out = serde_json::Map::new();
        out.insert("replication".into(), run(&s).await);
        out.insert("deployment".into(), deployments(&s).await);
        out.insert("job".into(), job(&s).await);
        out
    });
    println!("{}", Value::Object(out));
}
