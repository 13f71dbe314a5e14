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
        // Test files build their fixtures from a real registry (ARCHITECTURE.md).
        if !path.starts_with("src/controller/") || path.ends_with("/tests.rs") {
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

/// The layer table of ARCHITECTURE.md: each module with the modules it may use.
fn layer_table() -> Vec<(String, Vec<String>)> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md"))
            .unwrap();
    let section = text
        .split("## Who may use whom")
        .nth(1)
        .expect("ARCHITECTURE.md has a \"Who may use whom\" section");
    let names = |cell: &str| -> Vec<String> {
        cell.split(',')
            .filter_map(|c| {
                c.trim()
                    .strip_prefix('`')?
                    .strip_suffix('`')
                    .map(str::to_string)
            })
            .collect()
    };
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').collect();
            let module = names(cells.first()?).pop()?;
            let cell = cells.get(1)?;
            let mut allowed = names(cell);
            if cell.contains("every module") {
                allowed.push("every module".into());
            }
            Some((module, allowed))
        })
        .collect()
}

/// The crate modules a source file names outside its tests.
fn uses(text: &str) -> Vec<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or(text);
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if rest.starts_with('{') {
            // `use crate::{a, b::c}`: every module named in the braces.
            let inner = &rest[1..rest.find('}').unwrap_or(rest.len())];
            for part in inner.split(',') {
                let m: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !m.is_empty() {
                    out.push(m);
                }
            }
        } else if !name.is_empty() {
            out.push(name);
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn modules_use_only_the_layers_architecture_md_allows() {
    let table = layer_table();
    assert!(
        table.len() >= 10,
        "the layer table lists the modules: {table:?}"
    );
    let mut broken = Vec::new();
    for (path, text) in sources() {
        let Some(module) = path
            .strip_prefix("src/")
            .and_then(|p| p.split(['/', '.']).next())
        else {
            continue;
        };
        if matches!(module, "main" | "lib") || path.ends_with("/tests.rs") {
            continue;
        }
        let Some((_, allowed)) = table.iter().find(|(m, _)| m == module) else {
            broken.push(format!("{path}: module {module} is not in the layer table"));
            continue;
        };
        if allowed.iter().any(|a| a == "every module") {
            continue;
        }
        for used in uses(&text) {
            // The crate root's own helpers (`crate::release_freed_memory`) are open to all.
            let is_module = table.iter().any(|(m, _)| *m == used);
            if used != module && is_module && !allowed.contains(&used) {
                broken.push(format!("{path}: {module} must not use {used}"));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "edges ARCHITECTURE.md forbids:\n{}",
        broken.join("\n")
    );
}
