//! The client half of the `berth` binary: kubectl-style verbs and OpenShift's rollout
//! verbs, speaking to a berth (or any Kubernetes) API server over HTTPS.
//!
//! Each verb is a function from its parsed arguments and a [`conn::Conn`] to what it
//! prints; failures are [`CliError`]s, printed the way kubectl and oc print them
//! (`Error from server (NotFound): ...` or `error: ...`) with a non-zero exit code.

pub mod apply;
pub mod conn;
pub mod delete;
pub mod deploy;
pub mod describe;
pub mod edit;
pub mod events;
pub mod exec;
pub mod get;
pub mod info;
pub mod logs;
pub mod print;
pub mod resource;
pub mod rollout;
pub mod rollout_apps;
pub mod rollout_revisions;
pub mod tabwriter;
pub mod wait;

use std::io::Write;

use clap::Subcommand;

use crate::client;

pub use conn::{Conn, ConnArgs};

/// A failure of a client verb: what to print and the exit code.
#[derive(Debug, Clone)]
pub struct CliError {
    /// The message; printed after `error: `, or after `Error from server (<reason>): `
    /// when the server refused.
    pub message: String,
    /// The server's reason (`NotFound`, `Conflict`, ...) when the server refused.
    pub reason: Option<&'static str>,
    pub code: i32,
}

impl CliError {
    pub fn msg(message: impl Into<String>) -> Self {
        CliError {
            message: message.into(),
            reason: None,
            code: 1,
        }
    }

    /// How the error reads on the terminal.
    pub fn text(&self) -> String {
        match self.reason {
            Some(r) => format!("Error from server ({r}): {}", self.message),
            None => format!("error: {}", self.message),
        }
    }
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

/// The reason kubectl names for a refusal of the server.
fn reason(e: &client::Error) -> Option<&'static str> {
    use client::Error as E;
    Some(match e {
        E::NotFound(_) => "NotFound",
        E::AlreadyExists(_) => "AlreadyExists",
        E::Conflict(_) => "Conflict",
        E::Invalid(_) => "Invalid",
        E::BadRequest(_) => "BadRequest",
        E::Unauthorized(_) => "Unauthorized",
        E::Forbidden(_) => "Forbidden",
        E::Gone(_) => "Expired",
        E::TooManyRequests(_) => "TooManyRequests",
        E::Server { .. } => "InternalError",
        E::Transport(_) | E::Decode { .. } => return None,
    })
}

impl Conn {
    /// A client error as the user should read it: the server's refusals as kubectl
    /// prints them, connection problems with what to check.
    pub fn error(&self, e: client::Error) -> CliError {
        match reason(&e) {
            Some(reason) => CliError {
                message: match e {
                    client::Error::Server { message, .. } => message,
                    other => other.to_string(),
                },
                reason: Some(reason),
                code: 1,
            },
            None => CliError::msg(format!(
                "cannot talk to the API server at {} (settings from {}): {e}\n\
                 Is 'berth serve' running there? Use --kubeconfig or KUBECONFIG to pick \
                 another cluster.",
                self.server, self.source
            )),
        }
    }
}

/// The client verbs of the `berth` binary.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Display one or many resources.
    Get {
        #[command(flatten)]
        args: get::GetArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Start, follow, cancel, retry, pause, resume, undo or restart the rollouts of a
    /// DeploymentConfig (`dc/NAME`) or a Deployment (`deploy/NAME`).
    Rollout {
        #[command(subcommand)]
        command: rollout::Command,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Roll a DeploymentConfig back to an earlier deployment (`dc/NAME` or `rc/NAME`).
    Rollback {
        #[command(flatten)]
        args: deploy::RollbackArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Set the number of replicas of an RC or a DeploymentConfig.
    Scale {
        #[command(flatten)]
        sel: edit::Selection,
        /// The new number of replicas.
        #[arg(long)]
        replicas: i64,
        /// Only if the current number of replicas is this.
        #[arg(long)]
        current_replicas: Option<i64>,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Add, change or remove labels: `TYPE NAME key=value key2-`.
    Label {
        #[command(flatten)]
        args: edit::MetaArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Add, change or remove annotations: `TYPE NAME key=value key2-`.
    Annotate {
        #[command(flatten)]
        args: edit::MetaArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Change fields of objects with a patch.
    Patch {
        #[command(flatten)]
        sel: edit::Selection,
        /// The patch, JSON or YAML.
        #[arg(short = 'p', long)]
        patch: String,
        /// strategic, merge or json.
        #[arg(long = "type", default_value = "strategic")]
        kind: String,
        /// Patch the `status` subresource.
        #[arg(long)]
        subresource: Option<String>,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Show the details of objects and their events, as `kubectl describe` (and `oc
    /// describe` for DeploymentConfigs) prints them.
    Describe {
        #[command(flatten)]
        args: describe::DescribeArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Print the log of a container: `POD [CONTAINER]`, `rc/NAME` or `dc/NAME`.
    Logs {
        #[command(flatten)]
        args: logs::LogArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Run a command in a container: `POD -- COMMAND [ARGS...]`.
    Exec {
        #[command(flatten)]
        args: exec::ExecArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List events, newest last.
    Events {
        #[command(flatten)]
        args: events::EventArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Print the client's and the server's version.
    Version {
        /// The client's version only (no server needed).
        #[arg(long)]
        client: bool,
        /// json or yaml.
        #[arg(short = 'o', long)]
        output: Option<String>,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// List the resource types the server serves.
    ApiResources {
        /// wide or name.
        #[arg(short = 'o', long)]
        output: Option<String>,
        /// Only namespaced (true) or cluster-wide (false) types.
        #[arg(long)]
        namespaced: Option<bool>,
        /// Only types of this API group (`""` for the core group).
        #[arg(long)]
        api_group: Option<String>,
        #[arg(long)]
        no_headers: bool,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Create objects from manifest files (`-f FILE|DIR|-`).
    Create {
        #[command(flatten)]
        args: apply::CreateArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Create or update objects from manifest files, keeping what was applied.
    Apply {
        #[command(flatten)]
        args: apply::ApplyArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Delete objects by type and name, by manifest file, or by label selector.
    Delete {
        #[command(flatten)]
        args: delete::DeleteArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
    /// Wait until objects meet a condition or are deleted.
    Wait {
        #[command(flatten)]
        args: wait::WaitArgs,
        #[command(flatten)]
        conn: ConnArgs,
    },
}

/// Runs a client verb; returns the process exit code.
pub fn run(verb: Verb) -> i32 {
    block(async move {
        match verb {
            Verb::Get { args, conn } => get::get(&Conn::open(&conn)?, &args).await,
            Verb::Rollout { command, conn } => {
                let conn = Conn::open(&conn)?;
                rollout::run(&conn, command).await
            }
            Verb::Rollback { args, conn } => deploy::rollback(&Conn::open(&conn)?, &args).await,
            Verb::Create { args, conn } => apply::create(&Conn::open(&conn)?, args).await,
            Verb::Apply { args, conn } => apply::apply(&Conn::open(&conn)?, args).await,
            Verb::Delete { args, conn } => delete::run(&Conn::open(&conn)?, args).await,
            Verb::Wait { args, conn } => wait::run(&Conn::open(&conn)?, args).await,
            Verb::Scale {
                sel,
                replicas,
                current_replicas,
                conn,
            } => edit::scale(&Conn::open(&conn)?, &sel, replicas, current_replicas).await,
            Verb::Label { args, conn } => {
                edit::set_meta(&Conn::open(&conn)?, edit::MetaMap::Labels, &args).await
            }
            Verb::Annotate { args, conn } => {
                edit::set_meta(&Conn::open(&conn)?, edit::MetaMap::Annotations, &args).await
            }
            Verb::Patch {
                sel,
                patch,
                kind,
                subresource,
                conn,
            } => {
                let conn = Conn::open(&conn)?;
                edit::patch(&conn, &sel, &patch, &kind, subresource.as_deref()).await
            }
            Verb::Describe { args, conn } => describe::describe(&Conn::open(&conn)?, &args).await,
            Verb::Logs { args, conn } => logs::logs(&Conn::open(&conn)?, &args).await,
            Verb::Exec { args, conn } => exec::exec(&Conn::open(&conn)?, &args).await,
            Verb::Events { args, conn } => events::events(&Conn::open(&conn)?, &args).await,
            Verb::Version {
                client,
                output,
                conn,
            } => {
                let conn = if client {
                    None
                } else {
                    Some(Conn::open(&conn)?)
                };
                info::version(conn.as_ref(), output.as_deref()).await
            }
            Verb::ApiResources {
                output,
                namespaced,
                api_group,
                no_headers,
                conn,
            } => {
                let conn = Conn::open(&conn)?;
                info::api_resources(
                    &conn,
                    output.as_deref(),
                    namespaced,
                    api_group.as_deref(),
                    no_headers,
                )
                .await
            }
        }
    })
}

/// `deploy DC [--latest|--cancel|--retry]`, oc's legacy verb (the `deploy` subcommand
/// without a DC is the deployer process).
pub fn run_deploy(conn: ConnArgs, target: String, action: deploy::Action) -> i32 {
    block(async move { deploy::deploy(&Conn::open(&conn)?, &target, action).await })
}

/// Runs a verb to its end on a small runtime; prints its error; returns the exit code.
fn block(verb: impl std::future::Future<Output = Result<i32, CliError>>) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = rt.block_on(verb);
    // Do not wait for a blocked read of standard input (exec -i) to finish.
    rt.shutdown_background();
    let _ = std::io::stdout().flush();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.text());
            e.code
        }
    }
}

/// An object as `-o json` (kubectl's 4-space indent) or `-o yaml` prints it.
pub(crate) fn encode(v: &serde_json::Value, format: &str) -> Result<String, CliError> {
    Ok(if format == "yaml" {
        print::yaml(v)
    } else {
        print::json(v)
    })
}

/// Prints a line to standard output, ignoring a closed pipe (`berth get pods | head`).
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
