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

pub(crate) fn spec(pod: &str, name: &str, script: &str) -> ContainerSpec {
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
        mounts: Vec::new(),
        resources: Default::default(),
        pod_resources: Default::default(),
        stdio: Default::default(),
        termination_message: Default::default(),
        rootfs: None,
        sandbox: None,
        etc: None,
    }
}

/// Waits for the exit event of `id`.
async fn exited(events: &mut tokio::sync::broadcast::Receiver<Event>, id: &ContainerId) {
    within(20, async {
        loop {
            if let Event::Exited(e) = events.recv().await.unwrap()
                && &e == id
            {
                return;
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
    let root = crate::support::DataDir::new();
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
    let root = crate::support::DataDir::new();
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
    let root = crate::support::DataDir::new();
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
    let root = crate::support::DataDir::new();
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

/// berth killed between making an instance's directory and recording its spec leaves an
/// empty directory: the next start of that instance starts over instead of failing for
/// ever with "exists already".
#[tokio::test]
async fn a_start_cut_short_before_its_spec_was_recorded_starts_over() {
    let root = crate::support::DataDir::new();
    let rt = runtime(root.path());
    let cut_short = root.path().join("pod-cut/main/0");
    std::fs::create_dir_all(&cut_short).unwrap();
    std::fs::write(cut_short.join(".spec.json.tmp"), "{\"half").unwrap();
    assert!(rt.pod_status("pod-cut").unwrap().is_empty());
    let mut events = rt.events();
    let id = rt.start(&spec("pod-cut", "main", "exit 3")).await.unwrap();
    exited(&mut events, &id).await;
    let st = rt.pod_status("pod-cut").unwrap();
    assert_eq!(st.len(), 1, "{st:?}");
    assert_eq!(st[0].exit_code, Some(3));
    // A recorded instance is another matter: it is never started twice.
    let again = rt.start(&spec("pod-cut", "main", "exit 0")).await;
    assert!(
        again.is_err_and(|e| e.to_string().contains("exists already")),
        "a second start of a recorded instance is refused"
    );
}

#[tokio::test]
async fn a_running_pod_cannot_be_removed() {
    let root = crate::support::DataDir::new();
    let rt = runtime(root.path());
    let id = rt.start(&spec("pod-e", "main", "sleep 100")).await.unwrap();
    let err = rt.remove_pod("pod-e").unwrap_err();
    assert!(err.to_string().contains("still runs"), "{err}");
    rt.stop(&id, Duration::from_secs(5)).await.unwrap();
    rt.remove_pod("pod-e").unwrap();
}

#[tokio::test]
async fn mounts_are_private_to_the_container_and_joined_by_commands_beside_it() {
    let root = crate::support::DataDir::new();
    let rt = runtime(root.path());
    let (volume, target) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(volume.path().join("f"), "inside\n").unwrap();
    let t = target.path().to_str().unwrap().to_string();
    let mut s = spec(
        "pod-m",
        "main",
        &format!("cat {t}/f; touch {t}/ro || exec sleep 7311"),
    );
    s.mounts = vec![berth::runtime::Mount {
        source: volume.path().into(),
        target: target.path().into(),
        read_only: true,
    }];
    s.working_dir = Some(target.path().into());
    let id = rt.start(&s).await.unwrap();
    let log = crate::support::eventually(10, "the file in the log", || async {
        let log = std::fs::read_to_string(rt.log_path(&id)).unwrap_or_default();
        if log.contains(" stdout F inside\n") && log.contains("Read-only file system") {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await;
    assert_eq!(status(&rt, &id).state, State::Running, "{log}");
    // The host does not see the volume; a command joining the container's mounts does,
    // from the working directory inside it.
    assert!(std::fs::read_dir(target.path()).unwrap().next().is_none());
    let pid = status(&rt, &id).pid.unwrap();
    let mut cmd = berth::runtime::command("cat", &[], Some(target.path()));
    cmd.arg("f");
    berth::runtime::join_namespaces(&mut cmd, pid, Some(target.path())).unwrap();
    let out = cmd.output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(out.stdout, b"inside\n");
    rt.stop(&id, Duration::from_secs(1)).await.unwrap();
    rt.remove_pod("pod-m").unwrap();
}

#[tokio::test]
async fn with_cgroups_a_container_is_started_in_its_own_with_its_limits() {
    use berth::runtime::cgroup::{Cgroups, Layout, Placement, Version};
    // A v2 hierarchy faked in a temporary directory: joining is writing a pid.
    let tree = tempfile::tempdir().unwrap();
    let mount = tree.path().join("cg");
    std::fs::create_dir_all(mount.join("agent")).unwrap();
    std::fs::write(mount.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    let mountinfo = format!("30 22 0:26 / {} rw - cgroup2 cgroup2 rw\n", mount.display());
    let layout = Layout::parse(&mountinfo, "0::/agent\n");
    let cgroups = Cgroups::new(&layout, "berth").unwrap();
    let root = crate::support::DataDir::new();
    let rt = ProcessRuntime::open_with_cgroups(
        root.path(),
        Path::new(env!("CARGO_BIN_EXE_berth")),
        Rotation::default(),
        Ok(cgroups),
    )
    .unwrap();
    assert_eq!(rt.limits_unenforced(), None);
    let mut events = rt.events();
    let mut s = spec("pod-cg", "main", "exit 0");
    s.resources.memory_limit_bytes = Some(32 << 20);
    s.resources.cpu_limit_millis = Some(500);
    let id = rt.start(&s).await.unwrap();
    exited(&mut events, &id).await;
    let dir = mount.join("berth/podpod-cg/main-0");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    assert_eq!(read("memory.max"), (32u64 << 20).to_string());
    assert_eq!(read("cpu.max"), "50000 100000");
    // The shim went in to start the container and came back out.
    let placement: Placement =
        berth::runtime::shim::read_record(&root.path().join("pod-cg/main/0"), "cgroup").unwrap();
    assert_eq!(placement.dirs, vec![dir.clone()]);
    assert_eq!(placement.memory, (dir.clone(), Version::V2));
    let shim_pid = read("cgroup.procs");
    let home = std::fs::read_to_string(mount.join("agent/cgroup.procs")).unwrap();
    assert_eq!(shim_pid, home);
    let st = status(&rt, &id);
    assert_eq!((st.exit_code, st.reason), (Some(0), None));

    let unlimited = runtime(root.path());
    assert_eq!(
        unlimited.limits_unenforced().as_deref(),
        Some("the runtime was opened without cgroups")
    );
}
