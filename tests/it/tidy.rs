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

/// Every source file of `src/` as written: `(path from the package root, text)`.
fn raw_sources() -> Vec<(String, String)> {
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

/// Every source file of `src/` without its `#[cfg(test)]` items: the code the rules hold
/// for, read to its end.
fn sources() -> Vec<(String, String)> {
    raw_sources()
        .into_iter()
        .map(|(path, text)| {
            let code = without_test_items(&text);
            (path, code)
        })
        .collect()
}

/// The byte after the end of the item that starts at `from`: its matching `}` or, for an
/// item without a body, its `;`. Skips strings, chars and comments.
fn item_end(text: &str, from: usize) -> usize {
    let b = text.as_bytes();
    let mut depth = 0usize;
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'r' if matches!(b.get(i + 1), Some(b'#') | Some(b'"'))
                && !b[i.saturating_sub(1)].is_ascii_alphanumeric() =>
            {
                // A raw string: r"…", r#"…"#, …
                let mut j = i + 1;
                let mut hashes = 0;
                while b.get(j) == Some(&b'#') {
                    hashes += 1;
                    j += 1;
                }
                if b.get(j) == Some(&b'"') {
                    let close: Vec<u8> = std::iter::once(b'"')
                        .chain(std::iter::repeat_n(b'#', hashes))
                        .collect();
                    j += 1;
                    while j < b.len() && !b[j..].starts_with(&close) {
                        j += 1;
                    }
                    i = j + close.len() - 1;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            // A char literal ('{', '\'', '\\'), not a lifetime ('a).
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// `text` without the items marked `#[cfg(test)]` (test modules, helpers, imports).
fn without_test_items(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = 0;
    while let Some(at) = text[rest..].find("#[cfg(test)]") {
        let start = rest + at;
        out.push_str(&text[rest..start]);
        rest = item_end(text, start + "#[cfg(test)]".len());
    }
    out.push_str(&text[rest..]);
    out
}

#[test]
fn test_items_are_cut_out_to_their_end_and_no_further() {
    let text = "fn a() {}\n#[cfg(test)]\nuse crate::x;\nfn b() { let s = \"}\"; let c = '{'; }\n\
                #[cfg(test)]\nmod tests {\n fn t() { let r = r#\"{\"#; }\n}\nfn c() {}\n";
    let code = without_test_items(text);
    assert!(code.contains("fn a()") && code.contains("fn b()") && code.contains("fn c()"));
    assert!(
        !code.contains("crate::x") && !code.contains("fn t()"),
        "{code}"
    );
}

#[test]
fn every_source_file_opens_with_a_module_doc() {
    for (path, text) in raw_sources() {
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

/// The first segment of each path of a `use` group `{a::{b, c}, d as e, f}` that starts
/// at `group` (just after its `{`): here `a`, `d`, `f`.
fn group_heads(group: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut item = String::new();
    for c in group.chars() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut item));
                continue;
            }
            _ => {}
        }
        if depth == 0 || item.is_empty() {
            item.push(c);
        }
    }
    out.push(item);
    out.iter()
        .map(|i| {
            i.trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|m| !m.is_empty() && m != "self")
        .collect()
}

/// The crate modules a source file's code (tests cut out) names.
fn uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            out.extend(group_heads(group));
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[test]
fn nested_use_groups_are_followed() {
    assert_eq!(
        uses(
            "use crate::{api::{a, b::{c}}, store as s, types::{self}};\nfn f() { crate::node::x(); }"
        ),
        ["api", "node", "store", "types"]
    );
}

#[test]
fn anyhow_is_only_for_main() {
    for (path, code) in sources() {
        if path != "src/main.rs" {
            assert!(
                !code.contains("anyhow"),
                "{path} uses anyhow: a layer has its own error enum (thiserror); anyhow is only for main.rs"
            );
        }
    }
}

#[test]
fn the_api_routes_by_descriptor_not_by_kind() {
    // A resource's kind (`res.kind`, `Kind::…` in a comparison or a match) is the
    // registry's business: the API edge reads the descriptor (its subresources, verbs
    // and strategy). Naming a kind to look up its descriptor (`catalog::of`) is fine.
    // The protobuf codec and HTTP/2 framing have kinds of their own (a field's wire
    // type, a frame's type).
    for (path, code) in sources() {
        if !path.starts_with("src/api/") || path.contains("protobuf") || path.contains("http2") {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            let names_kind = line
                .match_indices("Kind::")
                .any(|(i, _)| !line[..i].ends_with("Error"));
            let reads_kind = line.match_indices(".kind").any(|(i, _)| {
                let after = line[i + ".kind".len()..].chars().next();
                !after.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '(')
            });
            let branch = (names_kind || reads_kind)
                && ["==", "!=", "=>", "matches!", "if let", "match ", " | "]
                    .iter()
                    .any(|b| line.contains(b));
            assert!(
                !branch,
                "{path}:{}: a branch on a resource's kind in the API: route by the descriptor instead\n{line}",
                n + 1
            );
        }
    }
}

#[test]
fn controllers_are_wired_by_the_builder() {
    // ARCHITECTURE.md, the controllers: the builder (controller::runtime) registers the
    // handlers, waits for the caches and runs the workers; a controller only says what
    // it watches. Tasks that are not a controller's loop may still be spawned.
    let allowed_spawns = ["src/controller/rootca.rs", "src/controller/custom.rs"];
    for (path, code) in sources() {
        if !path.starts_with("src/controller/") || path == "src/controller/runtime.rs" {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            let wires_by_hand = line.contains("synced(&[")
                || line.contains("Work {")
                || (line.contains("sup.spawn(") && !allowed_spawns.contains(&path.as_str()));
            assert!(
                !wires_by_hand,
                "{path}:{}: a controller wired by hand: use controller::runtime::Controller\n{line}",
                n + 1
            );
        }
    }
}

#[test]
fn json_accessors_are_written_once() {
    // One accessor module for what stays JSON (types::json), not a copy per file.
    for (path, code) in sources() {
        for name in ["fn str_at", "fn int_at(obj: &Value", "fn bool_at"] {
            assert!(
                path == "src/types/json.rs" || !code.contains(name),
                "{path}: its own `{name}`: use crate::types::json"
            );
        }
    }
}

#[test]
fn no_hand_written_source_file_is_over_1500_lines() {
    // One idea per file: a file this long holds several; split it along them. Files a
    // script generates say so in their opening comment and are exempt.
    for (path, text) in raw_sources() {
        let opening: String = text.lines().take(4).collect();
        if opening.contains("Generated by") {
            continue;
        }
        let lines = text.lines().count();
        assert!(
            lines <= 1500,
            "{path}: {lines} lines; split it along its ideas"
        );
    }
}

#[test]
fn no_queue_is_unbounded() {
    // ARCHITECTURE.md, rule 4: a slow consumer must not make memory grow without end.
    for (path, code) in sources() {
        if path.ends_with("/tests.rs") {
            continue;
        }
        for (n, line) in code.lines().enumerate() {
            assert!(
                !line.contains("unbounded_channel") && !line.contains("UnboundedReceiver"),
                "{path}:{}: an unbounded queue: bound it, or coalesce what waits by key\n{line}",
                n + 1
            );
        }
    }
}

#[test]
fn the_integration_tests_are_one_binary() {
    // style.md, 14: one integration-test binary, `tests/it/`, for faster builds.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert_eq!(
        manifest.matches("[[test]]").count(),
        1,
        "one [[test]] target"
    );
    assert!(manifest.contains("path = \"tests/it/main.rs\""));
    for entry in std::fs::read_dir(root.join("tests")).unwrap() {
        let path = entry.unwrap().path();
        assert!(
            path.extension().is_none_or(|e| e != "rs"),
            "{}: a test binary of its own; put it in tests/it/",
            path.display()
        );
    }
}

#[test]
fn every_unsafe_block_says_why_it_is_sound() {
    for (path, code) in sources() {
        let lines: Vec<&str> = code.lines().collect();
        for (n, line) in lines.iter().enumerate() {
            if line.contains("unsafe {") {
                let before = &lines[n.saturating_sub(4)..n];
                assert!(
                    before.iter().any(|l| l.contains("// SAFETY:")),
                    "{path}:{}: an unsafe block without a `// SAFETY:` comment just above it",
                    n + 1
                );
            }
        }
    }
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
