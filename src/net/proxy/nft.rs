//! Running nftables transactions through the `nft` command, behind a configurable
//! command prefix (`["nft"]`, or `["ip", "netns", "exec", NS, "nft"]` to program another
//! network namespace).
//!
//! The commands are nft's text syntax, written by hand rather than through the
//! `nftables` crate (nft's JSON, as netavark uses it): the bench (`cargo bench --bench
//! net`, its `json` figures) lists the table of 1,000 Services as JSON and loads it back
//! as the crate would send it. The crate cannot read that JSON (the endpoint maps,
//! whose values are concatenations, fit none of its types), and nft 1.0.6 (Debian 12's)
//! refuses it ("Invalid map type"), so the crate cannot program this table at all; the
//! text form loads it in one transaction.
//!
//! A full table is one `nft -f -` run (through the running `nft -i` below, as one line
//! of 250 KB for 1,000 Services, it takes more than twice as long: the bench's
//! `whole_again_in_session_ms_median`). Smaller changes go to one `nft -i` that stays
//! running, a line per transaction: a new `nft` process costs about 15 ms on its own
//! (the kernel waits out an RCU grace period when a process that committed closes its
//! netlink socket), ten times a typical change. After each transaction line a marker
//! line follows, which nft answers with a syntax error naming it on stderr; whatever nft
//! wrote to stderr before that answer is the transaction's error.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStderr, ChildStdin, Command};

/// How long a transaction may take before nft is given up on.
const TIMEOUT: Duration = Duration::from_secs(60);

/// Why a transaction was not made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the nft command of the proxy is empty; give it the program to run, e.g. [\"nft\"]")]
    NoCommand,
    #[error("could not run {program}: {source}; install nftables (the `nft` command)")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("nft refused the transaction, nothing of it was applied: {0}")]
    Refused(String),
    #[error("talking to nft: {0}")]
    Io(#[from] std::io::Error),
    #[error("nft did not answer within {0:?}")]
    Timeout(Duration),
}

impl Error {
    /// Whether nft said the object does not exist (deleting what is not there).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Refused(text) if text.contains("No such file or directory"))
    }
}

/// The `nft` command, and the one that stays running for small transactions.
pub struct Nft {
    prefix: Vec<String>,
    session: Option<Session>,
    marker: u64,
}

struct Session {
    child: Child,
    stdin: ChildStdin,
    stderr: BufReader<ChildStderr>,
}

impl Nft {
    pub fn new(prefix: Vec<String>) -> Self {
        Nft {
            prefix,
            session: None,
            marker: 0,
        }
    }

    fn command(&self, args: &[&str]) -> Result<Command, Error> {
        let (program, rest) = self.prefix.split_first().ok_or(Error::NoCommand)?;
        let mut cmd = Command::new(program);
        cmd.args(rest).args(args).kill_on_drop(true);
        Ok(cmd)
    }

    fn spawn(&self, mut cmd: Command) -> Result<Child, Error> {
        cmd.spawn().map_err(|source| Error::Spawn {
            program: self.prefix.join(" "),
            source,
        })
    }

    /// Runs `commands` as one transaction in a new `nft -f -`.
    pub async fn run(&self, commands: &[String]) -> Result<(), Error> {
        let mut cmd = self.command(&["-f", "-"])?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = self.spawn(cmd)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let script = commands.join("\n") + "\n";
        let done = async {
            // nft reads all of its input before it answers; a write error means it
            // ended early, and its status says why.
            let _ = stdin.write_all(script.as_bytes()).await;
            drop(stdin);
            child.wait_with_output().await
        };
        let out = tokio::time::timeout(TIMEOUT, done)
            .await
            .map_err(|_| Error::Timeout(TIMEOUT))??;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Refused(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }

    /// What `nft ARGS` prints (a listing).
    pub async fn output(&self, args: &[&str]) -> Result<String, Error> {
        let mut cmd = self.command(args)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let child = self.spawn(cmd)?;
        let out = tokio::time::timeout(TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| Error::Timeout(TIMEOUT))??;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Refused(
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ))
        }
    }

    /// Runs `commands` as one transaction in the `nft -i` that stays running (started
    /// on first use, and again after it failed).
    pub async fn run_in_session(&mut self, commands: &[String]) -> Result<(), Error> {
        if commands.iter().any(|c| c.contains('\n')) {
            return self.run(commands).await;
        }
        let session = match self.session.take() {
            Some(s) => s,
            None => self.start_session()?,
        };
        self.marker += 1;
        let marker = format!("berth-transaction-done-{}", self.marker);
        let line = commands.join("; ");
        let (answer, session) = tokio::time::timeout(TIMEOUT, transact(session, &line, &marker))
            .await
            .map_err(|_| Error::Timeout(TIMEOUT))?;
        let errors = answer?;
        // Only a session that answered as expected is kept.
        self.session = Some(session);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(Error::Refused(errors))
        }
    }

    fn start_session(&self) -> Result<Session, Error> {
        let mut cmd = self.command(&["-i"])?;
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = self.spawn(cmd)?;
        let stdin = child.stdin.take().expect("stdin is piped");
        let stderr = BufReader::new(child.stderr.take().expect("stderr is piped"));
        Ok(Session {
            child,
            stdin,
            stderr,
        })
    }
}

/// Sends one transaction line and the marker; answers what nft said of the
/// transaction (empty: it was made), and the session to keep when it behaved.
async fn transact(mut s: Session, line: &str, marker: &str) -> (Result<String, Error>, Session) {
    let sent = async {
        s.stdin
            .write_all(format!("{line}\n{marker}\n").as_bytes())
            .await?;
        s.stdin.flush().await?;
        let mut said: Vec<String> = Vec::new();
        loop {
            let mut l = String::new();
            if s.stderr.read_line(&mut l).await? == 0 {
                let status = s.child.try_wait()?;
                return Err(Error::Io(std::io::Error::other(format!(
                    "nft -i ended ({status:?}): {}",
                    said.join("")
                ))));
            }
            if l.trim_end() == marker {
                // The marker's own error: the line before it, and the caret line after.
                said.pop();
                let mut caret = String::new();
                s.stderr.read_line(&mut caret).await?;
                return Ok(said.concat().trim().to_string());
            }
            said.push(l);
        }
    };
    let answer = sent.await;
    (answer, s)
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}
