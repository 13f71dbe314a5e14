//! Importing images from tarballs, offline: OCI archives (an OCI image layout in a tar, as
//! `skopeo copy … oci-archive:` writes) and docker archives (`docker save`), plain, gzip or
//! zstd. The archive is unpacked into the store's scratch space, then every blob it names
//! is copied into the store with its digest checked, every layer applied, and the images
//! recorded under their names.

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use oci_spec::image::{ImageConfiguration, ImageIndex, ImageManifest, MediaType};
use serde::Deserialize;
use serde_json::json;

use super::layer;
use super::reference;
use super::store::{Image, Layer, Store};
use super::{Error, Result};

/// The containerd annotation that names an image in an index (`docker save` writes it).
const CONTAINERD_NAME: &str = "io.containerd.image.name";
/// The OCI annotation that names a manifest of a layout (a tag or a whole reference).
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// This machine's platform as OCI names it.
pub fn platform() -> (&'static str, &'static str) {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    };
    ("linux", arch)
}

/// Imports every image of the archive `file`; returns them as stored. `base` names the
/// images the archive leaves unnamed or names by a tag only (as `umoci` does): `base`
/// with that tag (or `latest`).
pub fn import(store: &Store, file: &Path, base: Option<&str>) -> Result<Vec<Image>> {
    let base = base
        .map(|b| reference::parse(b).map_err(|why| Error::Invalid(format!("--name: {why}"))))
        .transpose()?;
    let scratch = store.scratch("import");
    fs::create_dir_all(&scratch).map_err(|e| Error::Io {
        context: format!("create {}", scratch.display()),
        source: e,
    })?;
    let result = (|| {
        let f = File::open(file).map_err(|e| Error::Io {
            context: format!("open {}", file.display()),
            source: e,
        })?;
        let unpacked = layer::decompress(f)
            .and_then(|r| tar::Archive::new(r).unpack(&scratch))
            .map_err(|e| Error::Io {
                context: format!("read the archive {}", file.display()),
                source: e,
            });
        unpacked?;
        let source = format!("import {}", file.display());
        if scratch.join("index.json").exists() {
            import_layout(store, &scratch, &source, base.as_ref())
        } else if scratch.join("manifest.json").exists() {
            import_docker(store, &scratch, &source, base.as_ref())
        } else {
            Err(Error::Invalid(format!(
                "{} is neither an OCI archive (no index.json) nor a docker archive (no manifest.json)",
                file.display()
            )))
        }
    })();
    let _ = fs::remove_dir_all(&scratch);
    result
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .map_or_else(|_| String::new(), |t| t.to_string())
}

/// The file of the blob `digest` in an OCI layout at `dir`.
fn layout_blob(dir: &Path, digest: &str) -> Result<PathBuf> {
    let (alg, hex) = digest
        .split_once(':')
        .filter(|(a, h)| {
            !a.is_empty() && !h.is_empty() && !h.contains(['/', '.']) && !a.contains(['/', '.'])
        })
        .ok_or_else(|| Error::Invalid(format!("{digest:?} is no digest")))?;
    Ok(dir.join("blobs").join(alg).join(hex))
}

/// Copies the layout's blob `digest` into the store, checked against its digest, unless
/// the store has it already.
fn copy_blob(store: &Store, dir: &Path, digest: &str) -> Result<()> {
    if store.has_blob(digest) {
        return Ok(());
    }
    let path = layout_blob(dir, digest)?;
    let f = File::open(&path).map_err(|e| Error::Io {
        context: format!("the archive lacks blob {digest}"),
        source: e,
    })?;
    store.write_blob(Some(digest), f)?;
    Ok(())
}

fn parse_err(what: &str) -> impl FnOnce(oci_spec::OciSpecError) -> Error + '_ {
    move |e| Error::Invalid(format!("{what}: {e}"))
}

fn is_index(m: &MediaType) -> bool {
    matches!(m, MediaType::ImageIndex)
        || m.to_string() == "application/vnd.docker.distribution.manifest.list.v2+json"
}

/// The manifests of `index` for this machine: each platform-less one, or the one
/// matching this platform (an index of an image for several platforms).
pub(super) fn pick_for_platform(
    index: &ImageIndex,
    what: &str,
) -> Result<Vec<oci_spec::image::Descriptor>> {
    let (os, arch) = platform();
    let has_platforms = index.manifests().iter().any(|d| d.platform().is_some());
    if !has_platforms {
        return Ok(index.manifests().clone());
    }
    let found: Vec<_> = index
        .manifests()
        .iter()
        .filter(|d| {
            d.platform()
                .as_ref()
                .is_some_and(|p| p.os().to_string() == os && p.architecture().to_string() == arch)
        })
        .cloned()
        .collect();
    if found.is_empty() {
        let offered: Vec<String> = index
            .manifests()
            .iter()
            .filter_map(|d| d.platform().as_ref())
            .map(|p| format!("{}/{}", p.os(), p.architecture()))
            .collect();
        return Err(Error::Invalid(format!(
            "{what} has no image for {os}/{arch} (it has {})",
            offered.join(", ")
        )));
    }
    Ok(found.into_iter().take(1).collect())
}

/// The names a manifest of a layout's index is given: a whole reference it carries, or
/// `base` with the bare tag it carries (or `latest`).
fn names_of(d: &oci_spec::image::Descriptor, base: Option<&reference::Reference>) -> Vec<String> {
    let ann = d.annotations().as_ref();
    let mut tag = None;
    for key in [CONTAINERD_NAME, REF_NAME] {
        let Some(value) = ann.and_then(|a| a.get(key)) else {
            continue;
        };
        // A bare tag (`1.0`) would parse as a repository of that name: only a value that
        // names a repository with a tag, a digest or a registry is a whole reference.
        if value.contains([':', '/', '@']) {
            if let Ok(r) = reference::parse(value) {
                return vec![r.with_default_tag().to_string()];
            }
        } else if tag.is_none() {
            tag = Some(value.clone());
        }
    }
    match base {
        Some(b) => {
            let mut r = b.clone();
            if let Some(t) = tag {
                r.tag = Some(t);
            }
            vec![r.with_default_tag().to_string()]
        }
        None => Vec::new(),
    }
}

fn import_layout(
    store: &Store,
    dir: &Path,
    source: &str,
    base: Option<&reference::Reference>,
) -> Result<Vec<Image>> {
    let index = ImageIndex::from_file(dir.join("index.json")).map_err(parse_err("index.json"))?;
    let mut out = Vec::new();
    for top in index.manifests() {
        let mut names = names_of(top, base);
        let mut chosen = vec![top.clone()];
        // Nested indexes (an image for several platforms): down to this platform's.
        for _ in 0..4 {
            if !is_index(chosen[0].media_type()) {
                break;
            }
            let digest = chosen[0].digest().to_string();
            copy_blob(store, dir, &digest)?;
            let nested = ImageIndex::from_reader(&store.read_blob(&digest)?[..])
                .map_err(parse_err(&format!("index {digest}")))?;
            chosen = pick_for_platform(&nested, &format!("index {digest}"))?;
            if names.is_empty() {
                names = names_of(&chosen[0], base);
            }
        }
        let manifest = chosen[0].digest().to_string();
        out.extend(import_manifest(store, dir, &manifest, names, source)?);
    }
    Ok(out)
}

fn import_manifest(
    store: &Store,
    dir: &Path,
    manifest: &str,
    names: Vec<String>,
    source: &str,
) -> Result<Vec<Image>> {
    copy_blob(store, dir, manifest)?;
    let m = ImageManifest::from_reader(&store.read_blob(manifest)?[..])
        .map_err(parse_err(&format!("manifest {manifest}")))?;
    let config = m.config().digest().to_string();
    copy_blob(store, dir, &config)?;
    let mut layers = Vec::new();
    for d in m.layers() {
        let digest = d.digest().to_string();
        copy_blob(store, dir, &digest)?;
        layers.push((digest, d.media_type().to_string(), d.size()));
    }
    record(store, manifest, &config, layers, names, source)
}

/// Applies the layers and records the image under each of `names` (under its config
/// digest when it has none, as `docker load` keeps an untagged image).
pub(super) fn record(
    store: &Store,
    manifest: &str,
    config: &str,
    layers: Vec<(String, String, u64)>,
    mut names: Vec<String>,
    source: &str,
) -> Result<Vec<Image>> {
    let cfg = ImageConfiguration::from_reader(&store.read_blob(config)?[..])
        .map_err(parse_err(&format!("config {config}")))?;
    let diff_ids = cfg.rootfs().diff_ids();
    if diff_ids.len() != layers.len() {
        return Err(Error::Invalid(format!(
            "config {config} names {} layers, its manifest {}",
            diff_ids.len(),
            layers.len()
        )));
    }
    let layers: Vec<Layer> = layers
        .into_iter()
        .zip(diff_ids)
        .map(|((digest, media_type, size), diff_id)| Layer {
            digest,
            media_type,
            size,
            diff_id: diff_id.clone(),
        })
        .collect();
    for l in &layers {
        store.ensure_layer(l)?;
    }
    if names.is_empty() {
        names.push(config.to_string());
    }
    let stored_at = now();
    let mut out = Vec::new();
    for name in names {
        let img = Image {
            name,
            manifest: manifest.to_string(),
            config: config.to_string(),
            layers: layers.clone(),
            source: source.to_string(),
            stored_at: stored_at.clone(),
        };
        store.put_image(&img)?;
        out.push(img);
    }
    Ok(out)
}

/// One image of a docker archive's `manifest.json`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

/// A file named inside a docker archive, kept inside it.
fn inside(dir: &Path, name: &str) -> Result<PathBuf> {
    let p = Path::new(name);
    if p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return Err(Error::Invalid(format!(
            "the archive's manifest.json names {name:?}, a path outside the archive"
        )));
    }
    Ok(dir.join(p))
}

fn import_docker(
    store: &Store,
    dir: &Path,
    source: &str,
    base: Option<&reference::Reference>,
) -> Result<Vec<Image>> {
    let bytes = fs::read(dir.join("manifest.json")).map_err(|e| Error::Io {
        context: "read manifest.json".into(),
        source: e,
    })?;
    let entries: Vec<DockerEntry> = serde_json::from_slice(&bytes)
        .map_err(|e| Error::Invalid(format!("manifest.json: {e}")))?;
    let mut out = Vec::new();
    for e in entries {
        let open = |name: &str| -> Result<File> {
            let p = inside(dir, name)?;
            File::open(&p).map_err(|err| Error::Io {
                context: format!("the archive lacks {name}"),
                source: err,
            })
        };
        let (config, config_size) = store.write_blob(None, open(&e.config)?)?;
        let mut layers = Vec::new();
        for l in &e.layers {
            let (digest, size) = store.write_blob(None, open(l)?)?;
            layers.push((
                digest,
                "application/vnd.docker.image.rootfs.diff.tar".to_string(),
                size,
            ));
        }
        // The manifest a registry would serve for it, so the image has one like any other.
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config, "size": config_size},
            "layers": layers.iter().map(|(d, _, s)| json!({
                "mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": s,
            })).collect::<Vec<_>>(),
        });
        let (manifest, _) =
            store.write_blob(None, &serde_json::to_vec(&manifest).expect("json")[..])?;
        let names = e
            .repo_tags
            .unwrap_or_default()
            .iter()
            .map(|t| {
                reference::normalize(t).map_err(|why| {
                    Error::Invalid(format!("the archive tags an image {t:?}: {why}"))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let names = match (names.is_empty(), base) {
            (true, Some(b)) => vec![b.clone().with_default_tag().to_string()],
            _ => names,
        };
        out.extend(record(store, &manifest, &config, layers, names, source)?);
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sha2::{Digest as _, Sha256};
    use std::io::Write;

    pub fn digest(b: &[u8]) -> String {
        format!("sha256:{:x}", Sha256::digest(b))
    }

    /// A tar of regular files, as archives and layers are made here.
    pub fn tar_files<'a>(files: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_uid(0);
            h.set_gid(0);
            h.set_mtime(1_700_000_000);
            h.set_mode(0o755);
            h.set_size(data.len() as u64);
            b.append_data(&mut h, path, data).unwrap();
        }
        b.into_inner().unwrap()
    }

    /// A layer tar holding `files`.
    pub fn layer_tar(files: &[(&str, &str)]) -> Vec<u8> {
        tar_files(files.iter().map(|(p, d)| (*p, d.as_bytes())))
    }

    pub fn config_for(diff_ids: &[String]) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "architecture": platform().1, "os": "linux",
            "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }))
        .unwrap()
    }

    /// An OCI archive of one image named `name` whose layers are `layers` (blobs as given:
    /// compressed or not) with these diff IDs; `corrupt` rewrites the first layer's bytes
    /// after its digest was taken.
    pub fn oci_archive(name: &str, layers: &[(Vec<u8>, String)], corrupt: bool) -> Vec<u8> {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut put = |path: &str, data: &[u8]| files.push((path.to_string(), data.to_vec()));
        let diff_ids: Vec<String> = layers.iter().map(|(_, d)| d.clone()).collect();
        let config = config_for(&diff_ids);
        let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
        let mut descs = Vec::new();
        for (i, (bytes, _)) in layers.iter().enumerate() {
            let d = digest(bytes);
            let mut stored = bytes.clone();
            if corrupt && i == 0 {
                stored[0] ^= 0xff;
            }
            put(&blob(&d), &stored);
            descs.push(
                json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                              "digest": d, "size": bytes.len()}),
            );
        }
        put(&blob(&digest(&config)), &config);
        let manifest = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": digest(&config), "size": config.len()},
            "layers": descs,
        }))
        .unwrap();
        put(&blob(&digest(&manifest)), &manifest);
        let index = serde_json::to_vec(&json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": digest(&manifest), "size": manifest.len(),
                           "annotations": {REF_NAME: name}}],
        }))
        .unwrap();
        put("index.json", &index);
        put("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
        tar_files(files.iter().map(|(p, d)| (p.as_str(), d.as_slice())))
    }

    /// A docker archive (`docker save` before Docker 25) of one image tagged `tags`.
    pub fn docker_archive(tags: &[&str], layers: &[Vec<u8>]) -> Vec<u8> {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        let mut put = |path: &str, data: &[u8]| files.push((path.to_string(), data.to_vec()));
        let diff_ids: Vec<String> = layers.iter().map(|l| digest(l)).collect();
        let config = config_for(&diff_ids);
        let config_name = format!("{}.json", digest(&config).trim_start_matches("sha256:"));
        put(&config_name, &config);
        let mut names = Vec::new();
        for (i, l) in layers.iter().enumerate() {
            let name = format!("layer{i}/layer.tar");
            put(&name, l);
            names.push(name);
        }
        let manifest = serde_json::to_vec(
            &json!([{"Config": config_name, "RepoTags": tags, "Layers": names}]),
        )
        .unwrap();
        put("manifest.json", &manifest);
        tar_files(files.iter().map(|(p, d)| (p.as_str(), d.as_slice())))
    }

    fn gzip(b: &[u8]) -> Vec<u8> {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b).unwrap();
        gz.finish().unwrap()
    }

    #[test]
    fn an_oci_archive_with_gzip_and_zstd_layers_is_imported_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let base = layer_tar(&[("bin/hello", "one")]);
        let top = layer_tar(&[("etc/motd", "two")]);
        let archive = oci_archive(
            "registry.example:5000/team/hello:1.0",
            &[
                (gzip(&base), digest(&base)),
                (zstd::stream::encode_all(&top[..], 3).unwrap(), digest(&top)),
            ],
            false,
        );
        // The archive itself compressed, as airgap bundles are.
        let file = dir.path().join("hello.tar.zst");
        fs::write(&file, zstd::stream::encode_all(&archive[..], 3).unwrap()).unwrap();
        let images = import(&store, &file, None).unwrap();
        assert_eq!(images.len(), 1);
        let img = &images[0];
        assert_eq!(img.name, "registry.example:5000/team/hello:1.0");
        assert_eq!(store.image(&img.name).as_ref(), Some(img));
        assert_eq!(img.layers.len(), 2);
        let base_dir = store.ensure_layer(&img.layers[0]).unwrap();
        assert_eq!(
            fs::read_to_string(base_dir.join("bin/hello")).unwrap(),
            "one"
        );
        let top_dir = store.layer_path(&img.layers[1].diff_id).unwrap();
        assert_eq!(fs::read_to_string(top_dir.join("etc/motd")).unwrap(), "two");
        // Importing it again changes nothing and applies nothing anew.
        let again = import(&store, &file, None).unwrap();
        assert_eq!(again[0].layers, img.layers);
        assert_eq!(fs::read_dir(store.root().join("tmp")).unwrap().count(), 0);
    }

    #[test]
    fn a_layout_naming_a_tag_only_takes_the_name_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let l = layer_tar(&[("a", "b")]);
        let file = dir.path().join("umoci.tar");
        fs::write(&file, oci_archive("1.0", &[(l.clone(), digest(&l))], false)).unwrap();
        let unnamed = import(&store, &file, None).unwrap();
        assert_eq!(unnamed[0].name, unnamed[0].config, "kept by its ID");
        let named = import(&store, &file, Some("example/hello")).unwrap();
        assert_eq!(named[0].name, "docker.io/example/hello:1.0");
        let err = import(&store, &file, Some("Bad Name"))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("--name: "), "{err}");
    }

    #[test]
    fn a_docker_archive_is_imported_under_each_tag() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let l = layer_tar(&[("hello", "hi")]);
        let file = dir.path().join("saved.tar.gz");
        fs::write(
            &file,
            gzip(&docker_archive(&["busybox", "example/app:2"], &[l])),
        )
        .unwrap();
        let images = import(&store, &file, None).unwrap();
        let names: Vec<&str> = images.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "docker.io/library/busybox:latest",
                "docker.io/example/app:2"
            ]
        );
        assert_eq!(images[0].config, images[1].config);
        assert!(store.has_blob(&images[0].manifest));
        assert_eq!(store.images().len(), 2);
    }

    #[test]
    fn a_blob_that_is_not_its_digest_is_refused_and_nothing_is_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store")).unwrap();
        let l = layer_tar(&[("x", "y")]);
        let file = dir.path().join("bad.tar");
        fs::write(
            &file,
            oci_archive("bad:1", &[(l.clone(), digest(&l))], true),
        )
        .unwrap();
        let err = import(&store, &file, None).unwrap_err();
        assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
        assert!(store.images().is_empty());
        assert!(!store.has_blob(&digest(&l)));
        assert_eq!(fs::read_dir(store.root().join("tmp")).unwrap().count(), 0);
        // Neither kind of archive: a clear error.
        let file = dir.path().join("neither.tar");
        fs::write(&file, layer_tar(&[("README", "no")])).unwrap();
        let err = import(&store, &file, None).unwrap_err().to_string();
        assert!(err.contains("neither an OCI archive"), "{err}");
    }
}
