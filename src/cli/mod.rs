//! The client half of the `berth` binary: kubectl-style verbs and OpenShift's rollout
//! verbs, speaking to a berth (or any Kubernetes) API server over HTTPS.
//!
//! Each verb is a function from its parsed arguments and a [`conn::Conn`] to what it
//! prints; failures are [`CliError`]s, printed the way kubectl and oc print them
//! (`Error from server (NotFound): ...` or `error: ...`) with a non-zero exit code.

pub mod apply;
pub mod conn;
pub mod delete;
pub mod resource;
pub mod rollout;
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
// TODO(print): add the `get` verb here (src/cli/get.rs: args, Table fetch with
// `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`, -w by watch, the printers) and
// its arm in `run`; `Conn` and `conn.error(e)` are in conn.rs/mod.rs, `out()` prints.
// TODO(describe): add the `describe` verb here (src/cli/describe.rs) and its arm in `run`.
// End-to-end tests run the binary with `TestServer::berth(&[...])` (tests/it/support.rs).
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Start, follow, cancel, retry, pause, resume or undo the rollouts of a
    /// DeploymentConfig.
    Rollout {
        #[command(subcommand)]
        command: rollout::Command,
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
    let result = rt.block_on(async {
        match verb {
            Verb::Rollout { command, conn } => {
                let conn = Conn::open(&conn)?;
                rollout::run(&conn, command).await
            }
            Verb::Create { args, conn } => apply::create(&Conn::open(&conn)?, args).await,
            Verb::Apply { args, conn } => apply::apply(&Conn::open(&conn)?, args).await,
            Verb::Delete { args, conn } => delete::run(&Conn::open(&conn)?, args).await,
            Verb::Wait { args, conn } => wait::run(&Conn::open(&conn)?, args).await,
        }
    });
    let _ = std::io::stdout().flush();
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", e.text());
            e.code
        }
    }
}

/// Prints a line to standard output, ignoring a closed pipe (`berth get pods | head`).
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    let _ = stdout.flush();
}
