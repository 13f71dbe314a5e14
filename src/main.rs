//! The `berth` command: argument parsing and dispatch only.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

use berth::store;

#[derive(Parser)]
#[command(
    name = "berth",
    version,
    about = "A whole single-node Kubernetes-compatible cluster in one binary"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the cluster.
    Serve {
        /// Where berth keeps its state.
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
        /// Address and port to serve the API on (HTTPS).
        #[arg(long, default_value = "127.0.0.1:6443")]
        listen: std::net::SocketAddr,
        /// Serve this certificate chain (PEM) instead of the generated one; needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Bytes the store may take on disk before it refuses writes other than deletions
        /// (507, until compaction brings it under), as etcd's flag; 0: no quota.
        #[arg(long, default_value_t = 2 << 30)]
        quota_backend_bytes: u64,
        /// Keep at least this many of the latest events for watches to resume from ...
        #[arg(long, default_value_t = 10_000)]
        store_retain_events: u64,
        /// ... or every event of this many last seconds (kube-apiserver compacts every
        /// 5 minutes), whichever keeps more ...
        #[arg(long, default_value_t = 300)]
        store_retain_seconds: u64,
        /// ... but never more than this many MiB of them on disk (0: no bound).
        #[arg(long, default_value_t = 64)]
        store_retain_mib: u64,
        /// The most recent events kept in memory for watches, in MiB (a watch further
        /// behind reads the disk).
        #[arg(long, default_value_t = 32)]
        store_watch_cache_mib: u64,
        /// ... and none older than this many seconds (kube-apiserver keeps 75 s of its
        /// watch cache fresh), so that the memory of a burst of writes goes back.
        #[arg(long, default_value_t = 75)]
        store_watch_cache_seconds: u64,
        /// How often the retention above is enforced, in seconds (kube-apiserver's
        /// --etcd-compaction-interval; compaction also runs as soon as the history grows
        /// by a quarter of --store-retain-mib, or a write finds the quota full).
        #[arg(long, default_value_t = 60)]
        store_compaction_interval: u64,
        /// Serve the control plane only: run no pods on this machine.
        #[arg(long)]
        no_node: bool,
        /// The name this machine's node registers under (default: the host name).
        #[arg(long)]
        node_name: Option<String>,
        /// How many pods this machine's node takes.
        #[arg(long, default_value_t = 110)]
        max_pods: u32,
        /// Run the pods of the manifests here (a file, or a directory of YAML or JSON
        /// files, one pod each) as static pods, mirrored into the API.
        #[arg(long)]
        pod_manifest_path: Option<PathBuf>,
        /// Run containers without cgroups: their resource limits are not enforced.
        #[arg(long)]
        no_cgroups: bool,
        /// End every pod's containers when berth stops (by default they run on, and the
        /// next `berth serve` on the data directory adopts them; `berth node reset` ends
        /// them later).
        #[arg(long)]
        stop_pods_on_exit: bool,
        /// The runtime of pods that name no RuntimeClass: `oci` runs each container in
        /// its image's root filesystem through runc, `process` runs its command on this
        /// machine; `auto` is `oci` where runc is installed and berth runs as root.
        #[arg(long, value_enum, default_value_t = berth::app::DefaultRuntime::Auto)]
        default_runtime: berth::app::DefaultRuntime,
        /// The pods' addresses: each pod without hostNetwork gets a network namespace of
        /// its own on the bridge berth0 with an address of this range (needs root). An
        /// IPv6 range after a comma makes the pods dual-stack (10.42.0.0/16,fd42::/64:
        /// an IPv6 address each too, a /64 to a /120); IPv4 stays the primary family.
        #[arg(long, default_value = "10.42.0.0/16")]
        pod_cidr: berth::net::PodCidrs,
        /// Run every pod in this machine's network (no pod network, as without root).
        #[arg(long, env = "BERTH_NO_POD_NETWORK")]
        no_pod_network: bool,
        /// The cluster's DNS domain: Services are <name>.<namespace>.svc.<domain>.
        #[arg(long, default_value = "cluster.local")]
        cluster_domain: String,
        /// The node's registries file (k3s's `registries.yaml` format): mirrors tried
        /// before a registry, plain-HTTP and self-signed registries with their CA, and
        /// credentials per registry.
        #[arg(long)]
        registries: Option<PathBuf>,
        /// Unused images are removed when the image store's disk is this full (percent),
        /// least recently used first, ...
        #[arg(long, default_value_t = 85, value_parser = clap::value_parser!(u8).range(1..=100))]
        image_gc_high_threshold: u8,
        /// ... until it is this full (percent).
        #[arg(long, default_value_t = 80, value_parser = clap::value_parser!(u8).range(0..=100))]
        image_gc_low_threshold: u8,
        /// How often the node measures the resource metrics of `kubectl top` and the
        /// autoscalers (`15s`, `1500ms`).
        #[arg(long, default_value = "15s", value_parser = parse_resolution)]
        metric_resolution: std::time::Duration,
        /// How often each HorizontalPodAutoscaler is synced (kube-controller-manager's
        /// `--horizontal-pod-autoscaler-sync-period`).
        #[arg(long, default_value = "15s", value_parser = parse_resolution)]
        hpa_sync_period: std::time::Duration,
        /// How long an autoscaler waits, remembering its recommendations, before it scales
        /// down (`--horizontal-pod-autoscaler-downscale-stabilization`; a `behavior` may
        /// set its own).
        #[arg(long, default_value = "5m", value_parser = parse_window)]
        hpa_downscale_stabilization: std::time::Duration,
    },
    /// Storage schema migrations.
    Migrate {
        #[command(subcommand)]
        command: MigrateCommand,
    },
    /// Run one container and record how it ends (started by the node agent).
    #[command(hide = true)]
    Shim {
        /// The container instance's state directory.
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 10 << 20)]
        log_max_bytes: u64,
        #[arg(long, default_value_t = 5)]
        log_files: u32,
        /// Keep the container's stdin open for attached clients.
        #[arg(long)]
        stdin: bool,
        /// Close the container's stdin when the first attached client closes it.
        #[arg(long)]
        stdin_once: bool,
        /// Run the container on a pseudo-terminal.
        #[arg(long)]
        tty: bool,
        /// The container's command and arguments.
        #[arg(last = true, required = true)]
        argv: Vec<String>,
    },
    /// Show, start, cancel or retry deployments of a DeploymentConfig (oc's legacy
    /// `deploy dc/NAME [--latest|--cancel|--retry]`); without a config, carry out one
    /// deployment (the deployer pods' command, also reachable as `openshift-deploy`).
    Deploy {
        /// The deployment config (`dc/NAME`) to show or act on.
        config: Option<String>,
        /// Start a new deployment.
        #[arg(long, requires = "config", conflicts_with_all = ["cancel", "retry"])]
        latest: bool,
        /// Cancel the deployment in progress.
        #[arg(long, requires = "config", conflicts_with = "retry")]
        cancel: bool,
        /// Retry the failed latest deployment.
        #[arg(long, requires = "config")]
        retry: bool,
        /// With --latest: follow the deployment's log.
        #[arg(long, requires = "latest")]
        follow: bool,
        /// With a config: the kubeconfig to use.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// With a config: the kubeconfig context to use.
        #[arg(long)]
        context: Option<String>,
        /// The deployment (replication controller) to carry out.
        #[arg(long, env = "OPENSHIFT_DEPLOYMENT_NAME", default_value = "")]
        deployment: String,
        /// Its namespace (with a config: the config's).
        #[arg(
            short = 'n',
            long,
            env = "OPENSHIFT_DEPLOYMENT_NAMESPACE",
            default_value = ""
        )]
        namespace: String,
        /// Stop when this condition is reached: start, pre, mid, or N% (0..100).
        #[arg(long)]
        until: Option<String>,
        /// The API server (default: from KUBERNETES_SERVICE_HOST and _PORT).
        #[arg(long, env = "OPENSHIFT_MASTER")]
        server: Option<String>,
        /// The bearer token (default: read from --token-file).
        #[arg(long, env = "BEARER_TOKEN", hide_env_values = true)]
        token: Option<String>,
        #[arg(long, env = "BEARER_TOKEN_FILE", default_value = SERVICE_ACCOUNT_TOKEN)]
        token_file: PathBuf,
        /// The CA certificate (PEM) that signed the server's certificate.
        #[arg(long, env = "OPENSHIFT_CA_FILE", default_value = SERVICE_ACCOUNT_CA)]
        ca: PathBuf,
    },
    /// Save or restore the whole object store (berth must not be running on it).
    Snapshot {
        #[command(subcommand)]
        command: SnapshotCommand,
    },
    /// Do nothing until SIGTERM or SIGINT, then exit 0: the pause image's command, and
    /// the holder of a pod sandbox's namespaces (reaping what ends below it).
    #[command(hide = true)]
    Pause {
        /// Make and hold a pod sandbox's namespaces: new UTS (this host name) and IPC.
        #[arg(long)]
        sandbox: Option<String>,
        /// Keep this machine's UTS namespace and host name (hostNetwork).
        #[arg(long)]
        host_uts: bool,
        /// Keep this machine's IPC namespace (hostIPC).
        #[arg(long)]
        host_ipc: bool,
        /// A PID namespace for the pod's containers to share, whose first process is a
        /// pause of its own (shareProcessNamespace).
        #[arg(long)]
        share_pids: bool,
        /// A network namespace of the pod's own (the node wires it to the pod network).
        #[arg(long)]
        network: bool,
        /// Where the pid of the process holding the namespaces is written.
        #[arg(long)]
        pid_file: Option<PathBuf>,
    },
    /// The images of this machine's store: import archives, list, inspect, remove.
    Image {
        #[command(subcommand)]
        command: ImageCommand,
    },
    /// This machine's node: end what a stopped berth left running, or list it.
    Node {
        #[command(subcommand)]
        command: NodeCommand,
    },
    /// Print a shell completion script (`source <(berth completion bash)`).
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    #[command(flatten)]
    Client(berth::cli::Verb),
}

#[derive(Subcommand)]
enum NodeCommand {
    /// End every container of a stopped berth's data directory (its shims, their process
    /// groups, whatever is in its cgroups) and remove its cgroups and mounts. Refused while
    /// a berth serves the directory; running it again is harmless.
    Reset {
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// List what berth left on this machine (or of one data directory): pod processes,
    /// cgroups, mounts, and network namespaces, links and nftables tables named as
    /// berth's. Exits 1 when there is anything.
    Leftovers {
        /// Only what this data directory's node left (else: every berth on the machine).
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum MigrateCommand {
    /// Print the storage schema version and the pending migrations.
    Status {
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum SnapshotCommand {
    /// Write a consistent copy of the store to FILE.
    Save {
        file: PathBuf,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Create the store of an empty data directory from FILE.
    Restore {
        file: PathBuf,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Import the images of OCI or docker archives (`.tar`, `.tar.gz`, `.tar.zst`).
    Import {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The name of images the archive leaves unnamed or names by a tag only.
        #[arg(long)]
        name: Option<String>,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Pull an image from its registry (or a mirror the registries file names).
    Pull {
        reference: String,
        /// A registries file as `serve --registries` takes (mirrors, TLS, credentials).
        #[arg(long)]
        registries: Option<PathBuf>,
        /// USER:PASSWORD for the image's registry.
        #[arg(long)]
        creds: Option<String>,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// List the images.
    #[command(alias = "list")]
    Ls {
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Print an image's record and config as JSON.
    Inspect {
        name: String,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Remove images (and the layers no other image uses).
    Rm {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
    /// Remove the blobs and layers no image uses.
    Prune {
        #[arg(long, env = "BERTH_DATA_DIR")]
        data_dir: Option<PathBuf>,
    },
}

const SERVICE_ACCOUNT_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// The arguments, with `deploy` put first when berth runs as `openshift-deploy`.
fn arguments() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned());
    if invoked_as.as_deref() == Some("openshift-deploy") {
        args.insert(1, "deploy".into());
    }
    args
}

#[allow(clippy::too_many_arguments)]
fn deploy(
    deployment: String,
    namespace: String,
    until: Option<String>,
    server: Option<String>,
    token: Option<String>,
    token_file: PathBuf,
    ca: PathBuf,
) -> anyhow::Result<i32> {
    let server = match server {
        Some(s) => s,
        None => {
            let host = std::env::var("KUBERNETES_SERVICE_HOST")
                .context("--server, OPENSHIFT_MASTER or KUBERNETES_SERVICE_HOST is required")?;
            let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
            if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            }
        }
    };
    let token = match token {
        Some(t) => t,
        None => std::fs::read_to_string(&token_file)
            .with_context(|| format!("read the token {}", token_file.display()))?
            .trim()
            .to_string(),
    };
    let ca_pem = std::fs::read_to_string(&ca)
        .with_context(|| format!("read the CA certificate {}", ca.display()))?;
    let opts = berth::deploy::Options {
        server,
        ca_pem,
        token,
        namespace,
        deployment,
        until: until.as_deref().and_then(berth::deploy::Until::parse),
    };
    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
    Ok(rt.block_on(berth::deploy::main(opts)))
}

fn data_dir(given: Option<PathBuf>) -> PathBuf {
    given.unwrap_or_else(berth::app::default_data_dir)
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse_from(arguments()).command;
    // The client verbs print what they did; their logs are for when something is off.
    let level = match command {
        Command::Client(_) => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BERTH_LOG")
                // The DNS server's library logs every answer at info.
                .unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new(format!("{level},hickory_server=warn"))
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    match command {
        Command::Client(verb) => std::process::exit(berth::cli::run(verb)),
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "berth", &mut script);
            // A closed pipe (`| head`) is not an error worth a panic.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
        }
        Command::Deploy {
            config: Some(config),
            latest,
            cancel,
            retry,
            follow,
            kubeconfig,
            context,
            namespace,
            server,
            token,
            ..
        } => {
            use berth::cli::deploy::Action;
            let conn = berth::cli::ConnArgs {
                kubeconfig,
                context,
                namespace: Some(namespace).filter(|n| !n.is_empty()),
                server,
                token,
                certificate_authority: None,
            };
            let action = match (latest, cancel, retry) {
                (true, _, _) => Action::Latest { follow },
                (_, true, _) => Action::Cancel,
                (_, _, true) => Action::Retry,
                _ => Action::Status,
            };
            std::process::exit(berth::cli::run_deploy(conn, config, action));
        }
        Command::Deploy {
            config: None,
            deployment,
            namespace,
            until,
            server,
            token,
            token_file,
            ca,
            ..
        } => {
            let code = deploy(deployment, namespace, until, server, token, token_file, ca)?;
            std::process::exit(code);
        }
        Command::Shim {
            dir,
            log_max_bytes,
            log_files,
            stdin,
            stdin_once,
            tty,
            argv,
        } => {
            let rotation = berth::runtime::shim::Rotation {
                max_bytes: log_max_bytes,
                files: log_files,
            };
            std::process::exit(berth::runtime::shim::run_process(
                &dir,
                &argv,
                rotation,
                berth::runtime::Stdio {
                    stdin,
                    stdin_once,
                    tty,
                },
                &mut std::io::stdout(),
            ));
        }
        Command::Serve {
            data_dir: dir,
            listen,
            tls_cert,
            tls_key,
            quota_backend_bytes,
            store_retain_events,
            store_retain_seconds,
            store_retain_mib,
            store_watch_cache_mib,
            store_watch_cache_seconds,
            store_compaction_interval,
            no_node,
            node_name,
            max_pods,
            pod_manifest_path,
            no_cgroups,
            stop_pods_on_exit,
            default_runtime,
            pod_cidr,
            no_pod_network,
            cluster_domain,
            registries,
            image_gc_high_threshold,
            image_gc_low_threshold,
            metric_resolution,
            hpa_sync_period,
            hpa_downscale_stabilization,
        } => {
            let mut config = berth::app::Config::new(data_dir(dir));
            config.store.quota_bytes = quota_backend_bytes;
            config.store.retain_events = store_retain_events;
            config.store.retain_for = std::time::Duration::from_secs(store_retain_seconds);
            config.store.retain_bytes = store_retain_mib << 20;
            config.store.history_bytes = store_watch_cache_mib << 20;
            config.store.history_for = std::time::Duration::from_secs(store_watch_cache_seconds);
            config.store.compact_every =
                std::time::Duration::from_secs(store_compaction_interval.max(1));
            config.tls_files = tls_cert.zip(tls_key);
            config.controllers.hpa_sync = hpa_sync_period;
            config.controllers.hpa_downscale_window = hpa_downscale_stabilization;
            if !no_node {
                let mut node = berth::app::NodeSettings::for_this_machine(node_name);
                node.agent.max_pods = max_pods;
                node.agent.pod_manifest_path = pod_manifest_path;
                node.cgroups = !no_cgroups;
                node.stop_pods_on_exit = stop_pods_on_exit;
                node.runtime = default_runtime;
                node.agent.metrics_every = metric_resolution;
                let root = rustix::process::geteuid().is_root();
                if !no_pod_network && root {
                    node.network = Some(berth::net::Config {
                        pod_cidr: pod_cidr.v4,
                        pod_cidr_v6: pod_cidr.v6,
                        cluster_domain: cluster_domain.trim_matches('.').to_string(),
                        ..Default::default()
                    });
                } else if !no_pod_network {
                    tracing::warn!(
                        "pods share this machine's network: a pod network needs berth to run as root (--no-pod-network silences this)"
                    );
                }
                if image_gc_low_threshold >= image_gc_high_threshold {
                    anyhow::bail!(
                        "--image-gc-low-threshold ({image_gc_low_threshold}) must be below --image-gc-high-threshold ({image_gc_high_threshold})"
                    );
                }
                node.agent.image_gc = berth::node::GcThresholds {
                    high: image_gc_high_threshold,
                    low: image_gc_low_threshold,
                };
                if let Some(file) = registries {
                    node.agent.registries =
                        berth::image::pull::Registries::load(&file).map_err(anyhow::Error::msg)?;
                }
                config.node = Some(node);
            }
            let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
            let served =
                rt.block_on(async { berth::app::serve(config, listen, shutdown_signal()).await });
            // A task or thread still blocked (a backend stuck in a flush) does not hold
            // the process: what was acknowledged is durable already.
            rt.shutdown_timeout(std::time::Duration::from_secs(1));
            served?;
        }
        Command::Node {
            command: NodeCommand::Reset { data_dir: dir },
        } => {
            let dir = data_dir(dir);
            let (report, network) = berth::app::reset_node(&dir)?;
            println!("{report}");
            if network {
                println!(
                    "removed the pod network (the bridge, berth's nftables tables, the address records)"
                );
            }
        }
        Command::Node {
            command: NodeCommand::Leftovers { data_dir: dir },
        } => {
            use berth::runtime::reset;
            let found = match dir {
                Some(dir) => reset::leftovers_of(&berth::app::pods_dir(&dir)),
                None => reset::leftovers_on_this_machine(),
            };
            print!("{found}");
            std::process::exit(i32::from(!found.is_empty()));
        }
        Command::Migrate {
            command: MigrateCommand::Status { data_dir: dir },
        } => {
            let dir = data_dir(dir);
            let status = store::migrate::status(&dir)
                .with_context(|| format!("read the store in {}", dir.display()))?;
            print!("{status}");
        }
        Command::Pause {
            sandbox,
            host_uts,
            host_ipc,
            share_pids,
            network,
            pid_file,
        } => {
            // The namespaces are made while this process has one thread.
            let mut holder = None;
            if let (Some(hostname), Some(pid_file)) = (&sandbox, &pid_file) {
                let me = std::env::current_exe().context("find this program")?;
                holder = berth::runtime::oci::hold_namespaces(
                    (!host_uts).then_some(hostname.as_str()),
                    !host_ipc,
                    network,
                    share_pids,
                    &[me.display().to_string(), "pause".to_string()],
                    pid_file,
                )
                .context("make the pod's sandbox")?;
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("start the async runtime")?;
            rt.block_on(async {
                use tokio::signal::unix::{SignalKind, signal};
                let mut term = signal(SignalKind::terminate())?;
                let mut int = signal(SignalKind::interrupt())?;
                let mut child = signal(SignalKind::child())?;
                loop {
                    tokio::select! {
                        _ = term.recv() => break,
                        _ = int.recv() => break,
                        _ = child.recv() => match holder.as_mut() {
                            // The holder of the namespaces ended: so does the sandbox.
                            Some(h) => {
                                if h.try_wait().ok().flatten().is_some() {
                                    break;
                                }
                            }
                            // The first process of a PID namespace reaps its orphans.
                            None => {
                                use rustix::process::{WaitOptions, wait};
                                while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
                            }
                        },
                    }
                }
                Ok::<(), std::io::Error>(())
            })?;
            if let Some(mut h) = holder {
                if let Some(pid) = rustix::process::Pid::from_raw(h.id() as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                }
                let _ = h.wait();
            }
        }
        Command::Image { command } => {
            use berth::image::command as image;
            let out = match command {
                ImageCommand::Import {
                    files,
                    name,
                    data_dir: d,
                } => image::import(&data_dir(d), &files, name.as_deref()),
                ImageCommand::Pull {
                    reference,
                    registries,
                    creds,
                    data_dir: d,
                } => {
                    let rt = tokio::runtime::Runtime::new().context("start the async runtime")?;
                    rt.block_on(image::pull(
                        &data_dir(d),
                        &reference,
                        registries.as_deref(),
                        creds.as_deref(),
                    ))
                }
                ImageCommand::Ls { data_dir: d } => image::list(&data_dir(d)),
                ImageCommand::Inspect { name, data_dir: d } => image::inspect(&data_dir(d), &name),
                ImageCommand::Rm { names, data_dir: d } => image::remove(&data_dir(d), &names),
                ImageCommand::Prune { data_dir: d } => image::prune(&data_dir(d)),
            };
            print!("{}", out?);
        }
        Command::Snapshot { command } => match command {
            SnapshotCommand::Save {
                file,
                data_dir: dir,
            } => {
                let info = store::snapshot::save(&data_dir(dir), &file)?;
                println!(
                    "saved {} entries at revision {} (schema v{}) to {}",
                    info.entries,
                    info.revision,
                    info.schema,
                    file.display()
                );
            }
            SnapshotCommand::Restore {
                file,
                data_dir: dir,
            } => {
                let info = store::snapshot::restore(&file, &dir)?;
                println!(
                    "restored {} entries at revision {} (schema v{}) into {}",
                    info.entries,
                    info.revision,
                    info.schema,
                    dir.display()
                );
            }
        },
    }
    Ok(())
}

/// Completes on SIGINT or SIGTERM. The handlers are installed when this is called, so a
/// signal that arrives while berth is still starting is not lost.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(term.take()) => {}
            _ = wait(int.take()) => {}
        }
    }
}

/// A resolution as metrics-server takes it: seconds or milliseconds, at least 100 ms.
/// A window such as `5m`, `90s` or `0s` (none).
fn parse_window(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 5m, 90s or 0s");
    let (number, unit) = match text.strip_suffix('m') {
        Some(n) => (n, 60.0),
        None => (text.strip_suffix('s').unwrap_or(text), 1.0),
    };
    let n: f64 = number.parse().map_err(|_| bad())?;
    if !n.is_finite() || !(0.0..=86_400.0).contains(&(n * unit)) {
        return Err(bad());
    }
    Ok(std::time::Duration::from_secs_f64(n * unit))
}

fn parse_resolution(text: &str) -> Result<std::time::Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 15s or 1500ms");
    let d = if let Some(ms) = text.strip_suffix("ms") {
        std::time::Duration::from_millis(ms.parse().map_err(|_| bad())?)
    } else {
        let secs: f64 = text
            .strip_suffix('s')
            .unwrap_or(text)
            .parse()
            .map_err(|_| bad())?;
        if !secs.is_finite() || secs < 0.0 {
            return Err(bad());
        }
        std::time::Duration::from_secs_f64(secs)
    };
    if d < std::time::Duration::from_millis(100) {
        return Err(format!(
            "{text:?} is too short: measure at most every 100ms"
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn durations_of_the_flags_parse_as_documented() {
        assert_eq!(parse_resolution("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_resolution("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_resolution("50ms").is_err());
        assert_eq!(parse_window("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_window("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_window("0s"), Ok(Duration::ZERO));
        assert_eq!(
            parse_window("soon"),
            Err("\"soon\" is not a duration such as 5m, 90s or 0s".into())
        );
        assert!(parse_window("-1s").is_err());
    }
}
