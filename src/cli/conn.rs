//! Which server the client verbs talk to, as whom, and in which namespace: flags, then a
//! kubeconfig (`--kubeconfig`, `$KUBECONFIG`, `~/.kube/config`, then the kubeconfig that
//! `berth serve` writes into its default data directory).

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use crate::client::Client;

use super::CliError;

/// The connection flags every client verb takes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ConnArgs {
    /// Path to the kubeconfig file to use.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace of this request.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The API server's address (`https://host:port`), instead of the kubeconfig's.
    #[arg(short = 's', long, global = true)]
    pub server: Option<String>,
    /// Bearer token for the API server, instead of the kubeconfig's.
    #[arg(long, global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// A PEM file of the certificate authority that signed the server's certificate.
    #[arg(long, global = true)]
    pub certificate_authority: Option<PathBuf>,
}

/// A client ready to talk to the chosen server.
#[derive(Clone)]
pub struct Conn {
    pub client: Client,
    /// The namespace of the request: `-n`, else the context's, else `default`.
    pub namespace: String,
    /// Whether `-n` was given (some verbs print differently then).
    pub namespace_given: bool,
    pub server: String,
    /// Where the settings came from, for error messages.
    pub source: String,
    /// What the client trusts and sends, for connections it does not make itself
    /// (exec's WebSocket).
    pub ca_pem: String,
    pub token: String,
}

#[derive(Debug, Default, Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default, rename = "current-context")]
    current_context: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct Cluster {
    server: Option<String>,
    #[serde(rename = "certificate-authority-data")]
    ca_data: Option<String>,
    #[serde(rename = "certificate-authority")]
    ca_file: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    #[serde(rename = "client-certificate-data")]
    client_cert_data: Option<String>,
    #[serde(rename = "client-certificate")]
    client_cert: Option<PathBuf>,
}

#[derive(Debug, Default, Clone, Deserialize)]
struct Context {
    cluster: Option<String>,
    user: Option<String>,
    namespace: Option<String>,
}

/// The kubeconfig files to read, in kubectl's order, and where the list came from.
fn kubeconfig_paths(args: &ConnArgs) -> (Vec<PathBuf>, String) {
    if let Some(p) = &args.kubeconfig {
        return (vec![p.clone()], format!("--kubeconfig {}", p.display()));
    }
    if let Some(v) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(&v)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        return (paths, format!("KUBECONFIG={}", v.to_string_lossy()));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        let p = Path::new(&home).join(".kube/config");
        if p.exists() {
            return (vec![p.clone()], p.display().to_string());
        }
    }
    let p = crate::types::default_data_dir().join("kubeconfig");
    (vec![p.clone()], p.display().to_string())
}

/// Reads and merges kubeconfig files: the first file to name an entry wins, as with
/// kubectl.
fn load(paths: &[PathBuf], explicit: bool) -> Result<Kubeconfig, CliError> {
    let mut merged = Kubeconfig::default();
    for path in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            // Files of $KUBECONFIG that do not exist are skipped, like kubectl does.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => continue,
            Err(e) => {
                return Err(CliError::msg(format!(
                    "cannot read the kubeconfig {}: {e}",
                    path.display()
                )));
            }
        };
        let mut cfg: Kubeconfig = serde_yaml_ng::from_str(&text).map_err(|e| {
            CliError::msg(format!("the kubeconfig {} is invalid: {e}", path.display()))
        })?;
        relative_to(&mut cfg, path);
        if merged.current_context.as_deref().unwrap_or("").is_empty() {
            merged.current_context = cfg.current_context.take();
        }
        for c in cfg.clusters {
            if !merged.clusters.iter().any(|m| m.name == c.name) {
                merged.clusters.push(c);
            }
        }
        for u in cfg.users {
            if !merged.users.iter().any(|m| m.name == u.name) {
                merged.users.push(u);
            }
        }
        for x in cfg.contexts {
            if !merged.contexts.iter().any(|m| m.name == x.name) {
                merged.contexts.push(x);
            }
        }
    }
    Ok(merged)
}

/// Files named in a kubeconfig are relative to the kubeconfig's folder.
fn relative_to(cfg: &mut Kubeconfig, path: &Path) {
    let dir = path.parent().unwrap_or(Path::new("."));
    let fix = |p: &mut Option<PathBuf>| {
        if let Some(f) = p
            && f.is_relative()
        {
            *f = dir.join(&*f);
        }
    };
    for c in &mut cfg.clusters {
        if let Some(v) = &mut c.value {
            fix(&mut v.ca_file);
        }
    }
    for u in &mut cfg.users {
        if let Some(v) = &mut u.value {
            fix(&mut v.token_file);
        }
    }
}

fn find<'a, T>(list: &'a [Named<T>], name: &str) -> Option<&'a T> {
    list.iter()
        .find(|n| n.name == name)
        .and_then(|n| n.value.as_ref())
}

impl Conn {
    /// Resolves the flags and the kubeconfig into a client.
    pub fn open(args: &ConnArgs) -> Result<Conn, CliError> {
        let (paths, source) = kubeconfig_paths(args);
        let complete_by_flags = args.server.is_some() && args.token.is_some();
        let cfg = if complete_by_flags && args.kubeconfig.is_none() {
            Kubeconfig::default()
        } else {
            match load(&paths, args.kubeconfig.is_some()) {
                Ok(c) => c,
                Err(e) if complete_by_flags => {
                    tracing::debug!(error = %e.message, "kubeconfig not used");
                    Kubeconfig::default()
                }
                Err(e) => return Err(e),
            }
        };
        let context_name = args
            .context
            .clone()
            .or_else(|| cfg.current_context.clone())
            .unwrap_or_default();
        let context = if context_name.is_empty() {
            Context::default()
        } else {
            match find(&cfg.contexts, &context_name) {
                Some(c) => c.clone(),
                None if args.context.is_some() => {
                    return Err(CliError::msg(format!(
                        "context was not found for specified context: {context_name}"
                    )));
                }
                None => Context::default(),
            }
        };
        let cluster = context
            .cluster
            .as_deref()
            .and_then(|n| find(&cfg.clusters, n))
            .cloned()
            .unwrap_or_default();
        let user = context
            .user
            .as_deref()
            .and_then(|n| find(&cfg.users, n))
            .cloned()
            .unwrap_or_default();

        let server = args
            .server
            .clone()
            .or(cluster.server.clone())
            .ok_or_else(|| {
                CliError::msg(format!(
                    "no server found in the kubeconfig ({source}).\n\
                     Start a cluster with 'berth serve', or point --kubeconfig or \
                     KUBECONFIG at the kubeconfig it wrote into its data directory."
                ))
            })?;
        let ca_pem = match (
            &args.certificate_authority,
            &cluster.ca_data,
            &cluster.ca_file,
        ) {
            (Some(f), _, _) | (None, None, Some(f)) => std::fs::read_to_string(f).map_err(|e| {
                CliError::msg(format!(
                    "cannot read the certificate authority {}: {e}",
                    f.display()
                ))
            })?,
            (None, Some(data), _) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data.trim())
                    .map_err(|e| {
                        CliError::msg(format!(
                            "certificate-authority-data of the kubeconfig ({source}) is not \
                             base64: {e}"
                        ))
                    })?;
                String::from_utf8_lossy(&bytes).into_owned()
            }
            (None, None, None) => {
                return Err(CliError::msg(format!(
                    "the kubeconfig ({source}) names no certificate authority for {server}; \
                     give one with --certificate-authority"
                )));
            }
        };
        if !ca_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(CliError::msg(format!(
                "the certificate authority of {server} ({source}) holds no PEM certificate"
            )));
        }
        let token = match (&args.token, &user.token, &user.token_file) {
            (Some(t), _, _) | (None, Some(t), _) => t.trim().to_string(),
            (None, None, Some(f)) => std::fs::read_to_string(f)
                .map_err(|e| {
                    CliError::msg(format!("cannot read the token file {}: {e}", f.display()))
                })?
                .trim()
                .to_string(),
            (None, None, None) => {
                if user.client_cert_data.is_some() || user.client_cert.is_some() {
                    return Err(CliError::msg(format!(
                        "the user of the kubeconfig ({source}) signs in with a client \
                         certificate; berth's client signs in with bearer tokens only \
                         (give one with --token)"
                    )));
                }
                String::new()
            }
        };
        let client = Client::http(&server, &ca_pem, &token)
            .map_err(|e| CliError::msg(format!("cannot set up a client for {server}: {e}")))?;
        let namespace_given = args.namespace.is_some();
        let namespace = args
            .namespace
            .clone()
            .or(context.namespace.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_string());
        Ok(Conn {
            client,
            namespace,
            namespace_given,
            server,
            source,
            ca_pem,
            token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn ca() -> String {
        rcgen::generate_simple_self_signed(vec!["ca".into()])
            .unwrap()
            .cert
            .pem()
    }

    fn kubeconfig(server: &str, ns: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode("not a certificate");
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: t0k\ncontexts:\n- name: one\n  context:\n    cluster: c\n    user: u\n    namespace: {ns}\n- name: two\n  context:\n    cluster: c\n    user: u\ncurrent-context: one\n"
        )
    }

    #[test]
    fn the_current_context_gives_server_and_namespace_and_flags_override_them() {
        let dir = tempfile::tempdir().unwrap();
        let p = write(
            dir.path(),
            "config",
            &kubeconfig("https://127.0.0.1:1", "apps"),
        );
        let args = ConnArgs {
            kubeconfig: Some(p.clone()),
            ..Default::default()
        };
        // The CA data is not a certificate.
        let err = Conn::open(&args).err().unwrap();
        assert!(
            err.message.contains("holds no PEM certificate"),
            "{}",
            err.message
        );

        let ca = write(dir.path(), "ca.crt", &ca());
        let mut args = ConnArgs {
            kubeconfig: Some(p),
            certificate_authority: Some(ca),
            ..Default::default()
        };
        let conn = Conn::open(&args).map_err(|e| e.message).unwrap();
        assert_eq!(conn.server, "https://127.0.0.1:1");
        assert_eq!(conn.namespace, "apps");
        assert!(!conn.namespace_given);

        args.context = Some("two".into());
        let conn = Conn::open(&args).map_err(|e| e.message).unwrap();
        assert_eq!(conn.namespace, "default");

        args.namespace = Some("x".into());
        args.server = Some("https://127.0.0.1:2".into());
        let conn = Conn::open(&args).map_err(|e| e.message).unwrap();
        assert_eq!((conn.namespace.as_str(), conn.namespace_given), ("x", true));
        assert_eq!(conn.server, "https://127.0.0.1:2");

        args.context = Some("three".into());
        let err = Conn::open(&args).err().unwrap();
        assert_eq!(
            err.message,
            "context was not found for specified context: three"
        );
    }

    #[test]
    fn a_missing_or_broken_kubeconfig_says_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let args = ConnArgs {
            kubeconfig: Some(dir.path().join("nope")),
            ..Default::default()
        };
        let err = Conn::open(&args).err().unwrap();
        assert!(
            err.message.starts_with("cannot read the kubeconfig"),
            "{}",
            err.message
        );

        let p = write(dir.path(), "empty", "apiVersion: v1\nkind: Config\n");
        let args = ConnArgs {
            kubeconfig: Some(p),
            ..Default::default()
        };
        let err = Conn::open(&args).err().unwrap();
        assert!(err.message.contains("berth serve"), "{}", err.message);

        let p = write(dir.path(), "bad", "clusters: [");
        let args = ConnArgs {
            kubeconfig: Some(p),
            ..Default::default()
        };
        let err = Conn::open(&args).err().unwrap();
        assert!(err.message.contains("is invalid"), "{}", err.message);
    }
}
