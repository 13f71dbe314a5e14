//! A pod's volumes on this node, under the runtime's volumes directory of the pod
//! (`<pods>/<uid>/.volumes/<name>`, removed with the pod): `emptyDir` is a directory there
//! shared by the pod's containers (`medium: Memory` and `sizeLimit` are not enforced: it is
//! a plain directory either way); `hostPath` is the host's path after its `type` check;
//! `configMap`, `secret`, `downwardAPI` and `projected` are written by the
//! [`atomic_writer`](super::atomic_writer) and refreshed at every sync. The service
//! account's token, the cluster's CA and the namespace are written likewise and mounted at
//! [`SERVICE_ACCOUNT_DIR`] unless `automountServiceAccountToken` is false (on the pod, else
//! on the account) or a container mounts something there itself; this happens in the agent,
//! not by admission, so the pod spec shows no `kube-api-access-*` volume, and only where
//! mounts are possible. The tokens are bound ones (the TokenRequest API), bound to the
//! pod: the service-account volume's lives an hour (3607 s, as upstream's
//! `kube-api-access-*`), a `serviceAccountToken` projection's has its own `audience` and
//! `expirationSeconds`; each is asked for again once 80 % of its life has passed (as the
//! kubelet's token manager), so that the refresh at a resync always lands before it
//! expires, and ends with the pod.
//!
//! [`mounts`] turns a container's `volumeMounts` into the runtime's bind mounts.

use crate::types::json::str_at;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};

use base64::Engine;
use serde_json::Value;

use super::Config;
use super::atomic_writer::{self, File, Payload};
use super::{downward, env};
use crate::client::Client;
use crate::client::{Kind, catalog};
use crate::runtime::Mount;

/// Where containers find their service account's credentials.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The directory of the service-account volume (not a volume name: those are DNS labels).
const SERVICE_ACCOUNT_VOLUME: &str = "_serviceaccount";
/// The mode of projected files unless the spec names one (0644).
const DEFAULT_MODE: u32 = 0o644;

/// The pod's volumes, ready to mount: name → path on this machine.
#[derive(Debug, Default, Clone)]
pub struct Prepared {
    pub sources: HashMap<String, PathBuf>,
    /// The service-account volume, when the pod gets one.
    pub service_account: Option<PathBuf>,
}

fn mode_of(v: &Value, key: &str, default: u32) -> u32 {
    v[key].as_u64().map_or(default, |m| (m as u32) & 0o7777)
}

/// Why a pod's volumes could not be set up.
#[derive(Debug, Clone)]
pub struct MountError {
    /// Which volume failed and why, as the kubelet's `FailedMount` event says it.
    pub message: String,
    /// All that is missing is the service account's token, which its controller writes
    /// moments after it makes the account.
    pub token_pending: bool,
}

impl From<String> for MountError {
    fn from(message: String) -> Self {
        MountError {
            message,
            token_pending: false,
        }
    }
}

fn token_pending(ns: &str, account: &str) -> String {
    format!("the token of service account {ns}/{account} is not there yet")
}

/// The lifetime of the service-account volume's token (upstream's).
const SERVICE_ACCOUNT_TOKEN_SECONDS: i64 = 3607;
/// A projection's token lifetime when it names none.
const PROJECTED_TOKEN_SECONDS: i64 = 3600;
/// How many tokens the cache keeps at most (beyond, the oldest go).
const TOKEN_CACHE_MAX: usize = 4096;

/// What a token is asked for: the pod it is bound to, the account, the audience
/// (empty: the API's) and the lifetime.
type TokenKey = (String, String, String, i64);

/// The bound tokens this node asked for, reused until 80 % of their life has passed.
#[derive(Debug, Default)]
pub struct TokenCache {
    tokens: std::sync::Mutex<HashMap<TokenKey, (Vec<u8>, jiff::Timestamp)>>,
}

impl TokenCache {
    fn get(&self, key: &TokenKey) -> Option<Vec<u8>> {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let (token, refresh_at) = tokens.get(key)?;
        (jiff::Timestamp::now() < *refresh_at).then(|| token.clone())
    }

    fn put(&self, key: TokenKey, token: Vec<u8>, refresh_at: jiff::Timestamp) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let now = jiff::Timestamp::now();
        tokens.retain(|_, (_, at)| *at > now);
        while tokens.len() >= TOKEN_CACHE_MAX {
            let Some(oldest) = tokens
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            tokens.remove(&oldest);
        }
        tokens.insert(key, (token, refresh_at));
    }

    /// Forgets the tokens of pod `uid` (it is gone).
    pub fn forget(&self, uid: &str) {
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        tokens.retain(|k, _| k.0 != uid);
    }
}

/// Materializes every volume of `pod` under `dir` (and the service-account volume when
/// `config` allows mounts).
pub async fn prepare(
    client: &Client,
    config: &Config,
    tokens: &TokenCache,
    pod: &Value,
    dir: &Path,
) -> Result<Prepared, MountError> {
    let mut out = Prepared::default();
    let ns = str_at(pod, "/metadata/namespace");
    let fetch = Fetch {
        client,
        ns,
        tokens,
        pod,
    };
    let pod_ips = config.pod_ips(pod);
    for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
        let name = v["name"].as_str().unwrap_or("");
        let failed = |why: String| format!("MountVolume.SetUp failed for volume {name:?} : {why}");
        let path = dir.join(name);
        let source = if v.get("emptyDir").is_some() {
            fs::create_dir_all(&path)
                .and_then(|()| fs::set_permissions(&path, fs::Permissions::from_mode(0o777)))
                .map_err(|e| failed(format!("create {}: {e}", path.display())))?;
            path
        } else if let Some(h) = v.get("hostPath") {
            let host = PathBuf::from(str_at(h, "/path"));
            check_host_path(&host, str_at(h, "/type")).map_err(failed)?;
            host
        } else {
            let payload = if let Some(c) = v.get("configMap") {
                let mode = mode_of(c, "defaultMode", DEFAULT_MODE);
                fetch.config_map(c, mode).await
            } else if let Some(s) = v.get("secret") {
                let mode = mode_of(s, "defaultMode", DEFAULT_MODE);
                let named = s.get("secretName").cloned().unwrap_or_default();
                let mut s = s.clone();
                s["name"] = named;
                fetch.secret(&s, mode).await
            } else if let Some(d) = v.get("downwardAPI") {
                downward(
                    pod,
                    d,
                    mode_of(d, "defaultMode", DEFAULT_MODE),
                    &config.ips(&pod_ips),
                )
            } else if let Some(p) = v.get("projected") {
                let mode = mode_of(p, "defaultMode", DEFAULT_MODE);
                fetch.projected(pod, p, mode, &config.ips(&pod_ips)).await
            } else {
                let kind = v
                    .as_object()
                    .and_then(|m| m.keys().find(|k| *k != "name"))
                    .map_or("(none)", String::as_str);
                return Err(
                    failed(format!("volumes of type {kind} are not supported by berth")).into(),
                );
            }
            .map_err(failed)?;
            atomic_writer::write(&path, &payload).map_err(|e| failed(e.to_string()))?;
            path
        };
        out.sources.insert(name.to_string(), source);
    }
    if config.mount_namespaces
        && fetch
            .automount(pod)
            .await
            .map_err(|e| format!("MountVolume.SetUp failed for the service-account token: {e}"))?
    {
        let path = dir.join(SERVICE_ACCOUNT_VOLUME);
        let failed =
            |why: String| format!("MountVolume.SetUp failed for the service-account token: {why}");
        let mut payload = Payload::new();
        let account = str_at(pod, "/spec/serviceAccountName");
        let file = |data: Vec<u8>| File {
            data,
            mode: DEFAULT_MODE,
        };
        let token = fetch
            .token(account, "", SERVICE_ACCOUNT_TOKEN_SECONDS)
            .await
            .map_err(failed)?;
        let Some(token) = token else {
            return Err(MountError {
                message: failed(token_pending(ns, account)),
                token_pending: true,
            });
        };
        payload.insert("token".into(), file(token));
        payload.insert("ca.crt".into(), file(config.ca_pem.clone().into_bytes()));
        payload.insert("namespace".into(), file(ns.as_bytes().to_vec()));
        atomic_writer::write(&path, &payload).map_err(|e| failed(e.to_string()))?;
        out.service_account = Some(path);
    }
    Ok(out)
}

/// Reads what volumes project from the API.
struct Fetch<'a> {
    client: &'a Client,
    ns: &'a str,
    tokens: &'a TokenCache,
    /// The pod whose volumes these are (tokens are bound to it).
    pod: &'a Value,
}

impl Fetch<'_> {
    async fn get(&self, kind: Kind, name: &str) -> Result<Option<Value>, String> {
        match self
            .client
            .get(catalog::of(kind), Some(self.ns), name)
            .await
        {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.to_string()),
        }
    }

    /// A `configMap` volume or projection source.
    async fn config_map(&self, src: &Value, mode: u32) -> Result<Payload, String> {
        let name = str_at(src, "/name");
        let Some(cm) = self.get(Kind::ConfigMap, name).await? else {
            if src["optional"] == true {
                return Ok(Payload::new());
            }
            return Err(format!("configmap {name:?} not found"));
        };
        let mut data = BTreeMap::new();
        for (k, v) in cm["data"].as_object().into_iter().flatten() {
            data.insert(k.clone(), v.as_str().unwrap_or("").as_bytes().to_vec());
        }
        for (k, v) in cm["binaryData"].as_object().into_iter().flatten() {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or(""))
                .map_err(|e| format!("configmap {name:?} key {k:?}: {e}"))?;
            data.insert(k.clone(), raw);
        }
        project(
            &data,
            src,
            mode,
            "configmap references non-existent config key",
        )
    }

    /// A `secret` volume (with `secretName` as `name`) or projection source.
    async fn secret(&self, src: &Value, mode: u32) -> Result<Payload, String> {
        let name = str_at(src, "/name");
        let Some(secret) = self.get(Kind::Secret, name).await? else {
            if src["optional"] == true {
                return Ok(Payload::new());
            }
            return Err(format!("secret {name:?} not found"));
        };
        let mut data = BTreeMap::new();
        for (k, v) in secret["data"].as_object().into_iter().flatten() {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(v.as_str().unwrap_or(""))
                .map_err(|e| format!("secret {name:?} key {k:?}: {e}"))?;
            data.insert(k.clone(), raw);
        }
        project(&data, src, mode, "references non-existent secret key")
    }

    /// A `projected` volume: its sources in one directory.
    async fn projected(
        &self,
        pod: &Value,
        p: &Value,
        mode: u32,
        ips: &downward::Ips<'_>,
    ) -> Result<Payload, String> {
        let mut out = Payload::new();
        for s in p["sources"].as_array().into_iter().flatten() {
            let part = if let Some(c) = s.get("configMap") {
                self.config_map(c, mode).await?
            } else if let Some(c) = s.get("secret") {
                self.secret(c, mode).await?
            } else if let Some(d) = s.get("downwardAPI") {
                downward(pod, d, mode, ips)?
            } else if let Some(t) = s.get("serviceAccountToken") {
                if super::manifests::is_static(pod) {
                    return Err("a static pod cannot have service account tokens".into());
                }
                let account = str_at(pod, "/spec/serviceAccountName");
                let path = str_at(t, "/path").to_string();
                let seconds = t["expirationSeconds"]
                    .as_i64()
                    .unwrap_or(PROJECTED_TOKEN_SECONDS);
                let data = self
                    .token(account, str_at(t, "/audience"), seconds)
                    .await?
                    .ok_or_else(|| token_pending(self.ns, account))?;
                Payload::from([(path, File { data, mode })])
            } else {
                // clusterTrustBundle and podCertificate are not served here.
                return Err("unsupported projected volume source".into());
            };
            out.extend(part);
        }
        Ok(out)
    }

    /// Whether the pod gets its service account's token: the pod's
    /// `automountServiceAccountToken` wins over the account's; both default to yes.
    /// A pod that mounts something at [`SERVICE_ACCOUNT_DIR`] itself, or a static pod,
    /// gets none.
    async fn automount(&self, pod: &Value) -> Result<bool, String> {
        let own = ["containers", "initContainers"].iter().any(|list| {
            pod["spec"][*list]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["volumeMounts"].as_array().into_iter().flatten())
                .any(|m| Path::new(str_at(m, "/mountPath")) == Path::new(SERVICE_ACCOUNT_DIR))
        });
        // A static pod has no account to speak for (upstream's admission never gives
        // one a token either): its spec comes from a file of this node's, not the API.
        if own || super::manifests::is_static(pod) {
            return Ok(false);
        }
        if let Some(b) = pod["spec"]["automountServiceAccountToken"].as_bool() {
            return Ok(b);
        }
        let account = str_at(pod, "/spec/serviceAccountName");
        let sa = self.get(Kind::ServiceAccount, account).await?;
        Ok(sa
            .and_then(|sa| sa["automountServiceAccountToken"].as_bool())
            .unwrap_or(true))
    }

    /// A token of `account` for `audience` (empty: the API's) living `seconds`, bound to
    /// the pod, from the TokenRequest API (a cached one while it is fresh); `None` while
    /// the account is not there yet.
    async fn token(
        &self,
        account: &str,
        audience: &str,
        seconds: i64,
    ) -> Result<Option<Vec<u8>>, String> {
        let uid = str_at(self.pod, "/metadata/uid");
        let key: TokenKey = (
            uid.to_string(),
            account.to_string(),
            audience.to_string(),
            seconds,
        );
        if let Some(token) = self.tokens.get(&key) {
            return Ok(Some(token));
        }
        let mut spec = serde_json::json!({
            "expirationSeconds": seconds,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                "name": str_at(self.pod, "/metadata/name"), "uid": uid},
        });
        if !audience.is_empty() {
            spec["audiences"] = serde_json::json!([audience]);
        }
        let request = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let asked = jiff::Timestamp::now();
        let answer = match self
            .client
            .act(
                catalog::of(Kind::ServiceAccount),
                Some(self.ns),
                account,
                "token",
                &request,
            )
            .await
        {
            Ok(a) => a,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(format!("request a token of service account {account}: {e}")),
        };
        let token = answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                format!("the token request of service account {account} answered no token")
            })?
            .as_bytes()
            .to_vec();
        let life = answer
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(seconds);
        let refresh_at = asked
            .checked_add(jiff::SignedDuration::from_secs(life * 4 / 5))
            .unwrap_or(asked);
        self.tokens.put(key, token.clone(), refresh_at);
        Ok(Some(token))
    }
}

/// The files of a configMap or secret source: every key, or the `items` it names (a
/// missing key is an error unless the source is optional).
fn project(
    data: &BTreeMap<String, Vec<u8>>,
    src: &Value,
    mode: u32,
    missing: &str,
) -> Result<Payload, String> {
    let mut out = Payload::new();
    match src["items"].as_array().filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                out.insert(
                    k.clone(),
                    File {
                        data: v.clone(),
                        mode,
                    },
                );
            }
        }
        Some(items) => {
            for item in items {
                let key = str_at(item, "/key");
                let Some(v) = data.get(key) else {
                    if src["optional"] == true {
                        continue;
                    }
                    return Err(format!("{missing}: {key}"));
                };
                out.insert(
                    str_at(item, "/path").to_string(),
                    File {
                        data: v.clone(),
                        mode: mode_of(item, "mode", mode),
                    },
                );
            }
        }
    }
    for path in out.keys() {
        atomic_writer::check_path(path).map_err(|e| e.to_string())?;
    }
    Ok(out)
}

/// The files of a `downwardAPI` volume or projection source.
fn downward(pod: &Value, d: &Value, mode: u32, ips: &downward::Ips) -> Result<Payload, String> {
    let mut out = Payload::new();
    for item in d["items"].as_array().into_iter().flatten() {
        let path = str_at(item, "/path").to_string();
        atomic_writer::check_path(&path).map_err(|e| e.to_string())?;
        let text = if let Some(f) = item.get("fieldRef") {
            let field = str_at(f, "/fieldPath");
            match field {
                "metadata.labels" | "metadata.annotations" => {
                    let map = &pod["metadata"][field.trim_start_matches("metadata.")];
                    // As the kubelet prints them: sorted `key="value"` lines.
                    let mut lines: Vec<String> = map
                        .as_object()
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| format!("{k}={}", Value::from(v.as_str().unwrap_or(""))))
                        .collect();
                    lines.sort();
                    lines.join("\n")
                }
                _ => downward::field_value(pod, field, ips),
            }
        } else if let Some(r) = item.get("resourceFieldRef") {
            downward::resource_value(pod, r)?
        } else {
            return Err(format!("downwardAPI item {path:?} names no field"));
        };
        out.insert(
            path,
            File {
                data: text.into_bytes(),
                mode: mode_of(item, "mode", mode),
            },
        );
    }
    Ok(out)
}

/// Checks a hostPath against its `type`, creating it for the `…OrCreate` types.
pub fn check_host_path(path: &Path, kind: &str) -> Result<(), String> {
    let fail = |what: &str| {
        format!(
            "hostPath type check failed: {} is not {what}",
            path.display()
        )
    };
    if !path.is_absolute() {
        return Err(format!("hostPath {} is not absolute", path.display()));
    }
    let meta = fs::metadata(path);
    let is = |f: fn(&fs::FileType) -> bool| meta.as_ref().is_ok_and(|m| f(&m.file_type()));
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match &meta {
            Err(e) if e.kind() == io::ErrorKind::NotFound => fs::create_dir_all(path)
                .and_then(|()| fs::set_permissions(path, fs::Permissions::from_mode(0o755)))
                .map_err(|e| format!("create {}: {e}", path.display())),
            _ if is(fs::FileType::is_dir) => Ok(()),
            _ => Err(fail("a directory")),
        },
        "Directory" if is(fs::FileType::is_dir) => Ok(()),
        "Directory" => Err(fail("a directory")),
        "FileOrCreate" => match &meta {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let create = || -> io::Result<()> {
                    if let Some(parent) = path.parent() {
                        fs::create_dir_all(parent)?;
                    }
                    fs::OpenOptions::new()
                        .create(true)
                        .truncate(false)
                        .write(true)
                        .open(path)?;
                    fs::set_permissions(path, fs::Permissions::from_mode(0o644))
                };
                create().map_err(|e| format!("create {}: {e}", path.display()))
            }
            _ if is(fs::FileType::is_file) => Ok(()),
            _ => Err(fail("a file")),
        },
        "File" if is(fs::FileType::is_file) => Ok(()),
        "File" => Err(fail("a file")),
        "Socket" if is(fs::FileType::is_socket) => Ok(()),
        "Socket" => Err(fail("a socket file")),
        "CharDevice" if is(fs::FileType::is_char_device) => Ok(()),
        "CharDevice" => Err(fail("a character device")),
        "BlockDevice" if is(fs::FileType::is_block_device) => Ok(()),
        "BlockDevice" => Err(fail("a block device")),
        other => Err(format!("hostPath type {other:?} is not known")),
    }
}

/// A relative path inside a volume (`subPath`): no `..`, not absolute.
fn check_sub_path(sub: &str) -> Result<(), String> {
    use std::path::Component;
    if Path::new(sub)
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
    {
        Ok(())
    } else {
        Err(format!(
            "subPath {sub:?} must be a relative path that stays in the volume"
        ))
    }
}

/// The bind mounts of container `c` (its `volumeMounts`, and the service-account volume),
/// with `subPath` and `subPathExpr` (expanded from `env`) resolved.
pub fn mounts(
    c: &Value,
    prepared: &Prepared,
    env: &[(String, String)],
) -> Result<Vec<Mount>, String> {
    let mut out = Vec::new();
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let name = str_at(m, "/name");
        let root = prepared
            .sources
            .get(name)
            .ok_or_else(|| format!("volumeMount {name:?}: the pod has no volume {name:?}"))?;
        let target = Path::new("/").join(str_at(m, "/mountPath"));
        let sub = match (m["subPath"].as_str(), m["subPathExpr"].as_str()) {
            (Some(s), _) if !s.is_empty() => s.to_string(),
            (_, Some(e)) if !e.is_empty() => env::expand(e, env),
            _ => String::new(),
        };
        let source = if sub.is_empty() {
            root.clone()
        } else {
            check_sub_path(&sub)?;
            let source = root.join(&sub);
            if fs::symlink_metadata(&source).is_err() {
                // As the kubelet: a missing subPath is made as a directory.
                fs::create_dir_all(&source)
                    .map_err(|e| format!("create subPath {}: {e}", source.display()))?;
            }
            // Symlinks inside the volume may not lead out of it.
            let (real, base) = (fs::canonicalize(&source), fs::canonicalize(root));
            match (real, base) {
                (Ok(r), Ok(b)) if r.starts_with(&b) => r,
                _ => {
                    return Err(format!(
                        "subPath {sub:?} of volume {name:?} leads out of the volume"
                    ));
                }
            }
        };
        out.push(Mount {
            source,
            target,
            read_only: m["readOnly"] == true,
        });
    }
    if let Some(sa) = &prepared.service_account {
        out.push(Mount {
            source: sa.clone(),
            target: SERVICE_ACCOUNT_DIR.into(),
            read_only: true,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    const NO_IPS: downward::Ips = downward::Ips {
        host: "",
        pods: &[],
    };
    use serde_json::json;

    #[test]
    fn host_path_types_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let file = d.join("f");
        fs::write(&file, "x").unwrap();
        assert!(check_host_path(d, "").is_ok());
        assert!(check_host_path(&d.join("missing"), "").is_ok());
        assert!(check_host_path(d, "Directory").is_ok());
        let err = check_host_path(&file, "Directory").unwrap_err();
        assert!(err.contains("is not a directory"), "{err}");
        assert!(check_host_path(&d.join("missing"), "Directory").is_err());
        assert!(check_host_path(&file, "File").is_ok());
        assert!(
            check_host_path(d, "File")
                .unwrap_err()
                .contains("is not a file")
        );
        assert!(check_host_path(&file, "Socket").is_err());
        assert!(check_host_path(&file, "CharDevice").is_err());
        assert!(check_host_path(Path::new("/dev/null"), "CharDevice").is_ok());
        assert!(check_host_path(&file, "BlockDevice").is_err());
        assert!(check_host_path(&file, "Sideways").is_err());
        assert!(check_host_path(Path::new("relative"), "").is_err());

        let made = d.join("a/b");
        assert!(check_host_path(&made, "DirectoryOrCreate").is_ok());
        assert!(made.is_dir());
        assert!(check_host_path(&file, "DirectoryOrCreate").is_err());
        let made = d.join("c/d.txt");
        assert!(check_host_path(&made, "FileOrCreate").is_ok());
        assert!(made.is_file());
        assert!(check_host_path(d, "FileOrCreate").is_err());

        let sock = d.join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(check_host_path(&sock, "Socket").is_ok());
    }

    #[test]
    fn items_pick_keys_paths_and_modes() {
        let data: BTreeMap<String, Vec<u8>> = [("a", "1"), ("b", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        let all = project(&data, &json!({}), 0o600, "missing").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["a"].mode, 0o600);

        let src = json!({"items": [{"key": "b", "path": "dir/b.txt", "mode": 0o400}, {"key": "a", "path": "x"}]});
        let some = project(&data, &src, 0o644, "missing").unwrap();
        assert_eq!(some.keys().collect::<Vec<_>>(), ["dir/b.txt", "x"]);
        assert_eq!(some["dir/b.txt"].data, b"2");
        assert_eq!(some["dir/b.txt"].mode, 0o400);
        assert_eq!(some["x"].mode, 0o644);

        let gone = json!({"items": [{"key": "zzz", "path": "z"}]});
        let err = project(
            &data,
            &gone,
            0o644,
            "configmap references non-existent config key",
        )
        .unwrap_err();
        assert_eq!(err, "configmap references non-existent config key: zzz");
        let mut optional = gone.clone();
        optional["optional"] = json!(true);
        assert!(project(&data, &optional, 0o644, "m").unwrap().is_empty());

        let escape = json!({"items": [{"key": "a", "path": "../../etc/x"}]});
        assert!(project(&data, &escape, 0o644, "m").is_err());
    }

    #[test]
    fn downward_api_files() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "n", "labels": {"b": "2", "a": "x\"y"},
                         "annotations": {"k": "v"}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "64Mi", "cpu": "250m"}}}]},
        });
        let d = json!({"items": [
            {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
            {"path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}},
            {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}, "mode": 0o600},
            {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}},
            {"path": "cpu", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
            {"path": "cpu-cores", "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu"}},
            {"path": "req", "resourceFieldRef": {"containerName": "c", "resource": "requests.memory"}},
        ]});
        let p = downward(&pod, &d, 0o644, &NO_IPS).unwrap();
        let text = |k: &str| String::from_utf8(p[k].data.clone()).unwrap();
        assert_eq!(text("labels"), "a=\"x\\\"y\"\nb=\"2\"");
        assert_eq!(text("annotations"), "k=\"v\"");
        assert_eq!(text("name"), "p");
        assert_eq!(p["name"].mode, 0o600);
        assert_eq!(text("mem"), "64");
        assert_eq!(text("cpu"), "250");
        assert_eq!(text("cpu-cores"), "1");
        assert_eq!(text("req"), "0");
        let bad = json!({"items": [{"path": "x", "resourceFieldRef": {"containerName": "nope", "resource": "limits.cpu"}}]});
        assert!(downward(&pod, &bad, 0o644, &NO_IPS).is_err());
    }

    #[test]
    fn mounts_resolve_sub_paths_inside_their_volume() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("data");
        fs::create_dir_all(&vol).unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("out")).unwrap();
        let prepared = Prepared {
            sources: HashMap::from([("data".to_string(), vol.clone())]),
            service_account: Some(dir.path().join("sa")),
        };
        let env = vec![("POD".to_string(), "p1".to_string())];
        let c = json!({"volumeMounts": [
            {"name": "data", "mountPath": "/data", "readOnly": true},
            {"name": "data", "mountPath": "/logs", "subPathExpr": "logs/$(POD)"},
        ]});
        let m = mounts(&c, &prepared, &env).unwrap();
        assert_eq!(m[0].source, vol);
        assert_eq!(m[0].target, Path::new("/data"));
        assert!(m[0].read_only);
        assert_eq!(m[1].source, fs::canonicalize(vol.join("logs/p1")).unwrap());
        assert!(vol.join("logs/p1").is_dir());
        assert!(!m[1].read_only);
        assert_eq!(m[2].target, Path::new(SERVICE_ACCOUNT_DIR));
        assert!(m[2].read_only);

        for bad in ["../x", "/etc", "out"] {
            let c = json!({"volumeMounts": [{"name": "data", "mountPath": "/d", "subPath": bad}]});
            assert!(mounts(&c, &prepared, &env).is_err(), "{bad}");
        }
        let c = json!({"volumeMounts": [{"name": "other", "mountPath": "/d"}]});
        assert!(
            mounts(&c, &prepared, &env)
                .unwrap_err()
                .contains("no volume")
        );
    }
}
