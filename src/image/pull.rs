//! Pulls over the OCI distribution API, through the `oci-client` crate (the ORAS
//! project's client: the token flow of Docker Hub and other registries, basic auth,
//! manifests and blobs as streams). berth adds what a node needs around it:
//!
//! - the node's registries file ([`Registries`], the format of k3s's `registries.yaml`):
//!   mirrors tried in order before the origin, plain-HTTP and self-signed registries
//!   with their CA, credentials per registry; a registry on loopback is plain HTTP
//!   when HTTPS fails there, as Docker allows, with no configuration;
//! - credentials from `imagePullSecrets` ([`Credential`], both `kubernetes.io/dockerconfigjson`
//!   and the older `kubernetes.io/dockercfg`), matched to a registry as the kubelet does;
//! - image indexes resolved to this machine's platform; OCI and Docker schema-2 manifests;
//! - every blob streamed into the store (never held whole in memory) and trusted only
//!   once its digest matched: a registry that dies, a wrong digest or a full disk leaves
//!   nothing half-written that a later pull would take;
//! - layers fetched in parallel, and one pull shared by everyone who wants the same
//!   image at once ([`Puller::pull`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use futures_util::future::{BoxFuture, FutureExt, Shared};
use futures_util::{StreamExt, TryStreamExt};
use oci_client::client::{Certificate, CertificateEncoding, ClientConfig, ClientProtocol};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference as OciReference, RegistryOperation};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::reference::{self, Reference};
use super::{Image, Store};

/// Layers of one image fetched at once.
const PARALLEL_LAYERS: usize = 3;
/// Chunks of a blob in flight between the network and the disk.
const CHUNKS_IN_FLIGHT: usize = 16;

/// The manifests berth reads.
const ACCEPT: &[&str] = &[
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
];

/// The node's registries file, as k3s's `registries.yaml`:
///
/// ```yaml
/// mirrors:
///   docker.io:
///     endpoint: ["https://mirror.example.com:5000", "http://10.0.0.2:5000"]
/// configs:
///   mirror.example.com:5000:
///     auth: {username: pull, password: secret}
///     tls: {ca_file: /etc/berth/mirror-ca.crt}
/// ```
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Registries {
    #[serde(default)]
    mirrors: BTreeMap<String, MirrorFile>,
    #[serde(default)]
    configs: BTreeMap<String, HostConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct MirrorFile {
    #[serde(default)]
    endpoint: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct HostConfig {
    auth: Option<AuthFile>,
    tls: Option<TlsFile>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct AuthFile {
    username: Option<String>,
    password: Option<String>,
    /// base64 of `username:password`, as in a docker config.
    auth: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct TlsFile {
    ca_file: Option<PathBuf>,
    #[serde(default)]
    insecure_skip_verify: bool,
}

/// One place to pull from: a mirror or the origin.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    /// `host[:port]`.
    host: String,
    plain_http: bool,
}

impl Endpoint {
    /// `https://host:port`, `http://host:port` or `host:port` (HTTPS).
    fn parse(s: &str) -> Result<Endpoint, String> {
        let (plain_http, rest) = match s.split_once("://") {
            Some(("http", rest)) => (true, rest),
            Some(("https", rest)) => (false, rest),
            Some((scheme, _)) => {
                return Err(format!(
                    "mirror endpoint {s:?}: scheme {scheme:?} is neither http nor https"
                ));
            }
            None => (false, s),
        };
        let host = rest.trim_end_matches('/').trim_end_matches("/v2");
        if host.is_empty() || host.contains('/') {
            return Err(format!(
                "mirror endpoint {s:?}: give a scheme and host[:port] (https://mirror.example.com:5000)"
            ));
        }
        Ok(Endpoint {
            host: host.to_string(),
            plain_http,
        })
    }

    fn display(&self) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}", self.host)
    }
}

impl Registries {
    /// Reads and checks a registries file.
    pub fn load(path: &Path) -> Result<Registries, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("read the registries file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("registries file {}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Registries, String> {
        let r: Registries = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
        for m in r.mirrors.values() {
            for e in &m.endpoint {
                Endpoint::parse(e)?;
            }
        }
        for (host, c) in &r.configs {
            if let Some(ca) = c.tls.as_ref().and_then(|t| t.ca_file.as_ref()) {
                std::fs::read(ca)
                    .map_err(|e| format!("configs.{host}.tls.ca_file {}: {e}", ca.display()))?;
            }
        }
        Ok(r)
    }

    /// Where `r` is pulled from, in order: its registry's mirrors (or those of `*`),
    /// then the registry itself.
    fn endpoints(&self, r: &Reference) -> Vec<Endpoint> {
        let mirrors = self
            .mirrors
            .get(&r.registry)
            .or_else(|| self.mirrors.get("*"));
        let mut out: Vec<Endpoint> = mirrors
            .into_iter()
            .flat_map(|m| &m.endpoint)
            .filter_map(|e| Endpoint::parse(e).ok())
            .collect();
        let origin = Endpoint {
            host: r.registry.clone(),
            plain_http: false,
        };
        if !out.contains(&origin) {
            let configured = self.configs.contains_key(&r.registry);
            out.push(origin.clone());
            // As Docker: a registry on loopback may speak plain HTTP.
            if r.is_loopback_registry() && !configured {
                out.push(Endpoint {
                    plain_http: true,
                    ..origin
                });
            }
        }
        out
    }

    fn client(&self, e: &Endpoint) -> Result<Client, String> {
        let tls = self.configs.get(&e.host).and_then(|c| c.tls.clone());
        let mut config = ClientConfig {
            protocol: if e.plain_http {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            max_concurrent_download: PARALLEL_LAYERS,
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            user_agent: concat!("berth/", env!("CARGO_PKG_VERSION")),
            ..ClientConfig::default()
        };
        if let Some(tls) = tls {
            if let Some(ca) = &tls.ca_file {
                let data =
                    std::fs::read(ca).map_err(|e| format!("read CA {}: {e}", ca.display()))?;
                config.extra_root_certificates.push(Certificate {
                    encoding: CertificateEncoding::Pem,
                    data,
                });
            }
            config.accept_invalid_certificates = tls.insecure_skip_verify;
        }
        Ok(Client::new(config))
    }

    fn configured_auth(&self, host: &str) -> Option<(String, String)> {
        let a = self.configs.get(host)?.auth.as_ref()?;
        match (&a.username, &a.password, &a.auth) {
            (Some(u), Some(p), _) => Some((u.clone(), p.clone())),
            (_, _, Some(b64)) => decode_auth(b64),
            _ => None,
        }
    }
}

/// `user:password` from base64.
fn decode_auth(b64: &str) -> Option<(String, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let s = String::from_utf8(raw).ok()?;
    let (u, p) = s.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// Credentials for a registry, from a pull secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// `host[:port]` with an optional path below it; the host may start with `*.`.
    pub matches: String,
    pub username: String,
    pub password: String,
}

/// The docker config key `key` as `host[:port][/path]`: the scheme and the API's path
/// dropped, Docker Hub's old names as `docker.io`.
fn registry_key(key: &str) -> String {
    let k = key
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let k = k
        .strip_suffix("/v1")
        .or_else(|| k.strip_suffix("/v2"))
        .unwrap_or(k);
    match k.split_once('/') {
        Some((host, path)) => format!("{}/{path}", hub_alias(host)),
        None => hub_alias(k).to_string(),
    }
}

fn hub_alias(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => "docker.io",
        h => h,
    }
}

/// The credentials a secret of type `typ` holds (`kubernetes.io/dockerconfigjson`:
/// `.dockerconfigjson`; `kubernetes.io/dockercfg`: `.dockercfg`).
pub fn credentials_of_secret(
    typ: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Credential>, String> {
    #[derive(Deserialize)]
    struct Entry {
        username: Option<String>,
        password: Option<String>,
        auth: Option<String>,
    }
    #[derive(Deserialize)]
    struct ConfigJson {
        #[serde(default)]
        auths: BTreeMap<String, Entry>,
    }
    let entries: BTreeMap<String, Entry> = match typ {
        "kubernetes.io/dockerconfigjson" => {
            let raw = data
                .get(".dockerconfigjson")
                .ok_or("the secret has no .dockerconfigjson")?;
            serde_json::from_slice::<ConfigJson>(raw)
                .map_err(|e| format!(".dockerconfigjson: {e}"))?
                .auths
        }
        "kubernetes.io/dockercfg" => {
            let raw = data
                .get(".dockercfg")
                .ok_or("the secret has no .dockercfg")?;
            serde_json::from_slice(raw).map_err(|e| format!(".dockercfg: {e}"))?
        }
        other => {
            return Err(format!(
                "a secret of type {other:?} holds no registry credentials"
            ));
        }
    };
    Ok(entries
        .into_iter()
        .filter_map(|(key, e)| {
            let (username, password) = match (e.username, e.password, e.auth) {
                (Some(u), Some(p), _) if !u.is_empty() => (u, p),
                (_, _, Some(a)) => decode_auth(&a)?,
                _ => return None,
            };
            Some(Credential {
                matches: registry_key(&key),
                username,
                password,
            })
        })
        .collect())
}

impl Credential {
    /// Whether it is for `repository` on `host` (as the kubelet's keyring matches: the
    /// host, a `*.` glob of one label, and a path that prefixes the repository).
    fn is_for(&self, host: &str, repository: &str) -> bool {
        let (key_host, key_path) = self
            .matches
            .split_once('/')
            .map_or((self.matches.as_str(), ""), |(h, p)| (h, p));
        let host = hub_alias(host);
        let host_ok = match key_host.strip_prefix("*.") {
            Some(suffix) => host.split_once('.').is_some_and(|(_, rest)| rest == suffix),
            None => key_host == host,
        };
        let path_ok = key_path.is_empty()
            || repository == key_path
            || repository.starts_with(&format!("{key_path}/"));
        host_ok && path_ok
    }
}

/// What a pull stored.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub image: Image,
    /// The bytes fetched (layers already in the store are not fetched again).
    pub fetched: u64,
    /// How long it took.
    pub took: Duration,
}

/// Told as a pull goes: bytes of layers fetched so far, and in all.
pub type Progress = Arc<dyn Fn(u64, u64) + Send + Sync>;

type SharedPull = Shared<BoxFuture<'static, Result<Pulled, String>>>;

/// Pulls images into a store; one at a time per image, however many ask.
pub struct Puller {
    store: Arc<Store>,
    registries: Registries,
    inflight: Mutex<HashMap<String, SharedPull>>,
}

impl Puller {
    pub fn new(store: Store, registries: Registries) -> Arc<Puller> {
        // reqwest's TLS needs the process's provider (berth's clients pass their own).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Arc::new(Puller {
            store: Arc::new(store),
            registries,
            inflight: Mutex::new(HashMap::new()),
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Whether a pull is under way (its blobs may be in the store before its image is).
    pub fn busy(&self) -> bool {
        !self.inflight.lock().expect("inflight lock").is_empty()
    }

    /// Pulls `image` (any reference; stored under its normalized name) with the first of
    /// `credentials` that is for its registry. Whoever asks for an image being pulled
    /// waits for that pull. `progress` is told of this caller's pull only.
    pub async fn pull(
        self: &Arc<Self>,
        image: &str,
        credentials: Vec<Credential>,
        progress: Option<Progress>,
    ) -> Result<Pulled, String> {
        let r = reference::parse(image)?.with_default_tag();
        let name = r.to_string();
        let shared = {
            let mut inflight = self.inflight.lock().expect("inflight lock");
            match inflight.get(&name) {
                Some(p) => p.clone(),
                None => {
                    let this = self.clone();
                    let (key, r) = (name.clone(), r.clone());
                    let fut = async move {
                        let out = this.pull_now(&r, &credentials, progress).await;
                        this.inflight.lock().expect("inflight lock").remove(&key);
                        out
                    }
                    .boxed()
                    .shared();
                    inflight.insert(name.clone(), fut.clone());
                    fut
                }
            }
        };
        shared.await
    }

    async fn pull_now(
        &self,
        r: &Reference,
        credentials: &[Credential],
        progress: Option<Progress>,
    ) -> Result<Pulled, String> {
        let began = Instant::now();
        let mut failures = Vec::new();
        for e in self.registries.endpoints(r) {
            match self.pull_from(&e, r, credentials, progress.clone()).await {
                Ok((image, fetched)) => {
                    return Ok(Pulled {
                        image,
                        fetched,
                        took: began.elapsed(),
                    });
                }
                Err(why) => {
                    tracing::debug!(image = %r, endpoint = %e.display(), error = %why, "pull failed here");
                    failures.push(format!("{}: {why}", e.display()));
                }
            }
        }
        Err(failures.join("; "))
    }

    fn auth_for(&self, e: &Endpoint, r: &Reference, credentials: &[Credential]) -> RegistryAuth {
        let found = self.registries.configured_auth(&e.host).or_else(|| {
            credentials
                .iter()
                .find(|c| c.is_for(&e.host, &r.repository))
                .map(|c| (c.username.clone(), c.password.clone()))
        });
        match found {
            Some((u, p)) => RegistryAuth::Basic(u, p),
            None => RegistryAuth::Anonymous,
        }
    }

    async fn pull_from(
        &self,
        e: &Endpoint,
        r: &Reference,
        credentials: &[Credential],
        progress: Option<Progress>,
    ) -> Result<(Image, u64), String> {
        let client = self.registries.client(e)?;
        let at = |tag: Option<&String>, digest: Option<&String>| match (tag, digest) {
            (_, Some(d)) => {
                OciReference::with_digest(e.host.clone(), r.repository.clone(), d.clone())
            }
            (Some(t), None) => {
                OciReference::with_tag(e.host.clone(), r.repository.clone(), t.clone())
            }
            (None, None) => {
                OciReference::with_tag(e.host.clone(), r.repository.clone(), "latest".into())
            }
        };
        let oref = at(r.tag.as_ref(), r.digest.as_ref());
        let auth = self.auth_for(e, r, credentials);
        client
            .auth(&oref, &auth, RegistryOperation::Pull)
            .await
            .map_err(|err| format!("authenticate: {}", chain(&err)))?;
        let (mut body, mut digest) = client
            .pull_manifest_raw(&oref, &auth, ACCEPT)
            .await
            .map_err(|err| format!("fetch the manifest: {}", chain(&err)))?;
        verify(&body, &digest, "manifest")?;
        // An index (an image for several platforms): this machine's manifest.
        for _ in 0..4 {
            if !is_index(&body) {
                break;
            }
            self.store_bytes(&digest, body.to_vec()).await?;
            let index = oci_spec::image::ImageIndex::from_reader(&body[..])
                .map_err(|err| format!("index {digest}: {err}"))?;
            let chosen = super::archive::pick_for_platform(&index, &format!("index {digest}"))
                .map_err(|err| err.to_string())?;
            let d = chosen[0].digest().to_string();
            let (b, got) = client
                .pull_manifest_raw(&at(None, Some(&d)), &auth, ACCEPT)
                .await
                .map_err(|err| format!("fetch manifest {d}: {}", chain(&err)))?;
            verify(&b, &d, "manifest")?;
            (body, digest) = (b, got);
        }
        let manifest = oci_spec::image::ImageManifest::from_reader(&body[..])
            .map_err(|err| format!("manifest {digest}: {err}"))?;
        self.store_bytes(&digest, body.to_vec()).await?;
        let config = manifest.config().digest().to_string();
        let blob_ref = at(None, Some(&digest));
        if !self.store.has_blob(&config) {
            let mut buf = Vec::new();
            client
                .pull_blob(&blob_ref, &descriptor(manifest.config()), &mut buf)
                .await
                .map_err(|err| format!("fetch config {config}: {}", chain(&err)))?;
            self.store_bytes(&config, buf).await?;
        }
        let total: u64 = manifest.layers().iter().map(|l| l.size()).sum();
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let missing: Vec<&oci_spec::image::Descriptor> = manifest
            .layers()
            .iter()
            .filter(|l| !self.store.has_blob(l.digest().as_ref()))
            .collect();
        let already: u64 = manifest
            .layers()
            .iter()
            .filter(|l| self.store.has_blob(l.digest().as_ref()))
            .map(|l| l.size())
            .sum();
        done.fetch_add(already, std::sync::atomic::Ordering::Relaxed);
        if let Some(p) = &progress {
            p(already, total);
        }
        let fetches: Vec<_> = missing
            .into_iter()
            .map(|l| {
                self.fetch_layer(
                    &client,
                    &blob_ref,
                    descriptor(l),
                    done.clone(),
                    total,
                    progress.clone(),
                )
            })
            .collect();
        let fetched: Vec<u64> = futures_util::stream::iter(fetches)
            .buffer_unordered(PARALLEL_LAYERS)
            .try_collect()
            .await?;
        let layers: Vec<(String, String, u64)> = manifest
            .layers()
            .iter()
            .map(|l| (l.digest().to_string(), l.media_type().to_string(), l.size()))
            .collect();
        let store = self.store.clone();
        let name = r.to_string();
        let images = tokio::task::spawn_blocking(move || {
            super::archive::record(&store, &digest, &config, layers, vec![name], "pull")
        })
        .await
        .map_err(|err| format!("store the image: {err}"))?
        .map_err(|err| err.to_string())?;
        let image = images.into_iter().next().ok_or("nothing was stored")?;
        Ok((image, fetched.iter().sum()))
    }

    /// Streams one layer into the store: chunks go through a bounded channel to a
    /// blocking writer, which checks the digest before the blob is put in place.
    async fn fetch_layer(
        &self,
        client: &Client,
        blob_ref: &OciReference,
        d: OciDescriptor,
        done: Arc<std::sync::atomic::AtomicU64>,
        total: u64,
        progress: Option<Progress>,
    ) -> Result<u64, String> {
        let digest = d.digest.clone();
        let mut stream = client
            .pull_blob_stream(blob_ref, &d)
            .await
            .map_err(|err| format!("fetch layer {digest}: {}", chain(&err)))?;
        let (tx, rx) =
            tokio::sync::mpsc::channel::<std::io::Result<bytes::Bytes>>(CHUNKS_IN_FLIGHT);
        let store = self.store.clone();
        let expected = digest.clone();
        let writer = tokio::task::spawn_blocking(move || {
            store.write_blob(Some(&expected), ChannelReader::new(rx))
        });
        let mut sent = 0u64;
        while let Some(chunk) = stream.next().await {
            let item = chunk.map_err(|err| std::io::Error::other(chain(&err)));
            let failed = item.is_err();
            if let Ok(b) = &item {
                sent += b.len() as u64;
                let now = done.fetch_add(b.len() as u64, std::sync::atomic::Ordering::Relaxed);
                if let Some(p) = &progress {
                    p(now + b.len() as u64, total);
                }
            }
            if tx.send(item).await.is_err() || failed {
                break;
            }
        }
        drop(tx);
        writer
            .await
            .map_err(|err| format!("store layer {digest}: {err}"))?
            .map_err(|err| format!("store layer {digest}: {err}"))?;
        Ok(sent)
    }

    /// Puts a small blob (a manifest, an index, a config) into the store, checked.
    async fn store_bytes(&self, digest: &str, bytes: Vec<u8>) -> Result<(), String> {
        if self.store.has_blob(digest) {
            return Ok(());
        }
        let store = self.store.clone();
        let d = digest.to_string();
        tokio::task::spawn_blocking(move || store.write_blob(Some(&d), &bytes[..]))
            .await
            .map_err(|err| format!("store {digest}: {err}"))?
            .map(|_| ())
            .map_err(|err| err.to_string())
    }
}

fn descriptor(d: &oci_spec::image::Descriptor) -> OciDescriptor {
    OciDescriptor {
        media_type: d.media_type().to_string(),
        digest: d.digest().to_string(),
        size: d.size() as i64,
        ..OciDescriptor::default()
    }
}

/// Reads what the network side sends down a channel, for the store's blocking writer.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    current: bytes::Bytes,
}

impl ChannelReader {
    fn new(rx: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: bytes::Bytes::new(),
        }
    }
}

impl std::io::Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.current = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}

fn is_index(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        media_type: Option<String>,
        manifests: Option<serde_json::Value>,
    }
    serde_json::from_slice::<Probe>(body).is_ok_and(|p| {
        matches!(
            p.media_type.as_deref(),
            Some(
                "application/vnd.oci.image.index.v1+json"
                    | "application/vnd.docker.distribution.manifest.list.v2+json"
            )
        ) || (p.media_type.is_none() && p.manifests.is_some())
    })
}

/// Checks that `body` is what `digest` says.
fn verify(body: &[u8], digest: &str, what: &str) -> Result<(), String> {
    let got = format!("sha256:{:x}", Sha256::digest(body));
    match got == digest {
        true => Ok(()),
        false => Err(format!(
            "the {what} is not what its digest says: expected {digest}, got {got}"
        )),
    }
}

/// An error with its sources, one after another.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registries_file_names_mirrors_tls_and_auth() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\n").unwrap();
        let text = format!(
            "mirrors:\n  docker.io:\n    endpoint: [\"https://m1.example:5000\", \"http://10.0.0.2:5000/v2\"]\n\
             configs:\n  m1.example:5000:\n    auth: {{username: u, password: p}}\n    tls: {{ca_file: {}}}\n  \
             other.example:\n    auth: {{auth: dTI6cDI=}}\n",
            ca.display()
        );
        let r = Registries::parse(&text).unwrap();
        let busybox = reference::parse("busybox").unwrap();
        let hosts: Vec<String> = r
            .endpoints(&busybox)
            .iter()
            .map(Endpoint::display)
            .collect();
        assert_eq!(
            hosts,
            [
                "https://m1.example:5000",
                "http://10.0.0.2:5000",
                "https://docker.io"
            ]
        );
        assert_eq!(
            r.configured_auth("m1.example:5000"),
            Some(("u".into(), "p".into()))
        );
        assert_eq!(
            r.configured_auth("other.example"),
            Some(("u2".into(), "p2".into()))
        );
        // On loopback, plain HTTP after HTTPS, unless configured.
        let local = reference::parse("127.0.0.1:5000/app:1").unwrap();
        let hosts: Vec<String> = r.endpoints(&local).iter().map(Endpoint::display).collect();
        assert_eq!(hosts, ["https://127.0.0.1:5000", "http://127.0.0.1:5000"]);
        let bad = Registries::parse("mirrors:\n  x:\n    endpoint: [\"ftp://a\"]\n").unwrap_err();
        assert!(bad.contains("neither http nor https"), "{bad}");
        let missing =
            Registries::parse("configs:\n  a:\n    tls: {ca_file: /nonexistent/ca}\n").unwrap_err();
        assert!(missing.contains("/nonexistent/ca"), "{missing}");
    }

    #[test]
    fn pull_secrets_give_credentials_matched_as_the_kubelet_matches() {
        let json = br#"{"auths": {
            "https://index.docker.io/v1/": {"auth": "aHViOnNlY3JldA=="},
            "127.0.0.1:5000": {"username": "u", "password": "p"},
            "*.corp.example/team": {"username": "t", "password": "q"}
        }}"#;
        let data = BTreeMap::from([(".dockerconfigjson".to_string(), json.to_vec())]);
        let creds = credentials_of_secret("kubernetes.io/dockerconfigjson", &data).unwrap();
        let find = |host: &str, repo: &str| {
            creds
                .iter()
                .find(|c| c.is_for(host, repo))
                .map(|c| c.username.clone())
        };
        assert_eq!(find("docker.io", "library/busybox").as_deref(), Some("hub"));
        assert_eq!(find("127.0.0.1:5000", "app").as_deref(), Some("u"));
        assert_eq!(find("127.0.0.1:5001", "app"), None);
        assert_eq!(find("r.corp.example", "team/app").as_deref(), Some("t"));
        assert_eq!(find("r.corp.example", "teamx/app"), None);
        assert_eq!(find("a.b.corp.example", "team/app"), None);
        let old = BTreeMap::from([(
            ".dockercfg".to_string(),
            br#"{"reg.example": {"auth": "aHViOnNlY3JldA=="}}"#.to_vec(),
        )]);
        let creds = credentials_of_secret("kubernetes.io/dockercfg", &old).unwrap();
        assert_eq!(creds[0].matches, "reg.example");
        let wrong = credentials_of_secret("Opaque", &old).unwrap_err();
        assert!(wrong.contains("no registry credentials"), "{wrong}");
    }

    #[test]
    fn indexes_are_told_from_manifests() {
        assert!(is_index(
            br#"{"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}"#
        ));
        assert!(is_index(br#"{"schemaVersion": 2, "manifests": []}"#));
        assert!(!is_index(
            br#"{"mediaType": "application/vnd.docker.distribution.manifest.v2+json", "layers": []}"#
        ));
        assert!(
            verify(b"x", "sha256:00", "manifest")
                .unwrap_err()
                .contains("expected sha256:00")
        );
    }
}
