//! The `berth image` commands: they work on the image store of a data directory itself,
//! beside a running berth or without one (the store's writes are atomic and its blobs
//! and layers immutable, so a second process is safe).

use std::fmt::Write as _;
use std::path::Path;

use super::{Error, Image, Result, Store, archive, reference, store_dir};

/// The name an image is stored under, from what a user types (`busybox`).
pub fn normalize(name: &str) -> Result<String> {
    reference::normalize(name).map_err(Error::Invalid)
}

/// The store of `data_dir`; a data directory made here is berth's alone (mode 0700), as
/// `berth serve` requires of it.
fn open(data_dir: &Path) -> Result<Store> {
    use std::os::unix::fs::DirBuilderExt;
    if !data_dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data_dir)
            .map_err(|source| Error::Io {
                context: format!("create {}", data_dir.display()),
                source,
            })?;
    }
    Store::open(&store_dir(data_dir))
}

/// The images `name` means: the one stored under that name, or, for an image ID (the
/// config digest, whole or a prefix of at least 4 hex digits), every name of that image.
fn find(store: &Store, name: &str) -> Result<Vec<Image>> {
    let hex = name.strip_prefix("sha256:").unwrap_or(name);
    let is_id = hex.len() >= 4 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    if is_id {
        let found: Vec<Image> = store
            .images()
            .into_iter()
            .filter(|i| i.config.trim_start_matches("sha256:").starts_with(hex))
            .collect();
        let ids: std::collections::HashSet<&str> =
            found.iter().map(|i| i.config.as_str()).collect();
        match ids.len() {
            1 => return Ok(found),
            0 if name.starts_with("sha256:") => {
                return Err(Error::NotFound(format!("image {name}")));
            }
            0 => {}
            _ => {
                return Err(Error::Invalid(format!(
                    "{name} is the start of the IDs of {} images: give more of it",
                    ids.len()
                )));
            }
        }
    }
    let full = normalize(name)?;
    match store.image(&full) {
        Some(img) => Ok(vec![img]),
        None => Err(Error::NotFound(format!("image {full}"))),
    }
}

/// Whether an image is kept by its ID only (its archive named it not).
fn unnamed(img: &Image) -> bool {
    img.name == img.config
}

/// Sizes as `docker images` prints them (`4.26MB`, decimal units).
pub fn human_size(bytes: u64) -> String {
    let units = ["B", "kB", "MB", "GB", "TB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1000.0 && u < units.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes}B")
    } else {
        format!("{:.3}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
            + units[u]
    }
}

/// `berth image import FILE…`: one line per image stored.
pub fn import(data_dir: &Path, files: &[std::path::PathBuf], name: Option<&str>) -> Result<String> {
    let store = open(data_dir)?;
    let mut out = String::new();
    for f in files {
        for img in archive::import(&store, f, name)? {
            let _ = writeln!(
                out,
                "imported {} ({}, {})",
                img.name,
                short_id(&img.config),
                human_size(img.size())
            );
            if unnamed(&img) {
                let _ = writeln!(
                    out,
                    "  {} names no image: import it again with --name REPOSITORY to give it one",
                    f.display()
                );
            }
        }
    }
    Ok(out)
}

/// `berth image pull REF`: pulls into the store, with a progress line on a terminal.
pub async fn pull(
    data_dir: &Path,
    reference: &str,
    registries: Option<&Path>,
    creds: Option<&str>,
) -> Result<String> {
    use std::io::IsTerminal;
    let store = open(data_dir)?;
    let registries = match registries {
        Some(f) => super::pull::Registries::load(f).map_err(Error::Invalid)?,
        None => super::pull::Registries::default(),
    };
    let r = super::reference::parse(reference).map_err(Error::Invalid)?;
    let credentials = match creds {
        Some(c) => {
            let (username, password) = c
                .split_once(':')
                .ok_or_else(|| Error::Invalid("--creds takes USER:PASSWORD".to_string()))?;
            vec![super::pull::Credential {
                matches: r.registry.clone(),
                username: username.to_string(),
                password: password.to_string(),
            }]
        }
        None => Vec::new(),
    };
    let progress: Option<super::pull::Progress> = std::io::stderr().is_terminal().then(|| {
        let shown = std::sync::Mutex::new(tokio::time::Instant::now());
        let p: super::pull::Progress = std::sync::Arc::new(move |done: u64, total: u64| {
            let mut last = shown.lock().expect("progress lock");
            if last.elapsed() < std::time::Duration::from_millis(100) && done < total {
                return;
            }
            *last = tokio::time::Instant::now();
            let width = 30u64;
            let filled = (done * width).checked_div(total).unwrap_or(width) as usize;
            eprint!(
                "\r[{}{}] {} / {}   ",
                "=".repeat(filled),
                " ".repeat(width as usize - filled.min(width as usize)),
                human_size(done),
                human_size(total)
            );
        });
        p
    });
    let shown = progress.is_some();
    let puller = super::pull::Puller::new(store, registries);
    let pulled = puller.pull(reference, credentials, progress).await;
    if shown {
        eprintln!();
    }
    let pulled = pulled.map_err(|e| Error::Invalid(format!("pull {reference}: {e}")))?;
    Ok(format!(
        "pulled {} ({}, {}) in {:.1}s, {} fetched\n",
        pulled.image.name,
        short_id(&pulled.image.config),
        human_size(pulled.image.size()),
        pulled.took.as_secs_f64(),
        human_size(pulled.fetched)
    ))
}

fn short_id(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

/// `berth image ls`: a table as `crictl images` prints one.
pub fn list(data_dir: &Path) -> Result<String> {
    let store = open(data_dir)?;
    let mut rows = vec![[
        "IMAGE".to_string(),
        "TAG".to_string(),
        "IMAGE ID".to_string(),
        "SIZE".to_string(),
    ]];
    for img in store.images() {
        let (repo, tag) = match reference::parse(&img.name) {
            _ if unnamed(&img) => ("<none>".into(), "<none>".into()),
            Ok(r) => (r.name(), r.tag.clone().unwrap_or_else(|| "<none>".into())),
            Err(_) => (img.name.clone(), "<none>".into()),
        };
        rows.push([
            repo,
            tag,
            short_id(&img.config).to_string(),
            human_size(img.size()),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for r in rows {
        let line = format!(
            "{:w0$}   {:w1$}   {:w2$}   {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    Ok(out)
}

/// `berth image inspect NAME`: the stored record and the image's config, as JSON.
pub fn inspect(data_dir: &Path, name: &str) -> Result<String> {
    let store = open(data_dir)?;
    let img = find(&store, name)?.remove(0);
    let config: serde_json::Value = serde_json::from_slice(&store.read_blob(&img.config)?)
        .map_err(|e| Error::Invalid(format!("config {}: {e}", img.config)))?;
    let mut v = serde_json::to_value(&img).expect("an image serializes");
    v["size"] = img.size().into();
    v["imageConfig"] = config;
    Ok(serde_json::to_string_pretty(&v).expect("json") + "\n")
}

/// `berth image rm NAME…`: forgets the images (a prune frees their space).
pub fn remove(data_dir: &Path, names: &[String]) -> Result<String> {
    let store = open(data_dir)?;
    let mut out = String::new();
    for name in names {
        for img in find(&store, name)? {
            store.remove_image(&img.name)?;
            let _ = writeln!(out, "deleted {}", img.name);
        }
    }
    let pruned = store.prune(&[])?;
    if pruned.blobs + pruned.layers > 0 {
        let _ = writeln!(out, "freed {}", human_size(pruned.bytes));
    }
    Ok(out)
}

/// `berth image prune`: removes the blobs and layers no image names.
pub fn prune(data_dir: &Path) -> Result<String> {
    let store = open(data_dir)?;
    let p = store.prune(&[])?;
    Ok(format!(
        "removed {} blobs and {} layers, {} freed\n",
        p.blobs,
        p.layers,
        human_size(p.bytes)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_as_docker_prints_them() {
        assert_eq!(human_size(0), "0B");
        assert_eq!(human_size(999), "999B");
        assert_eq!(human_size(4_260_000), "4.26MB");
        assert_eq!(human_size(1_000_000), "1MB");
        assert_eq!(human_size(1_234_567_890), "1.235GB");
    }

    #[test]
    fn the_commands_import_list_inspect_and_remove() {
        use super::archive::tests::{docker_archive, layer_tar};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.tar");
        std::fs::write(
            &file,
            docker_archive(&["example/tool:1.2"], &[layer_tar(&[("bin/tool", "x")])]),
        )
        .unwrap();
        let data = dir.path().join("data");
        let out = import(&data, std::slice::from_ref(&file), None).unwrap();
        assert!(
            out.starts_with("imported docker.io/example/tool:1.2 ("),
            "{out}"
        );
        let ls = list(&data).unwrap();
        let lines: Vec<&str> = ls.lines().collect();
        assert!(lines[0].starts_with("IMAGE "), "{ls}");
        assert!(
            lines[1].starts_with("docker.io/example/tool   1.2   "),
            "{ls}"
        );
        let v: serde_json::Value =
            serde_json::from_str(&inspect(&data, "example/tool:1.2").unwrap()).unwrap();
        assert_eq!(v["imageConfig"]["config"]["Cmd"][0], "/bin/sh");
        assert!(matches!(
            inspect(&data, "example/tool:9"),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(inspect(&data, "Bad:Name"), Err(Error::Invalid(_))));
        let out = remove(&data, &["example/tool:1.2".to_string()]).unwrap();
        assert!(out.contains("deleted docker.io/example/tool:1.2"), "{out}");
        assert!(out.contains("freed"), "{out}");
        assert_eq!(list(&data).unwrap().lines().count(), 1);
    }
}
