//! The `berth` binary driven as a user would: serve and stop it, look at migrations, save
//! and restore snapshots.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn berth(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(args)
        .env("BERTH_LOG", "info")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Starts `berth serve`, waits until the store is ready and stops it with SIGTERM.
fn serve_once(dir: &Path) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .env("BERTH_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = lines
        .by_ref()
        .map(|l| l.unwrap())
        .find(|l| l.contains(" ready"));
    assert!(ready.is_some(), "berth serve never became ready");
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "berth serve exited with {status}: {rest:?}"
    );
    assert!(rest.iter().any(|l| l.contains("shutting down")), "{rest:?}");
}

#[test]
fn migrate_status_snapshot_save_and_restore_work_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_s = data.to_str().unwrap();

    let o = berth(&["migrate", "status", "--data-dir", data_s]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("storage schema version: 0"),
        "{}",
        text(&o)
    );
    assert!(text(&o).contains("0001_default_namespaces"), "{}", text(&o));
    assert!(
        !data.join("store").exists(),
        "status must not create a store"
    );

    serve_once(&data);
    let o = berth(&["migrate", "status", "--data-dir", data_s]);
    assert!(
        text(&o).contains("storage schema version: 1"),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("pending migrations:     none"),
        "{}",
        text(&o)
    );

    let snap = dir.path().join("cluster.snap");
    let o = berth(&[
        "snapshot",
        "save",
        snap.to_str().unwrap(),
        "--data-dir",
        data_s,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // At least the four default namespaces and the admin token (controllers may have
    // added service accounts before the server stopped).
    let revision: u64 = text(&o)
        .split("at revision ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no revision in {}", text(&o)));
    assert!(revision >= 5, "{}", text(&o));

    let restored = dir.path().join("restored");
    let o = berth(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    // The restored directory serves, and is up to date.
    serve_once(&restored);
    let o = berth(&[
        "migrate",
        "status",
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(
        text(&o).contains("storage schema version: 1"),
        "{}",
        text(&o)
    );

    // Restoring over a store is refused with advice.
    let o = berth(&[
        "snapshot",
        "restore",
        snap.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("already holds a store"), "{}", text(&o));

    // Garbage is not a snapshot.
    let junk = dir.path().join("junk");
    std::fs::write(&junk, b"hello").unwrap();
    let o = berth(&[
        "snapshot",
        "restore",
        junk.to_str().unwrap(),
        "--data-dir",
        dir.path().join("x").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(text(&o).contains("not a berth snapshot"), "{}", text(&o));
}

#[test]
fn a_data_directory_in_use_is_refused_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    assert!(
        lines
            .by_ref()
            .map(|l| l.unwrap())
            .any(|l| l.contains(" ready"))
    );
    let o = berth(&[
        "migrate",
        "status",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("in use by another berth process"),
        "{}",
        text(&o)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
