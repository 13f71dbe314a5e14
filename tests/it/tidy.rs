//! Tidy checks: the written architecture rules, enforced (see ARCHITECTURE.md).

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            (rel, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for (path, text) in sources() {
        assert!(
            text.starts_with("//!"),
            "{path} must open with a `//!` line saying what it owns"
        );
    }
}

#[test]
fn only_the_sled_backend_names_sled() {
    for (path, text) in sources() {
        if path == "src/store/sled_backend.rs" {
            continue;
        }
        assert!(
            !text.contains("sled::"),
            "{path} names sled; only src/store/sled_backend.rs may"
        );
    }
}

#[test]
fn the_store_imports_nothing_else_from_the_crate() {
    for (path, text) in sources() {
        if !path.starts_with("src/store/") {
            continue;
        }
        for line in text.lines() {
            let line = line.trim();
            if line.starts_with("use crate::") {
                assert!(
                    line.starts_with("use crate::store"),
                    "{path}: the store must not depend on other layers: {line}"
                );
            }
        }
    }
}

#[test]
fn no_stubs_are_left_in_the_sources() {
    for (path, text) in sources() {
        for bad in ["todo!(", "unimplemented!("] {
            assert!(!text.contains(bad), "{path} contains {bad}");
        }
    }
}

#[test]
fn controllers_act_only_through_the_client() {
    for (path, text) in sources() {
        if !path.starts_with("src/controller/") {
            continue;
        }
        for bad in ["Registry", "crate::store", "crate::api"] {
            assert!(
                !text.contains(bad),
                "{path} names {bad}: controllers read and write through client::Client, \
                 so they get the same checks as any API client"
            );
        }
    }
}
