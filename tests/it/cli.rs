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
    let before: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    assert!(
        child.try_wait().unwrap().is_none(),
        "berth serve never became ready: {before:?}"
    );
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "berth serve exited with {status}: {before:?} {rest:?}"
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
    let dir = crate::support::private_dir();
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let before: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    assert!(child.try_wait().unwrap().is_none(), "{before:?}");
    let o = berth(&[
        "migrate",
        "status",
        "--data-dir",
        dir.path().to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{before:?}");
    assert!(
        text(&o).contains("in use by another berth process"),
        "{}",
        text(&o)
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The data directory is berth's alone: a new one is made 0700 with its secrets 0600 and
/// the admin token never in the log; one that others may read, one another user owns and
/// a token planted with a loose mode are each refused with what to do.
#[test]
fn the_data_directory_and_its_secrets_are_berths_alone() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = crate::support::private_dir();
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "serve",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .env("BERTH_LOG", "info")
        .env("NO_COLOR", "1")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let log: Vec<String> = lines
        .by_ref()
        .map(|l| l.unwrap())
        .take_while(|l| !l.contains(" ready"))
        .collect();
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&data), 0o700);
    for secret in ["admin.token", "pki/ca.key", "kubeconfig"] {
        assert_eq!(mode(&data.join(secret)), 0o600, "{secret}");
    }
    let token = std::fs::read_to_string(data.join("admin.token")).unwrap();
    let log = log.join("\n");
    assert!(!log.contains(token.trim()), "{log}");
    assert!(log.contains("admin.token"), "{log}");

    let serve = |data: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_berth"))
            .args([
                "serve",
                "--no-node",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
            ])
            .arg(data)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(!o.status.success(), "{}", text(&o));
        text(&o)
    };
    // A token someone else could have read or written.
    std::fs::set_permissions(
        data.join("admin.token"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let said = serve(&data);
    assert!(
        said.contains("admin.token must be a plain file") && said.contains("mode 0644"),
        "{said}"
    );
    std::fs::set_permissions(
        data.join("admin.token"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    // A serving key others may read.
    let key = dir.path().join("tls.key");
    std::fs::write(&key, "not even a key").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o640)).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_berth"))
        .args([
            "serve",
            "--no-node",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
        ])
        .arg(data.join("ca.crt"))
        .arg("--tls-key")
        .arg(&key)
        .arg("--data-dir")
        .arg(&data)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("tls.key must be a plain file"),
        "{}",
        text(&o)
    );
    // A directory others may enter.
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let said = serve(&data);
    assert!(
        said.contains("has mode 0755") && said.contains("chmod 700"),
        "{said}"
    );
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
    // A directory another user owns.
    if rustix::process::geteuid().is_root() {
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), Some(65534)).unwrap();
        let said = serve(&other);
        assert!(said.contains("is owned by uid 65534"), "{said}");
    }
}
