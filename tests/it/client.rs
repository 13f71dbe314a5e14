//! berth's own client over HTTPS against a real server: the same operations and errors as
//! the in-process transport, watches, the watcher, bindings and namespace finalization.

use berth::client::informer::{Change, Informer};
use berth::client::watcher::{Event as WatcherEvent, Watcher};
use berth::client::{Client, DeleteParams, Event, ListParams, Patch, WatchParams};
use berth::registry::{Kind, catalog};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{TestServer, eventually, within};

fn client(s: &TestServer) -> Client {
    Client::http(&s.url, &s.ca_pem, &s.token).unwrap()
}

#[tokio::test]
async fn http_client_creates_reads_patches_and_deletes_with_kubernetes_errors() {
    let s = TestServer::start().await;
    let c = client(&s);
    let cms = catalog::of(Kind::ConfigMap);
    let cm = json!({"metadata": {"name": "a", "labels": {"app": "x"}}, "data": {"k": "v"}});
    let made = c.create(cms, Some("default"), &cm).await.unwrap();
    assert_eq!(made["kind"], "ConfigMap");
    let again = c.create(cms, Some("default"), &cm).await.unwrap_err();
    assert!(again.is_already_exists(), "{again:?}");
    let got = c.get(cms, Some("default"), "a").await.unwrap();
    assert_eq!(got["data"]["k"], "v");
    let list = c
        .list(
            cms,
            Some("default"),
            &ListParams {
                label_selector: Some("app=x".into()),
                ..ListParams::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0]["kind"], "ConfigMap");
    let patched = c
        .patch(
            cms,
            Some("default"),
            "a",
            &Patch::Merge(json!({"data": {"k": "w"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched["data"]["k"], "w");
    // A stale resourceVersion is a conflict.
    let mut stale = got.clone();
    stale["data"]["k"] = json!("z");
    assert!(c.update(cms, &stale).await.unwrap_err().is_conflict());
    let bad = json!({"metadata": {"name": "Not_Valid"}});
    let invalid = c.create(cms, Some("default"), &bad).await.unwrap_err();
    assert!(
        matches!(invalid, berth::client::Error::Invalid(_)),
        "{invalid:?}"
    );
    c.delete(cms, Some("default"), "a", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        c.get(cms, Some("default"), "a")
            .await
            .unwrap_err()
            .is_not_found()
    );
    let wrong = Client::http(&s.url, &s.ca_pem, "not-a-token").unwrap();
    let denied = wrong.get(cms, Some("default"), "a").await.unwrap_err();
    assert!(
        matches!(denied, berth::client::Error::Unauthorized(_)),
        "{denied:?}"
    );
}

#[tokio::test]
async fn http_watch_streams_changes_from_a_revision() {
    let s = TestServer::start_with(|c| c.run_controllers = false).await;
    let c = client(&s);
    let cms = catalog::of(Kind::ConfigMap);
    let made = c
        .create(cms, Some("default"), &json!({"metadata": {"name": "w"}}))
        .await
        .unwrap();
    let rv = made["metadata"]["resourceVersion"].as_str().unwrap();
    let mut w = c
        .watch(
            cms,
            Some("default"),
            &WatchParams {
                resource_version: rv.into(),
                ..WatchParams::default()
            },
        )
        .await
        .unwrap();
    c.patch(
        cms,
        Some("default"),
        "w",
        &Patch::Merge(json!({"data": {"a": "1"}})),
    )
    .await
    .unwrap();
    match within(10, w.next()).await.unwrap().unwrap() {
        Event::Modified(o) => assert_eq!(o["data"]["a"], "1"),
        other => panic!("expected MODIFIED, got {other:?}"),
    }
}

#[tokio::test]
async fn http_watch_from_compacted_history_is_gone_and_the_watcher_lists_again() {
    // Without controllers: only the test's ConfigMaps are in the namespace.
    let s = TestServer::start_with(|c| {
        c.run_controllers = false;
        c.store.retain_events = 2;
        c.store.retain_for = std::time::Duration::ZERO;
        c.store.compact_every = std::time::Duration::from_millis(20);
    })
    .await;
    let c = client(&s);
    let cms = catalog::of(Kind::ConfigMap);
    for i in 0..6 {
        c.create(
            cms,
            Some("default"),
            &json!({"metadata": {"name": format!("c{i}")}}),
        )
        .await
        .unwrap();
    }
    let params = WatchParams {
        resource_version: "2".into(),
        ..WatchParams::default()
    };
    eventually(20, "a watch from revision 2 is Gone", || async {
        match c.watch(cms, Some("default"), &params).await {
            Err(berth::client::Error::Gone(_)) => Ok(()),
            Err(e) => panic!("expected Gone, got {e:?}"),
            Ok(_) => Err("the watch started".to_string()),
        }
    })
    .await;
    // The watcher answers a 410 with a fresh list, then follows changes from there.
    let mut w = Watcher::from_revision(c.clone(), cms, Some("default"), ListParams::default(), "2");
    match within(10, w.next()).await {
        WatcherEvent::Restarted(items) => assert_eq!(items.count(), 6),
        other => panic!("expected a fresh list, got {other:?}"),
    }
    c.create(
        cms,
        Some("default"),
        &json!({"metadata": {"name": "later"}}),
    )
    .await
    .unwrap();
    // With two events retained, other writes (the node's lease, its status) may compact
    // the list's revision before the new watch starts: then the watcher lists again,
    // and the new object is in that list.
    match within(10, w.next()).await {
        WatcherEvent::Applied(o) => assert_eq!(o["metadata"]["name"], "later"),
        WatcherEvent::Restarted(items) => {
            let names: Vec<Value> = items.map(|o| o["metadata"]["name"].clone()).collect();
            assert!(names.contains(&json!("later")), "{names:?}");
        }
        other => panic!("expected the new object, got {other:?}"),
    }
}

#[tokio::test]
async fn an_informer_over_http_follows_changes() {
    let s = TestServer::start().await;
    let c = client(&s);
    let cms = catalog::of(Kind::ConfigMap);
    c.create(
        cms,
        Some("default"),
        &json!({"metadata": {"name": "before"}}),
    )
    .await
    .unwrap();
    let inf = Informer::new(cms);
    let deleted = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let d = deleted.clone();
    inf.on_change(move |ch| {
        if let Change::Deleted(o) = ch {
            d.lock()
                .unwrap()
                .push(o["metadata"]["name"].as_str().unwrap().to_string());
        }
    });
    let cancel = CancellationToken::new();
    let task = tokio::spawn(inf.clone().run(c.clone(), cancel.clone()));
    within(10, inf.synced()).await;
    assert!(inf.get("default/before").is_some());
    c.create(
        cms,
        Some("default"),
        &json!({"metadata": {"name": "after"}}),
    )
    .await
    .unwrap();
    c.delete(cms, Some("default"), "before", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        10,
        "the informer sees the create and the delete",
        || async {
            match (inf.get("default/after"), inf.get("default/before")) {
                (Some(_), None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(*deleted.lock().unwrap(), ["before"]);
    cancel.cancel();
    task.await.unwrap();
}

#[tokio::test]
async fn binding_sets_the_node_once_and_finalize_ends_a_namespace() {
    let s = TestServer::start().await;
    let c = client(&s);
    let pods = catalog::of(Kind::Pod);
    let pod =
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}});
    c.create(pods, Some("default"), &pod).await.unwrap();
    c.bind("default", "p", "node-1").await.unwrap();
    let bound = c.get(pods, Some("default"), "p").await.unwrap();
    assert_eq!(bound["spec"]["nodeName"], "node-1");
    let scheduled = berth::types::condition(&bound, "PodScheduled").unwrap();
    assert_eq!(scheduled["status"], "True");
    let twice = c.bind("default", "p", "node-2").await.unwrap_err();
    assert!(twice.is_conflict(), "{twice:?}");

    let nss = catalog::of(Kind::Namespace);
    c.create(nss, None, &json!({"metadata": {"name": "going"}}))
        .await
        .unwrap();
    // Namespace spec finalizers cannot be changed by a plain update.
    let mut ns = c.get(nss, None, "going").await.unwrap();
    ns["spec"]["finalizers"] = json!([]);
    let kept = c.update(nss, &ns).await.unwrap();
    assert_eq!(kept["spec"]["finalizers"], json!(["kubernetes"]));
    let mut ns: Value = c
        .delete(nss, None, "going", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(ns["status"]["phase"], "Terminating");
    ns["spec"]["finalizers"] = json!([]);
    // The namespace controller may finish first; both ends are the same.
    match c.finalize_namespace(&ns).await {
        Ok(_) => {}
        Err(e) => assert!(e.is_not_found(), "{e:?}"),
    }
    assert!(c.get(nss, None, "going").await.unwrap_err().is_not_found());
}

#[tokio::test]
async fn the_typed_interface_round_trips_k8s_openapi_objects() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let s = TestServer::start().await;
    let c = client(&s);
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some("typed".into());
    cm.metadata.namespace = Some("default".into());
    cm.data = Some([("k".to_string(), "v".to_string())].into());
    let made: ConfigMap = c.create_as(&cm).await.unwrap();
    assert!(made.metadata.uid.is_some());
    let got: ConfigMap = c.get_as(Some("default"), "typed").await.unwrap();
    assert_eq!(got.data.unwrap()["k"], "v");
    let all: Vec<ConfigMap> = c
        .list_as(Some("default"), &ListParams::default())
        .await
        .unwrap();
    assert!(
        all.iter()
            .any(|m| m.metadata.name.as_deref() == Some("typed"))
    );
    c.delete(
        berth::client::resource_of::<ConfigMap>(),
        Some("default"),
        "typed",
        &DeleteParams::default(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_reconnecting_client_waits_out_a_server_restart() {
    let s = TestServer::start().await;
    let cms = catalog::of(Kind::ConfigMap);
    let plain = client(&s);
    let patient = client(&s).reconnecting(std::time::Duration::from_secs(30));
    let addr = s.url.trim_start_matches("https://").to_string();
    let dir = s.stop().await;
    // Down: a plain client fails at once; a reconnecting one keeps trying, and its
    // create lands once the server is back on the same address.
    let refused = plain.get(cms, Some("default"), "x").await.unwrap_err();
    assert!(
        matches!(refused, berth::client::Error::Transport(_)),
        "{refused:?}"
    );
    let cm = json!({"metadata": {"name": "after"}, "data": {"k": "v"}});
    let pending = tokio::spawn(async move { patient.create(cms, Some("default"), &cm).await });
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert!(!pending.is_finished(), "the create waits for the server");
    let s = TestServer::start_at(dir, &addr, |_| {}).await;
    let made = within(20, pending).await.unwrap().unwrap();
    assert_eq!(made["metadata"]["name"], "after");
    let got = client(&s).get(cms, Some("default"), "after").await.unwrap();
    assert_eq!(got["metadata"]["uid"], made["metadata"]["uid"]);
    s.stop().await;
}
