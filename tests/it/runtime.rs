//! The process runtime with the real `berth shim`: containers as process groups, exit
//! codes and signals, graceful and forced stops, logs, and adoption after the runtime
//! (berth) goes away while containers run.

use std::path::Path;
use std::time::Duration;

use berth::runtime::process::ProcessRuntime;
use berth::runtime::shim::Rotation;
use berth::runtime::{ContainerId, ContainerSpec, Event, Runtime, State};

use crate::support::within;

fn runtime(root: &Path) -> ProcessRuntime {
    ProcessRuntime::open(
        root,
        Path::new(env!("CARGO_BIN_EXE_berth")),
        Rotation::default(),
    )
    .unwrap()
}

fn spec(pod: &str, name: &str, script: &str) -> ContainerSpec {
    ContainerSpec {
        pod_uid: pod.into(),
        pod_name: "p".into(),
        pod_namespace: "default".into(),
        name: name.into(),
        attempt: 0,
        hash: "h1".into(),
        image: "busybox".into(),
        argv: vec!["sh".into(), "-c".into(), script.into()],
        env: vec![("GREETING".into(), "hello".into())],
        working_dir: None,
        stdio: Default::default(),
    }
}

/// Waits for the exit event of `id`.
async fn exited(events: &mut tokio::sync::broadcast::Receiver<Event>, id: &ContainerId) {
    within(20, async {
        loop {
            if let Event::Exited(e) = events.recv().await.unwrap() {
                if &e == id {
                    return;
                }
            }
        }
    })
    .await;
}

fn status(rt: &ProcessRuntime, id: &ContainerId) -> berth::runtime::ContainerStatus {
    rt.pod_status(&id.pod_uid)
        .unwrap()
        .into_iter()
        .find(|s| &s.id == id)
        .unwrap()
}

#[tokio::test]
async fn a_container_runs_with_its_environment_and_its_exit_code_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let rt = runtime(root.path());
    let mut events = rt.events();
    let id = rt
        .start(&spec(
            "pod-a",
            "main",
            "echo $GREETING; echo oops >&2; pwd; exit 7",
        ))
        .await
        .unwrap();
    exited(&mut events, &id).await;
    let s = status(&rt, &id);
    assert_eq!(
        (s.state, s.exit_code, s.signal),
        (State::Exited, Some(7), None)
    );
    assert!(s.started_at.is_some() && s.finished_at.is_some());
    let log = std::fs::read_to_string(rt.log_path(&id)).unwrap();
    assert!(log.contains(" stdout F hello\n"), "{log}");
    assert!(log.contains(" stderr F oops\n"), "{log}");
    assert!(log.contains(" stdout F /\n"), "{log}");
    // The pod's records go once nothing runs.
    rt.remove_pod("pod-a").unwrap();
    assert!(rt.pods().unwrap().is_empty());
}

#[tokio::test]
async fn stop_sends_sigterm_then_sigkill_after_the_grace_period() {
    let root = tempfile::tempdir().unwrap();
    let rt = runtime(root.path());
    let polite = rt
        .start(&spec("pod-b", "polite", "sleep 100"))
        .await
        .unwrap();
    let stubborn = rt
        .start(&spec(
            "pod-b",
            "stubborn",
            "trap '' TERM; echo ready; while :; do sleep 1; done",
        ))
        .await
        .unwrap();
    assert_eq!(status(&rt, &polite).state, State::Running);
    rt.stop(&polite, Duration::from_secs(10)).await.unwrap();
    let s = status(&rt, &polite);
    assert_eq!(
        (s.state, s.signal, s.exit_code),
        (State::Exited, Some(15), Some(143))
    );
    // Wait until the trap is set before testing it.
    crate::support::eventually(10, "the stubborn container is ready", || async {
        let log = std::fs::read_to_string(rt.log_path(&stubborn)).unwrap_or_default();
        if log.contains("ready") {
            Ok(())
        } else {
            Err(log)
        }
    })
    .await;
    rt.stop(&stubborn, Duration::from_millis(300))
        .await
        .unwrap();
    let s = status(&rt, &stubborn);
    assert_eq!(
        (s.state, s.signal, s.exit_code),
        (State::Exited, Some(9), Some(137))
    );
    assert!(rt.remove_pod("pod-b").is_ok());
}

#[tokio::test]
async fn a_command_that_does_not_exist_is_reported_not_hidden() {
    let root = tempfile::tempdir().unwrap();
    let rt = runtime(root.path());
    let mut events = rt.events();
    let mut s = spec("pod-c", "missing", "");
    s.argv = vec!["/no/such/program".into()];
    let id = rt.start(&s).await.unwrap();
    exited(&mut events, &id).await;
    let st = status(&rt, &id);
    assert_eq!(st.exit_code, Some(128));
    assert!(st.error.unwrap().contains("/no/such/program"));
    let mut none = spec("pod-c", "nothing", "");
    none.argv.clear();
    let err = rt.start(&none).await.unwrap_err();
    assert!(err.to_string().contains("no command"), "{err}");
}

#[tokio::test]
async fn running_containers_are_adopted_by_the_next_runtime() {
    let root = tempfile::tempdir().unwrap();
    let id;
    let pid;
    {
        let first = runtime(root.path());
        id = first
            .start(&spec("pod-d", "main", "sleep 100"))
            .await
            .unwrap();
        pid = status(&first, &id).pid.unwrap();
    }
    // A new runtime on the same state (berth restarted) finds the same process running.
    let second = runtime(root.path());
    let s = status(&second, &id);
    assert_eq!((s.state, s.pid), (State::Running, Some(pid)));
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    // And it learns of its exit without having started it.
    let mut events = second.events();
    second.stop(&id, Duration::from_secs(10)).await.unwrap();
    exited(&mut events, &id).await;
    assert_eq!(status(&second, &id).signal, Some(15));
    assert!(second.remove_pod("pod-d").is_ok());
}

#[tokio::test]
async fn a_running_pod_cannot_be_removed() {
    let root = tempfile::tempdir().unwrap();
    let rt = runtime(root.path());
    let id = rt.start(&spec("pod-e", "main", "sleep 100")).await.unwrap();
    let err = rt.remove_pod("pod-e").unwrap_err();
    assert!(err.to_string().contains("still runs"), "{err}");
    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    rt.remove_pod("pod-e").unwrap();
}
