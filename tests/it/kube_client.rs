//! A real third-party client: the `kube` crate (kube-rs), configured from the kubeconfig
//! berth writes, creates, lists, patches (merge and server-side apply), deletes, and
//! watches with its `watcher` (list+watch, and streaming lists).

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde_json::json;

use crate::support::{TestServer, within};

async fn client(s: &TestServer) -> kube::Client {
    let kc = Kubeconfig::read_from(s.dir.path().join("kubeconfig")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "kube"}},
        "data": {"k": "v"},
    }))
    .unwrap()
}

#[tokio::test]
async fn the_kube_crate_works_against_berth() {
    let s = TestServer::start().await;
    let client = client(&s).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Two watchers: the classic list+watch and the streaming list.
    let mut classic = watcher(api.clone(), watcher::Config::default().labels("app=kube")).boxed();
    let mut streaming = watcher(
        api.clone(),
        watcher::Config::default()
            .labels("app=kube")
            .streaming_lists(),
    )
    .boxed();
    // Let both finish their initial list before anything changes.
    for stream in [&mut classic, &mut streaming] {
        loop {
            match within(20, stream.next()).await.unwrap().unwrap() {
                watcher::Event::InitDone => break,
                watcher::Event::Init => {}
                other => panic!("nothing exists yet: {other:?}"),
            }
        }
    }

    let created = api
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    let err = api
        .create(&PostParams::default(), &cm("one"))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists")),
        other => panic!("unexpected {other}"),
    }

    let list = api
        .list(&ListParams::default().labels("app=kube"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());

    let patched = api
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k": "merged"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["k"], "merged");
    let applied = api
        .patch(
            "two",
            &PatchParams::apply("kube-test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "two", "labels": {"app": "kube"}}, "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.metadata.managed_fields.unwrap()[0]
            .manager
            .as_deref(),
        Some("kube-test")
    );

    api.delete("one", &DeleteParams::default()).await.unwrap();
    let err = api.get("one").await.unwrap_err();
    assert!(matches!(err, kube::Error::Api(s) if s.code == 404));

    // Both watchers see the whole story of "one": created, changed, deleted.
    for (name, stream) in [("classic", &mut classic), ("streaming", &mut streaming)] {
        let mut seen = Vec::new();
        while !seen.contains(&"delete one".to_string()) {
            let ev = within(20, stream.next()).await.unwrap().unwrap();
            match ev {
                watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                    seen.push(format!("apply {}", o.metadata.name.unwrap()))
                }
                watcher::Event::Delete(o) => {
                    seen.push(format!("delete {}", o.metadata.name.unwrap()))
                }
                watcher::Event::Init | watcher::Event::InitDone => {}
            }
        }
        assert!(seen.contains(&"apply two".to_string()), "{name}: {seen:?}");
        assert!(
            seen.iter().filter(|e| *e == "apply one").count() >= 1,
            "{name}: {seen:?}"
        );
    }
    s.stop().await;
}

#[tokio::test]
async fn the_kube_crate_reads_and_watches_metadata_alone() {
    let s = TestServer::start().await;
    let client = client(&s).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    // An Api of PartialObjectMeta asks for metadata alone, in lists and watches.
    let metadata: Api<kube::core::PartialObjectMeta<ConfigMap>> =
        Api::namespaced(client.clone(), "default");
    let mut meta = watcher(metadata, watcher::Config::default().labels("app=kube")).boxed();
    loop {
        match within(20, meta.next()).await.unwrap().unwrap() {
            watcher::Event::InitDone => break,
            watcher::Event::Init => {}
            other => panic!("nothing exists yet: {other:?}"),
        }
    }
    api.create(&PostParams::default(), &cm("m1")).await.unwrap();
    // The event carries the metadata, as a PartialObjectMetadata.
    let seen = loop {
        if let watcher::Event::Apply(o) = within(20, meta.next()).await.unwrap().unwrap() {
            break o;
        }
    };
    assert_eq!(seen.metadata.name.as_deref(), Some("m1"));
    assert_eq!(
        seen.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    let list = api
        .list_metadata(&ListParams::default().labels("app=kube"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].metadata.name.as_deref(), Some("m1"));
    let one = api.get_metadata("m1").await.unwrap();
    assert_eq!(one.metadata.labels.unwrap()["app"], "kube");
    // No data comes with it.
    let raw = s
        .req(
            reqwest::Method::GET,
            "/api/v1/namespaces/default/configmaps/m1",
        )
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .send()
        .await
        .unwrap();
    let v: serde_json::Value = raw.json().await.unwrap();
    assert_eq!(v["kind"], "PartialObjectMetadata");
    assert!(v.get("data").is_none(), "{v}");
    s.stop().await;
}

/// A custom kind as kube-rs users write one: the derive makes its definition, schema
/// included, and a typed client for it.
#[derive(
    kube::CustomResource, serde::Deserialize, serde::Serialize, Clone, Debug, schemars::JsonSchema,
)]
#[kube(
    group = "kube.example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    printcolumn = r#"{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}"#
)]
pub struct WidgetSpec {
    size: i32,
    #[serde(default)]
    label: Option<String>,
}

#[derive(serde::Deserialize, serde::Serialize, Clone, Debug, Default, schemars::JsonSchema)]
pub struct WidgetStatus {
    ready: bool,
}

#[tokio::test]
async fn a_kube_rs_custom_resource_is_defined_and_used_through_its_derive() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::CustomResourceExt;
    let s = TestServer::start().await;
    let client = client(&s).await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds
        .create(&PostParams::default(), &Widget::crd())
        .await
        .unwrap();
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established);

    let widgets: Api<Widget> = Api::namespaced(client.clone(), "default");
    let w = widgets
        .create(
            &PostParams::default(),
            &Widget::new(
                "w1",
                WidgetSpec {
                    size: 3,
                    label: None,
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(w.spec.size, 3);
    let mut events = watcher(widgets.clone(), watcher::Config::default()).boxed();
    let patched = widgets
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert!(patched.status.unwrap().ready);
    let applied = widgets
        .patch(
            "w1",
            &PatchParams::apply("kube-test"),
            &Patch::Apply(json!({
                "apiVersion": "kube.example.com/v1", "kind": "Widget",
                "metadata": {"name": "w1"}, "spec": {"size": 5},
            })),
        )
        .await
        .unwrap();
    assert_eq!(applied.spec.size, 5);
    let listed = widgets.list(&ListParams::default()).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    // The watcher sees it.
    let seen = within(20, async {
        loop {
            if let Some(Ok(watcher::Event::InitApply(w) | watcher::Event::Apply(w))) =
                events.next().await
            {
                return w;
            }
        }
    })
    .await;
    assert_eq!(seen.metadata.name.as_deref(), Some("w1"));
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    s.stop().await;
}
