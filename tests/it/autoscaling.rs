//! HorizontalPodAutoscalers against a real server: a Deployment of CPU-bound containers
//! measured from their cgroups is scaled up to the autoscaler's maximum and, once its pods
//! go idle, back down to one, with the upstream conditions, events and Table; a target
//! that is missing, pods without requests and metrics berth does not serve each leave the
//! condition and event that say so; a bad spec is refused with the upstream messages.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{TestServer, column_names, eventually};

const HPAS: &str = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers";
const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

async fn server() -> TestServer {
    TestServer::start_with(|c| {
        c.node = Some(crate::node::node_settings("hpa-node", |n| {
            n.agent.metrics_every = Duration::from_millis(300);
        }));
        c.controllers.hpa_sync = Duration::from_millis(700);
    })
    .await
}

/// A Deployment whose containers burn CPU while `flag` exists, then sleep.
fn deployment(name: &str, flag: &std::path::Path, requests: Value) -> Value {
    let script = format!(
        "while [ -e {} ]; do :; done; exec sleep 3600",
        flag.display()
    );
    json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "busybox",
                        "command": ["sh", "-c", script],
                        "resources": {"requests": requests, "limits": {"cpu": "200m"}}}],
                },
            },
        },
    })
}

fn hpa(name: &str, target: &str, metrics: Value) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 3,
            "metrics": metrics,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        },
    })
}

fn cpu_at(percent: i64) -> Value {
    json!([{"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": percent}}}])
}

fn condition<'a>(hpa: &'a Value, kind: &str) -> &'a Value {
    hpa["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

async fn replicas(s: &TestServer, name: &str) -> i64 {
    let (_, d) = s.get(&format!("{DEPLOYMENTS}/{name}")).await;
    d["spec"]["replicas"].as_i64().unwrap_or(-1)
}

#[tokio::test]
async fn a_busy_deployment_is_scaled_up_to_the_maximum_and_back_down_when_idle() {
    if crate::resources::hierarchy("memory").is_none() {
        return;
    }
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("busy");
    std::fs::write(&flag, "").unwrap();
    let (code, out) = s
        .post(
            DEPLOYMENTS,
            deployment("burn", &flag, json!({"cpu": "100m"})),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let (code, made) = s.post(HPAS, hpa("burn", "burn", cpu_at(50))).await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(
        made["spec"]["behavior"]["scaleUp"]["policies"][0]["type"],
        "Pods"
    );
    assert_eq!(made["status"]["desiredReplicas"], 0);

    // One pod at its 200m quota is 200 % of its request against 50 %: four pods would
    // do, three is the most allowed.
    let up = eventually(120, "the autoscaler scales the deployment to 3", || async {
        let n = replicas(&s, "burn").await;
        let (_, h) = s.get(&format!("{HPAS}/burn")).await;
        if n == 3 && h["status"]["desiredReplicas"] == 3 {
            Ok(h)
        } else {
            Err(format!("{n} replicas; {h}"))
        }
    })
    .await;
    assert_eq!(up["status"]["desiredReplicas"], 3, "{up}");
    assert!(up["status"]["lastScaleTime"].is_string(), "{up}");
    let current = &up["status"]["currentMetrics"][0];
    assert_eq!(current["type"], "Resource", "{up}");
    assert_eq!(current["resource"]["name"], "cpu", "{up}");
    assert!(
        current["resource"]["current"]["averageUtilization"]
            .as_i64()
            .is_some_and(|u| u > 75),
        "{up}"
    );
    assert_eq!(
        condition(&up, "ScalingActive")["reason"],
        "ValidMetricFound"
    );
    assert_eq!(
        condition(&up, "ScalingActive")["message"],
        "the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)"
    );
    let rescales = s.events_of("burn").await;
    assert!(
        rescales.contains(&(
            "SuccessfulRescale".into(),
            "New size: 3; reason: cpu resource utilization (percentage of request) above target"
                .into()
        )),
        "{rescales:?}"
    );
    // Held at the maximum while the three of them burn.
    let limited = eventually(60, "the limit shows in the conditions", || async {
        let (_, h) = s.get(&format!("{HPAS}/burn")).await;
        let at_max = h["status"]["currentReplicas"] == 3;
        match condition(&h, "ScalingLimited")["reason"].as_str() {
            Some("TooManyReplicas") if at_max => Ok(h),
            _ => Err(h.to_string()),
        }
    })
    .await;
    assert_eq!(condition(&limited, "ScalingLimited")["status"], "True");
    assert_eq!(replicas(&s, "burn").await, 3);

    // The Table kubectl prints.
    let table = s.table(&format!("{HPAS}/burn")).await;
    let names = column_names(&table);
    assert_eq!(
        names,
        [
            "Name",
            "Reference",
            "Targets",
            "MinPods",
            "MaxPods",
            "Replicas",
            "Age"
        ]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[1], "Deployment/burn", "{table}");
    let targets = cells[2].as_str().unwrap();
    assert!(
        targets.starts_with("cpu: ") && targets.ends_with("%/50%"),
        "{table}"
    );
    assert_eq!(
        (&cells[3], &cells[4], &cells[5]),
        (&json!("1"), &json!(3), &json!(3))
    );

    // Idle, they are scaled back to the minimum (no scale-down window here).
    std::fs::remove_file(&flag).unwrap();
    eventually(
        120,
        "the autoscaler scales the deployment back to 1",
        || async {
            match replicas(&s, "burn").await {
                1 => Ok(()),
                n => Err(format!("{n} replicas")),
            }
        },
    )
    .await;
    eventually(30, "the scale-down is an event", || async {
        let down = s.events_of("burn").await;
        let want = (
            "SuccessfulRescale".to_string(),
            "New size: 1; reason: All metrics below target".to_string(),
        );
        if down.contains(&want) {
            Ok(())
        } else {
            Err(format!("{down:?}"))
        }
    })
    .await;
    s.stop().await;
}

#[tokio::test]
async fn what_keeps_an_autoscaler_from_scaling_is_in_its_conditions_and_events() {
    let s = server().await;
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("never");

    // No such target.
    let (code, out) = s.post(HPAS, hpa("lost", "nope", cpu_at(50))).await;
    assert_eq!(code, 201, "{out}");
    let lost = eventually(30, "the missing target is reported", || async {
        let (_, h) = s.get(&format!("{HPAS}/lost")).await;
        match condition(&h, "AbleToScale")["reason"].as_str() {
            Some("FailedGetScale") => Ok(h),
            _ => Err(h.to_string()),
        }
    })
    .await;
    assert_eq!(condition(&lost, "AbleToScale")["status"], "False");
    assert_eq!(
        condition(&lost, "AbleToScale")["message"],
        "the HPA controller was unable to get the target's current scale: deployments.apps \"nope\" not found",
        "{lost}"
    );
    let events = s.events_of("lost").await;
    assert!(
        events.contains(&(
            "FailedGetScale".into(),
            "deployments.apps \"nope\" not found".into()
        )),
        "{events:?}"
    );

    // A metric of a custom metrics API, which berth does not serve: the target's scale
    // is read, the metric is not.
    let (code, out) = s
        .post(
            DEPLOYMENTS,
            deployment("custom", &flag, json!({"cpu": "10m"})),
        )
        .await;
    assert_eq!(code, 201, "{out}");
    let pods_metric = json!([{"type": "Pods", "pods": {"metric": {"name": "requests_per_second"},
        "target": {"type": "AverageValue", "averageValue": "10"}}}]);
    let (code, out) = s.post(HPAS, hpa("custom", "custom", pods_metric)).await;
    assert_eq!(code, 201, "{out}");
    let custom = eventually(30, "the unserved metric is reported", || async {
        let (_, h) = s.get(&format!("{HPAS}/custom")).await;
        match condition(&h, "ScalingActive")["reason"].as_str() {
            Some("FailedGetPodsMetric") => Ok(h),
            _ => Err(h.to_string()),
        }
    })
    .await;
    assert_eq!(
        condition(&custom, "AbleToScale")["reason"],
        "SucceededGetScale"
    );
    assert_eq!(custom["status"]["currentReplicas"], 1, "{custom}");
    let message = condition(&custom, "ScalingActive")["message"]
        .as_str()
        .unwrap();
    assert!(
        message.starts_with(
            "the HPA was unable to compute the replica count: failed to get pods metric value"
        ) && message.contains("custom.metrics.k8s.io"),
        "{message}"
    );
    // The event follows the status write, as upstream's does.
    eventually(30, "the failed computation is an event", || async {
        let events = s.events_of("custom").await;
        let found = events.iter().any(|(r, m)| {
            r == "FailedComputeMetricsReplicas"
                && m.starts_with("invalid metrics (1 invalid out of 1), first error is: failed to get pods metric value")
        });
        if found { Ok(()) } else { Err(format!("{events:?}")) }
    })
    .await;
    assert_eq!(
        replicas(&s, "custom").await,
        1,
        "an unread metric moves nothing"
    );

    // A target whose pods ask for no CPU cannot be measured in percent of it.
    if crate::resources::hierarchy("memory").is_some() {
        let (code, out) = s
            .post(DEPLOYMENTS, deployment("bare", &flag, json!({})))
            .await;
        assert_eq!(code, 201, "{out}");
        let (code, out) = s.post(HPAS, hpa("bare", "bare", cpu_at(50))).await;
        assert_eq!(code, 201, "{out}");
        let bare = eventually(60, "the missing request is reported", || async {
            let (_, h) = s.get(&format!("{HPAS}/bare")).await;
            let message = condition(&h, "ScalingActive")["message"]
                .as_str()
                .unwrap_or("");
            if message.contains("missing request for cpu in container main of Pod bare-") {
                Ok(h)
            } else {
                Err(h.to_string())
            }
        })
        .await;
        assert_eq!(
            condition(&bare, "ScalingActive")["reason"],
            "FailedGetResourceMetric"
        );
        assert!(
            condition(&bare, "ScalingActive")["message"]
                .as_str()
                .unwrap()
                .starts_with("the HPA was unable to compute the replica count: failed to get cpu resource metric value: failed to get cpu utilization: "),
            "{bare}"
        );
    }

    // A spec the API refuses.
    let mut bad = hpa("bad", "custom", cpu_at(50));
    bad["spec"]["minReplicas"] = json!(4);
    bad["spec"]["behavior"]["scaleUp"] =
        json!({"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]});
    let (code, out) = s.post(HPAS, bad).await;
    assert_eq!(code, 422, "{out}");
    assert_eq!(out["kind"], "Status");
    let message = out["message"].as_str().unwrap();
    assert!(
        message.contains(
            "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"
        ) && message.contains(
            "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero"
        ),
        "{message}"
    );

    // Deleted, an autoscaler is forgotten; its target stays as it was.
    let (code, _) = s.delete(&format!("{HPAS}/custom")).await;
    assert_eq!(code, 200);
    assert_eq!(replicas(&s, "custom").await, 1);
    s.stop().await;
}

#[tokio::test]
async fn autoscaling_v1_clients_see_the_same_autoscalers_with_only_a_cpu_target() {
    let s = TestServer::start().await;
    let v1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers";
    // kubectl autoscale up to 1.34 writes v1.
    let (code, made) = s
        .post(
            v1,
            json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                         "maxReplicas": 4, "targetCPUUtilizationPercentage": 60}}),
        )
        .await;
    assert_eq!(code, 201, "{made}");
    assert_eq!(made["apiVersion"], "autoscaling/v1");
    assert_eq!(
        made["spec"]["minReplicas"], 1,
        "defaulted as v2 defaults it"
    );
    assert_eq!(made["spec"]["targetCPUUtilizationPercentage"], 60);
    // Once the controller has written what it found (no such target), nothing else
    // writes the object between the reads and writes below.
    let as_v2 = eventually(30, "the controller's first status", || async {
        let (_, h) = s.get(&format!("{HPAS}/web")).await;
        match condition(&h, "AbleToScale")["reason"].as_str() {
            Some("FailedGetScale") => Ok(h),
            _ => Err(h.to_string()),
        }
    })
    .await;
    assert_eq!(as_v2["spec"]["metrics"], cpu_at(60), "{as_v2}");

    // A memory metric added through v2 survives a v1 client's read-modify-write.
    let mut both = as_v2.clone();
    both["spec"]["metrics"] = json!([cpu_at(60)[0], {"type": "Resource", "resource": {
        "name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}}]);
    let (code, out) = s.put(&format!("{HPAS}/web"), both).await;
    assert_eq!(code, 200, "{out}");
    let (_, mut old) = s.get(&format!("{v1}/web")).await;
    let kept = old["metadata"]["annotations"]["autoscaling.alpha.kubernetes.io/metrics"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        kept, r#"[{"resource":{"name":"memory","targetAverageValue":"100Mi"},"type":"Resource"}]"#,
        "{old}"
    );
    old["spec"]["maxReplicas"] = json!(6);
    let (code, out) = s.put(&format!("{v1}/web"), old).await;
    assert_eq!(code, 200, "{out}");
    assert!(out["spec"].get("metrics").is_none(), "{out}");
    let (_, now) = s.get(&format!("{HPAS}/web")).await;
    assert_eq!(now["spec"]["maxReplicas"], 6);
    let metrics = now["spec"]["metrics"].as_array().unwrap();
    assert_eq!(metrics.len(), 2, "{now}");
    assert!(
        metrics.iter().any(|m| m["resource"]["name"] == "memory"),
        "{now}"
    );
    assert!(now["metadata"].get("annotations").is_none(), "{now}");

    // Both versions are listed; v2 is preferred.
    let (_, group) = s.get("/apis/autoscaling").await;
    assert_eq!(group["preferredVersion"]["version"], "v2", "{group}");
    assert_eq!(group["versions"].as_array().unwrap().len(), 2, "{group}");
    // A v1 object the v2 rules refuse is refused in v1 too.
    let (code, out) = s
        .post(
            v1,
            json!({"metadata": {"name": "bad"}, "spec": {"scaleTargetRef": {"kind": "Deployment",
                "name": "web"}, "maxReplicas": 0}}),
        )
        .await;
    assert_eq!(code, 422, "{out}");
    s.stop().await;
}

#[tokio::test]
async fn memory_utilization_scales_a_deployment_too() {
    if crate::resources::hierarchy("memory").is_none() {
        return;
    }
    let s = server().await;
    // Each pod holds about 24 MB against a 16Mi request: 150 % against 50 %.
    let hold = "x=$(head -c 24000000 /dev/zero | tr '\\0' a); echo held; sleep 3600";
    let mut d = deployment(
        "hold",
        std::path::Path::new("/nonexistent"),
        json!({"memory": "16Mi"}),
    );
    d["spec"]["template"]["spec"]["containers"][0]["command"] = json!(["sh", "-c", hold]);
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = json!({});
    let (code, out) = s.post(DEPLOYMENTS, d).await;
    assert_eq!(code, 201, "{out}");
    let memory = json!([{"type": "Resource", "resource": {"name": "memory",
        "target": {"type": "Utilization", "averageUtilization": 50}}}]);
    let mut h = hpa("hold", "hold", memory);
    h["spec"]["maxReplicas"] = json!(2);
    let (code, out) = s.post(HPAS, h).await;
    assert_eq!(code, 201, "{out}");
    let up = eventually(120, "the autoscaler scales the deployment to 2", || async {
        let n = replicas(&s, "hold").await;
        let (_, h) = s.get(&format!("{HPAS}/hold")).await;
        if n == 2 && h["status"]["desiredReplicas"] == 2 {
            Ok(h)
        } else {
            Err(format!("{n} replicas; {h}"))
        }
    })
    .await;
    let current = &up["status"]["currentMetrics"][0]["resource"];
    assert_eq!(current["name"], "memory", "{up}");
    assert!(
        current["current"]["averageUtilization"]
            .as_i64()
            .is_some_and(|u| u > 100),
        "{up}"
    );
    eventually(30, "the scale-up is an event", || async {
        let events = s.events_of("hold").await;
        let want = (
            "SuccessfulRescale".to_string(),
            "New size: 2; reason: memory resource utilization (percentage of request) above target"
                .to_string(),
        );
        if events.contains(&want) {
            Ok(())
        } else {
            Err(format!("{events:?}"))
        }
    })
    .await;
    s.stop().await;
}
