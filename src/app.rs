//! The `berth serve` process: opens the data directory (store, certificates, admin token,
//! kubeconfig), serves the API until told to stop, then shuts everything down in order.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use base64::Engine;
use tokio::net::TcpListener;

use crate::api::{self, AppState, tls};
use crate::client::Client;
use crate::controller;
use crate::node;
use crate::registry::{Registry, User};
use crate::runtime::process::ProcessRuntime;
use crate::store::{self, Store};
use crate::supervisor::Supervisor;

/// Everything `berth serve` can be told.
#[derive(Debug, Clone)]
pub struct Config {
    pub store: store::Config,
    /// Serve this certificate chain and key (PEM files) instead of the generated ones.
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// How often idle watches that allow bookmarks get one.
    pub bookmark_every: Duration,
    pub controllers: controller::Config,
    /// Run the controllers (off only for tests of the bare API).
    pub run_controllers: bool,
    /// Run a node agent for this machine (`--no-node` turns it off).
    pub node: Option<NodeSettings>,
    /// What the API server allows its clients (timeouts, connections, requests in flight).
    pub limits: api::Limits,
}

/// The node agent of `berth serve`.
#[derive(Debug, Clone)]
pub struct NodeSettings {
    pub agent: node::Config,
    /// The program that runs as `PROGRAM shim ...` for each container (this berth binary).
    pub shim_program: PathBuf,
    /// Enforce resource limits through cgroups, when this machine lets berth make them
    /// (off: containers run without their limits, and their pods are told so).
    pub cgroups: bool,
    /// End every container when berth stops (else they run on, and the next berth on
    /// the data directory adopts them).
    pub stop_pods_on_exit: bool,
    /// Which runtime runs the pods that name no RuntimeClass.
    pub runtime: DefaultRuntime,
    /// The pod network (none: pods share this machine's network).
    pub network: Option<crate::net::Config>,
}

/// Which runtime a node runs its pods with (`berth serve --default-runtime`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum DefaultRuntime {
    /// `oci` where runc is installed and berth runs as root, else `process`.
    #[default]
    Auto,
    /// Each container in its image's root filesystem, run by runc.
    Oci,
    /// Each container's command run on this machine.
    Process,
}

impl NodeSettings {
    /// A node named after this host, running containers through this very binary.
    pub fn for_this_machine(name: Option<String>) -> Self {
        let name = name
            .or_else(host_name)
            .unwrap_or_else(|| "localhost".to_string());
        NodeSettings {
            agent: node::Config::new(&name, "127.0.0.1"),
            shim_program: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("berth")),
            cgroups: true,
            stop_pods_on_exit: false,
            runtime: DefaultRuntime::Auto,
            network: None,
        }
    }
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            store: store::Config::new(data_dir),
            tls_files: None,
            bookmark_every: Duration::from_secs(60),
            controllers: controller::Config::default(),
            run_controllers: true,
            node: None,
            limits: api::Limits::default(),
        }
    }

    pub fn data_dir(&self) -> &Path {
        &self.store.data_dir
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] store::Error),
    #[error(transparent)]
    Tls(#[from] tls::Error),
    #[error("{0}")]
    Registry(#[from] crate::registry::Error),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
    #[error("the cluster DNS: {0}")]
    Dns(#[from] crate::net::dns::Error),
    #[error("the pod network: {0}")]
    Network(#[from] crate::net::pod::Error),
    #[error("data directory {dir} is in use by berth (pid {pid}); stop it first")]
    Serving { dir: String, pid: String },
    /// A data directory or secret file that others could read, write or plant.
    #[error("{0}")]
    Insecure(String),
}

/// Makes sure the data directory is berth's alone: made with mode 0700 when missing; an
/// existing one that another user owns, or that other users may read, write or enter, is
/// refused (its store holds every Secret, its files the admin's token and the CA's key).
pub fn secure_data_dir(data_dir: &Path) -> Result<(), Error> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let shown = data_dir.display();
    if !data_dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(data_dir)
            .map_err(|source| Error::Io {
                context: format!("create {shown}"),
                source,
            })?;
    }
    let meta = std::fs::metadata(data_dir).map_err(|source| Error::Io {
        context: format!("read {shown}"),
        source,
    })?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Err(Error::Insecure(format!(
            "data directory {shown} is owned by uid {}, not by this user (uid {me}): another user could read or plant its secrets; choose another --data-dir, or `chown` it to this user",
            meta.uid()
        )));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::Insecure(format!(
            "data directory {shown} has mode {mode:04o}: other users could read its store (every Secret) or plant files in it; run `chmod 700 {shown}`, or choose another --data-dir"
        )));
    }
    Ok(())
}

/// A secret file of the data directory (a token, a key), or none when it is missing:
/// read only when this user owns it with mode 0600 ([`crate::types::private`]).
fn read_private(path: &Path) -> Result<Option<String>, Error> {
    crate::types::private::read(path).map_err(|source| match source.kind() {
        std::io::ErrorKind::PermissionDenied => Error::Insecure(source.to_string()),
        _ => Error::Io {
            context: format!("read {}", path.display()),
            source,
        },
    })
}

/// The lock a berth serving a data directory holds on it (`DATA/serve.lock`, with its
/// pid): a second berth, and a reset of the node, are refused while it is held.
pub struct DataDirLock {
    _file: std::fs::File,
}

/// Takes the lock of `data_dir`, or says which berth holds it.
pub fn lock_data_dir(data_dir: &Path) -> Result<DataDirLock, Error> {
    use std::io::Write;
    let io = |context: String| move |source| Error::Io { context, source };
    secure_data_dir(data_dir)?;
    let path = data_dir.join("serve.lock");
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io(format!("open {}", path.display())))?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => {}
        Err(rustix::io::Errno::WOULDBLOCK) => {
            let pid = std::fs::read_to_string(&path).unwrap_or_default();
            return Err(Error::Serving {
                dir: data_dir.display().to_string(),
                pid: pid.trim().to_string(),
            });
        }
        Err(e) => return Err(io(format!("lock {}", path.display()))(e.into())),
    }
    file.set_len(0)
        .and_then(|()| write!(file, "{}", std::process::id()))
        .map_err(io(format!("write {}", path.display())))?;
    Ok(DataDirLock { _file: file })
}

/// The runtime's directory in a data directory.
pub fn pods_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("pods")
}

/// `berth node reset`: ends every container of a stopped berth's data directory (its
/// shims and their process groups, whatever is in its cgroups) and removes its cgroups
/// and mounts, then the pod network it had (bridge, nftables tables, address records;
/// see [`crate::net::pod::remove`]) — the answer says whether there was one. Refused
/// while a berth serves the directory; a second reset finds nothing.
pub fn reset_node(data_dir: &Path) -> Result<(crate::runtime::reset::Report, bool), Error> {
    let _lock = lock_data_dir(data_dir)?;
    let report = crate::runtime::reset::reset(&pods_dir(data_dir)).map_err(|source| Error::Io {
        context: format!("reset the node of {}", data_dir.display()),
        source,
    })?;
    let io = |source| Error::Io {
        context: format!("remove the pod network of {}", data_dir.display()),
        source,
    };
    if !data_dir.join("net").exists() {
        return Ok((report, false));
    }
    // On a thread of its own: the caller may be inside a runtime already.
    let dir = data_dir.to_path_buf();
    let network = std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(crate::net::pod::remove(
                &crate::net::Config::default(),
                &dir,
            ))
            .map_err(|e| std::io::Error::other(e.to_string()))
    })
    .join()
    .map_err(|_| io(std::io::Error::other("the removal panicked")))?
    .map_err(io)?;
    Ok((report, network))
}

/// Opens the container runtime of `data_dir` (adopting the containers that still run),
/// with its cgroups under `berth/<id>` when `settings` asks for them and the machine has
/// them.
fn open_runtime(data_dir: &Path, settings: &mut NodeSettings) -> Result<ProcessRuntime, Error> {
    let root = pods_dir(data_dir);
    let io = |context: &str| {
        let context = context.to_string();
        move |e: crate::runtime::Error| Error::Io {
            context,
            source: std::io::Error::other(e.to_string()),
        }
    };
    let cgroups = if settings.cgroups {
        crate::runtime::reset::id(&root)
            .map_err(|e| format!("give {} its identity: {e}", root.display()))
            .and_then(|id| {
                crate::runtime::cgroup::Cgroups::for_this_machine(&format!(
                    "{}/{id}",
                    crate::runtime::cgroup::PARENT
                ))
            })
    } else {
        Err("cgroups are turned off".to_string())
    };
    if let Err(why) = &cgroups {
        tracing::warn!(reason = %why, "resource limits of containers are not enforced");
    }
    let runtime = ProcessRuntime::open_with_cgroups(
        &root,
        &settings.shim_program,
        crate::runtime::shim::Rotation::default(),
        cgroups,
    )
    .map_err(io("open the container runtime"))?;
    let runc = find_program("runc");
    let root_user = rustix::process::geteuid().is_root();
    let oci = match (settings.runtime, &runc) {
        (DefaultRuntime::Process, _) => false,
        (DefaultRuntime::Oci, None) => {
            return Err(Error::Io {
                context: "run containers with the oci runtime".into(),
                source: std::io::Error::other(
                    "runc is not installed: install the `runc` package, or choose `--default-runtime process`",
                ),
            });
        }
        (DefaultRuntime::Oci, Some(_)) => true,
        (DefaultRuntime::Auto, Some(_)) if root_user => true,
        (DefaultRuntime::Auto, found) => {
            let why = match found {
                None => {
                    "runc is not installed: install the `runc` package to run containers from their images"
                }
                Some(_) => {
                    "berth does not run as root, which runc needs to run containers from their images"
                }
            };
            tracing::warn!("pods run their commands on this machine (the process runtime): {why}");
            false
        }
    };
    if let Some(program) = runc {
        runtime.set_runc(crate::runtime::process::Runc {
            program,
            root: data_dir.join("runc"),
        });
    }
    settings.agent.runtime_handler = match oci {
        true => crate::node::OCI_HANDLER,
        false => crate::node::PROCESS_HANDLER,
    }
    .to_string();
    // Pods may ask for the other runtime by RuntimeClass: process always, oci where
    // runc can run.
    settings.agent.other_handlers = match oci {
        true => vec![crate::node::PROCESS_HANDLER.to_string()],
        false if runtime.runs_images() && root_user => vec![crate::node::OCI_HANDLER.to_string()],
        false => Vec::new(),
    };
    tracing::info!(runtime = %settings.agent.runtime_handler, "the node's default runtime");
    Ok(runtime)
}

/// `name` on the PATH, if it is there.
fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

pub use crate::types::default_data_dir;

/// The repositories of the pause image (any tag): containers of them run `berth pause`.
pub const PAUSE_IMAGES: [&str; 3] = [
    "registry.k8s.io/pause",
    "k8s.gcr.io/pause",
    "gcr.io/google-containers/pause",
];

/// A cluster whose data directory is open and ready to serve.
pub struct Cluster {
    pub registry: Registry,
    pub admin_token: String,
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    pub kubeconfig: PathBuf,
    pub url: String,
    tls: Arc<rustls::ServerConfig>,
    address: SocketAddr,
    controllers: Option<controller::Config>,
    node: Option<(NodeSettings, ProcessRuntime)>,
    data_dir: PathBuf,
    limits: api::Limits,
    _lock: DataDirLock,
}

/// The address clients should use for a listen address (`0.0.0.0` means loopback here).
fn client_address(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
}

/// The admin token of `data_dir`, made at first start (random, mode 0600).
fn admin_token(data_dir: &Path) -> Result<String, Error> {
    let path = data_dir.join("admin.token");
    if let Some(t) = read_private(&path)? {
        let t = t.trim().to_string();
        if !t.is_empty() {
            return Ok(t);
        }
    }
    let mut raw = [0u8; 32];
    getrandom::fill(&mut raw).map_err(|e| Error::Io {
        context: "generate the admin token".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    // Letters and digits only: a token that began with '-' would read as an option on
    // command lines (`--token -x...`).
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    tls::write_private(&path, format!("{token}\n").as_bytes())?;
    Ok(token)
}

fn kubeconfig_text(url: &str, ca_pem: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: berth
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: berth-admin
  user:
    token: {token}
contexts:
- name: berth
  context:
    cluster: berth
    user: berth-admin
    namespace: default
current-context: berth
preferences: {{}}
"
    )
}

impl Cluster {
    /// Opens the data directory for serving at `address`.
    pub async fn open(config: &Config, address: SocketAddr) -> Result<Self, Error> {
        let data_dir = config.data_dir().to_path_buf();
        let lock = lock_data_dir(&data_dir)?;
        let store = Store::open(config.store.clone()).await?;
        let registry = Registry::new(store).with_bookmark_interval(config.bookmark_every);
        let (sa_key, sa_public) = tls::ensure_service_account_key(&data_dir)?;
        registry.set_token_keys(crate::registry::satoken::Keys::new(&sa_key, &sa_public));
        let address = client_address(address);
        let url = format!("https://{address}");
        let (tls, ca_pem) = match &config.tls_files {
            Some((cert, key)) => {
                let read = |p: &Path| {
                    std::fs::read_to_string(p).map_err(|source| Error::Io {
                        context: format!("read {}", p.display()),
                        source,
                    })
                };
                let chain = read(cert)?;
                let key = read_private(key)?.ok_or_else(|| {
                    Error::Insecure(format!("--tls-key {} does not exist", key.display()))
                })?;
                let config = tls::server_config(&chain, &key)?;
                // Clients trust the given chain's own root; the kubeconfig carries it.
                (config, chain)
            }
            None => {
                let (ca_pem, ca_key) = tls::ensure_ca(&data_dir)?;
                let mut hosts = vec![
                    "127.0.0.1".to_string(),
                    "::1".to_string(),
                    "localhost".to_string(),
                ];
                hosts.extend(host_name());
                if let Some(net) = config.node.as_ref().and_then(|n| n.network.as_ref()) {
                    // Pods reach the API at the gateway, or through the `kubernetes`
                    // Service by address or name.
                    hosts.push(net.gateway().to_string());
                    hosts.push(crate::types::KUBERNETES_SERVICE_IP.to_string());
                    let domain = &net.cluster_domain;
                    for name in ["kubernetes", "kubernetes.default", "kubernetes.default.svc"] {
                        hosts.push(name.to_string());
                    }
                    hosts.push(format!("kubernetes.default.svc.{domain}"));
                }
                let ip = address.ip().to_string();
                if !hosts.contains(&ip) {
                    hosts.push(ip);
                }
                let (chain, key) = tls::serving_cert(&ca_key, &hosts)?;
                (tls::server_config(&chain, &key)?, ca_pem)
            }
        };
        let admin_token = admin_token(&data_dir)?;
        registry
            .register_token(
                &admin_token,
                &User {
                    name: "admin".into(),
                    groups: vec!["system:masters".into()],
                    ..User::default()
                },
            )
            .await?;
        // The default RBAC roles and bindings, as kube-apiserver's bootstrap policy.
        crate::registry::rbac::defaults::reconcile(&registry).await?;
        // The built-in priority classes, as kube-apiserver's bootstrap hook makes them.
        let classes = crate::client::catalog::of(crate::client::Kind::PriorityClass);
        for class in crate::registry::scheduling::system_classes() {
            match Client::local(registry.clone())
                .create(classes, None, &class)
                .await
            {
                Ok(_) => {}
                Err(e) if e.is_already_exists() => {}
                Err(e) => {
                    return Err(Error::Io {
                        context: "create the built-in priority classes".into(),
                        source: std::io::Error::other(e.to_string()),
                    });
                }
            }
        }
        let kubeconfig = data_dir.join("kubeconfig");
        tls::write_private(
            &kubeconfig,
            kubeconfig_text(&url, &ca_pem, &admin_token).as_bytes(),
        )?;
        Ok(Self {
            registry,
            admin_token,
            ca_pem,
            kubeconfig,
            url,
            tls,
            address,
            controllers: config.run_controllers.then(|| config.controllers.clone()),
            node: match &config.node {
                Some(settings) => {
                    let mut settings = settings.clone();
                    let runtime = open_runtime(&data_dir, &mut settings)?;
                    if let Some(net) = &settings.network {
                        let network =
                            crate::net::pod::PodNetwork::open(net.clone(), &data_dir).await?;
                        settings.agent.network = Some(Arc::new(network));
                        // With a network of their own, pods see the node at an address
                        // of the machine's, not at loopback.
                        if settings.agent.node_ip == "127.0.0.1"
                            && let Some(ip) = crate::net::primary_address()
                        {
                            settings.agent.node_ip = ip.to_string();
                        }
                    }
                    Some((settings, runtime))
                }
                None => None,
            },
            data_dir,
            limits: config.limits.clone(),
            _lock: lock,
        })
    }

    /// The runtime of this cluster's node, if it runs one (its `close` ends every
    /// container: test harnesses call it when they drop a server).
    pub fn runtime(&self) -> Option<ProcessRuntime> {
        self.node.as_ref().map(|(_, rt)| rt.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then closes the store.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), Error> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut supervisor = Supervisor::new();
        let mut listeners = vec![listener];
        // Pods on the pod network reach the API at its gateway (loopback is their own).
        let gateway = self
            .node
            .as_ref()
            .and_then(|(s, _)| s.network.as_ref())
            .map(|n| n.gateway());
        if let Some(gateway) = gateway.filter(|_| !self.address.ip().is_unspecified()) {
            let at = SocketAddr::new(gateway.into(), self.address.port());
            let extra = TcpListener::bind(at).await.map_err(|source| Error::Io {
                context: format!("listen on {at} for the pods"),
                source,
            })?;
            listeners.push(extra);
        }
        // The cluster DNS answers pods at the gateway, published as kube-dns.
        let mut dns_service = None;
        if let (Some(gateway), Some((settings, _))) = (gateway, &self.node) {
            let net = settings.network.clone().unwrap_or_default();
            let dns = crate::net::dns::start(
                &mut supervisor,
                &Client::local(self.registry.clone()),
                crate::net::dns::DnsConfig {
                    listen: vec![SocketAddr::new(gateway.into(), 53)],
                    domain: net.cluster_domain.clone(),
                    upstream: crate::net::dns::Upstream::ResolvConf("/etc/resolv.conf".into()),
                },
            )?;
            dns_service = Some(controller::dnsservice::DnsService {
                cluster_ip: net.dns_service_ip.to_string(),
                address: dns.addresses()[0],
            });
            // Services carried in the kernel, in berth's own nftables table.
            crate::net::proxy::start(
                &mut supervisor,
                &Client::local(self.registry.clone()),
                crate::net::proxy::ProxyConfig::new(net, settings.agent.node_name.clone()),
            );
        }
        if let Some(mut config) = self.controllers {
            config.api_port = Some(self.address.port());
            if dns_service.is_some() {
                config.dns = dns_service;
            }
            // Where pods reach the API: the address served on, or, when that is every
            // address, the node's (loopback without a node agent).
            config.api_ip = match (self.address.ip(), &self.node) {
                _ if gateway.is_some() => gateway.map(|g| g.to_string()).unwrap_or_default(),
                (ip, _) if !ip.is_unspecified() => ip.to_string(),
                (_, Some((settings, _))) => settings.agent.node_ip.clone(),
                _ => "127.0.0.1".into(),
            };
            config.root_ca = Some(self.ca_pem.clone());
            let ctx = controller::Context::new(Client::local(self.registry.clone()), config);
            controller::start(&ctx, &mut supervisor);
        }
        let mut node_access: Option<Arc<dyn api::logs::NodeAccess>> = None;
        let mut agent_access: Option<Arc<dyn api::agent::Agent>> = None;
        let mut stop_pods = None;
        if let Some((settings, runtime)) = self.node {
            if settings.stop_pods_on_exit {
                stop_pods = Some(runtime.clone());
            }
            let mut agent = settings.agent;
            if agent.node_ip == "127.0.0.1" && !self.address.ip().is_loopback() {
                agent.node_ip = self.address.ip().to_string();
            }
            if agent.ca_pem.is_empty() {
                agent.ca_pem = self.ca_pem.clone();
            }
            agent.data_dir = self.data_dir.clone();
            agent.import_images = true;
            if agent.metrics.is_none() {
                agent.metrics = Some(self.registry.metrics().clone());
            }
            if agent.api.is_none() {
                let ip = gateway.map_or_else(|| self.address.ip().to_string(), |g| g.to_string());
                agent.api = Some((ip, self.address.port()));
            }
            // The deployer image runs `berth deploy` (the deployer pods' command), and
            // finds berth as `openshift-deploy` on its PATH (custom strategies call it).
            let bin = self.data_dir.join("bin");
            let alias = bin.join("openshift-deploy");
            let linked = std::fs::create_dir_all(&bin)
                .and_then(|()| match std::fs::remove_file(&alias) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                })
                .and_then(|()| std::os::unix::fs::symlink(&settings.shim_program, &alias));
            match linked {
                Ok(()) => agent.builtin_bin = Some(bin),
                Err(e) => {
                    tracing::warn!(error = %e, path = %alias.display(), "could not link openshift-deploy; custom deployment strategies cannot call it")
                }
            }
            // The pause image, which sandboxes and many tests use, is berth's own
            // `pause`: nothing to pull.
            for pause in PAUSE_IMAGES {
                agent.builtin_images.push((
                    pause.to_string(),
                    vec![
                        settings.shim_program.display().to_string(),
                        "pause".to_string(),
                    ],
                ));
            }
            agent.builtin_images.push((
                crate::types::openshift::DEPLOYER_IMAGE.to_string(),
                vec![
                    settings.shim_program.display().to_string(),
                    "deploy".to_string(),
                ],
            ));
            tracing::info!(node = %agent.node_name, "running pods on this machine");
            let handle = node::start(
                &mut supervisor,
                &Client::local(self.registry.clone()),
                runtime.clone(),
                agent,
            );
            node_access = Some(Arc::new(RuntimeAccess {
                runtime: runtime.clone(),
                handle: handle.clone(),
            }));
            agent_access = Some(Arc::new(AgentAccess { handle, runtime }));
        }
        let state = AppState {
            metrics: api::metrics::Metrics::new(&self.registry),
            registry: self.registry.clone(),
            server_address: self.address.to_string(),
            shutdown: stopped,
            node: node_access,
            agent: agent_access,
            openapi: Arc::default(),
        };
        let router = api::router(state);
        api::serve(listeners, self.tls, router, stop, shutdown, self.limits).await;
        tracing::info!("shutting down");
        supervisor.shutdown(Duration::from_secs(10)).await;
        if let Some(runtime) = stop_pods {
            let closed = tokio::task::spawn_blocking(move || runtime.close()).await;
            match closed {
                Ok(Ok(report)) => tracing::info!(%report, "stopped the pods of this node"),
                Ok(Err(e)) => tracing::warn!(error = %e, "could not stop every pod of this node"),
                Err(e) => tracing::warn!(error = %e, "could not stop every pod of this node"),
            }
        }
        close_store(self.registry.store().clone()).await
    }
}

/// How long closing the store may take at shutdown.
const STORE_CLOSE_DEADLINE: Duration = Duration::from_secs(10);

/// Closes the store, but never waits longer than [`STORE_CLOSE_DEADLINE`]: a backend whose
/// disk is full or failing can block in its final flush for ever. Nothing acknowledged is
/// lost by leaving then: every acknowledged write is in the store's journal, which the
/// next start replays.
async fn close_store(store: crate::store::Store) -> Result<(), Error> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let handle = tokio::runtime::Handle::current();
    // A thread of its own: a flush blocked in the backend holds it, not the runtime.
    let spawned = std::thread::Builder::new()
        .name("berth-store-close".into())
        .spawn(move || {
            let _ = tx.send(handle.block_on(store.close()));
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not close the store; its journal keeps every acknowledged write");
        return Ok(());
    }
    match tokio::time::timeout(STORE_CLOSE_DEADLINE, rx).await {
        Ok(Ok(closed)) => Ok(closed?),
        Ok(Err(_)) => Ok(()),
        Err(_) => {
            tracing::error!(
                deadline_s = STORE_CLOSE_DEADLINE.as_secs(),
                "the store did not close in time (is its disk full or failing?); leaving anyway: every acknowledged write is in its journal, replayed at the next start"
            );
            Ok(())
        }
    }
}

/// The API's view of this machine's containers. The pod uids it is given are the API's,
/// so a mirror pod's uid is first translated to its static pod's.
struct RuntimeAccess {
    runtime: ProcessRuntime,
    handle: node::Handle<ProcessRuntime>,
}

impl api::logs::NodeAccess for RuntimeAccess {
    fn instance(&self, pod_uid: &str, container: &str, previous: bool) -> Option<PathBuf> {
        use crate::runtime::Runtime;
        let pod_uid = &self.handle.translate_uid(pod_uid);
        let mut mine: Vec<_> = self
            .runtime
            .pod_status(pod_uid)
            .ok()?
            .into_iter()
            .filter(|s| s.id.name == container)
            .collect();
        mine.sort_by_key(|s| s.id.attempt);
        let pick = if previous {
            mine.iter().rev().nth(1)
        } else {
            mine.last()
        }?;
        self.runtime
            .log_path(&pick.id)
            .parent()
            .map(Path::to_path_buf)
    }

    fn exec_context(&self, pod_uid: &str, container: &str) -> Option<api::exec::ExecContext> {
        use crate::runtime::Runtime;
        let (id, spec, pid) = self.running(pod_uid, container)?;
        Some(api::exec::ExecContext {
            env: spec.env,
            working_dir: spec.working_dir,
            inside: crate::runtime::Inside {
                pid,
                prefix: self.runtime.exec_prefix(&id),
            },
        })
    }

    fn attach_target(&self, pod_uid: &str, container: &str) -> Option<api::exec::AttachTarget> {
        use crate::runtime::Runtime;
        let (id, spec, _) = self.running(pod_uid, container)?;
        Some(api::exec::AttachTarget {
            dir: self.runtime.log_path(&id).parent()?.to_path_buf(),
            stdio: spec.stdio,
        })
    }
}

impl RuntimeAccess {
    /// The newest running instance of `container`, its spec and its process.
    fn running(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Option<(
        crate::runtime::ContainerId,
        crate::runtime::ContainerSpec,
        Option<i32>,
    )> {
        use crate::runtime::{Runtime, State};
        let pod_uid = &self.handle.translate_uid(pod_uid);
        let running = self
            .runtime
            .pod_status(pod_uid)
            .ok()?
            .into_iter()
            .filter(|s| s.id.name == container && s.state == State::Running)
            .max_by_key(|s| s.id.attempt)?;
        let spec = self.runtime.spec(&running.id)?;
        Some((running.id, spec, running.pid))
    }
}

/// The agent's endpoints' view of the node agent and its runtime.
struct AgentAccess {
    handle: node::Handle<ProcessRuntime>,
    runtime: ProcessRuntime,
}

impl api::agent::Agent for AgentAccess {
    fn node_name(&self) -> &str {
        self.handle.node_name()
    }

    fn pod_netns(&self, uid: &str) -> Option<PathBuf> {
        let uid = self.handle.translate_uid(uid);
        self.handle.pod_address(&uid)?;
        let holder = self.runtime.sandbox_holder(&uid)?;
        Some(PathBuf::from(format!("/proc/{holder}/ns/net")))
    }

    fn healthy(&self) -> Result<(), String> {
        self.handle.healthy()
    }

    fn pods(&self) -> Vec<serde_json::Value> {
        self.handle.pods()
    }

    /// Each pod the runtime holds, with its containers' newest instances.
    fn running_pods(&self) -> Vec<serde_json::Value> {
        use crate::runtime::Runtime;
        let mut out = Vec::new();
        for uid in self.runtime.pods().unwrap_or_default() {
            let mut newest: Vec<crate::runtime::ContainerStatus> = Vec::new();
            for s in self.runtime.pod_status(&uid).unwrap_or_default() {
                match newest.iter_mut().find(|n| n.id.name == s.id.name) {
                    Some(n) if n.id.attempt < s.id.attempt => *n = s,
                    Some(_) => {}
                    None => newest.push(s),
                }
            }
            let Some(spec) = newest.first().and_then(|s| self.runtime.spec(&s.id)) else {
                continue;
            };
            let containers: Vec<serde_json::Value> = newest
                .iter()
                .map(|s| serde_json::json!({"name": s.id.name, "image": s.image}))
                .collect();
            let statuses: Vec<serde_json::Value> = newest
                .iter()
                .map(|s| {
                    serde_json::json!({
                        "name": s.id.name,
                        "containerID": format!("process://{}", s.id),
                        "state": format!("{:?}", s.state).to_lowercase(),
                    })
                })
                .collect();
            out.push(serde_json::json!({
                "metadata": {"name": spec.pod_name, "namespace": spec.pod_namespace, "uid": uid},
                "spec": {"containers": containers},
                "status": {"containerStatuses": statuses},
            }));
        }
        out
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<serde_json::Value> {
        self.handle.pod(namespace, name)
    }

    fn translate_uid(&self, uid: &str) -> String {
        self.handle.translate_uid(uid)
    }

    fn pod_status(&self, pod: &serde_json::Value) -> serde_json::Value {
        self.handle.pod_status(pod)
    }
}

/// Binds `listen`, opens the cluster and serves until `shutdown` completes.
pub async fn serve(
    config: Config,
    listen: SocketAddr,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    let started = Instant::now();
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| Error::Io {
            context: format!(
                "listen on {listen} (is another server using it? pass --listen ADDR:PORT)"
            ),
            source,
        })?;
    let address = listener.local_addr().map_err(|source| Error::Io {
        context: "read the listening address".into(),
        source,
    })?;
    if !address.ip().is_loopback() {
        tracing::warn!(
            %address,
            "listening beyond loopback: anyone who can reach this address and holds the admin token has full access"
        );
    }
    let cluster = Cluster::open(&config, address).await?;
    tracing::info!(url = %cluster.url, "serving the Kubernetes API");
    tracing::info!(kubeconfig = %cluster.kubeconfig.display(), "kubeconfig written (export KUBECONFIG=... to use it)");
    // The token itself never goes to the log: it is in the kubeconfig and admin.token.
    tracing::info!(
        "console: {}/console/ (sign in with the token in {})",
        cluster.url,
        config.data_dir().join("admin.token").display()
    );
    tracing::info!(
        elapsed_ms = started.elapsed().as_secs_f64() * 1e3,
        data_dir = %config.data_dir().display(),
        "ready"
    );
    cluster.serve(listener, shutdown).await
}
