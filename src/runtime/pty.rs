//! Pseudo-terminals for `kubectl exec -t` and for containers with `tty: true`: opening a
//! pair, starting a process on the terminal side as a session leader that owns it, window
//! sizes, end of input, and non-blocking I/O on the controlling side for tokio.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;

use rustix::fs::{OFlags, fcntl_getfl, fcntl_setfl};
use rustix::pty::{OpenptFlags, grantpt, ioctl_tiocgptpeer, openpt, unlockpt};
use rustix::termios::{LocalModes, SpecialCodeIndex, Winsize, tcgetattr, tcsetwinsize};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// A terminal pair: `master` is what berth reads and writes, `slave` what the process sees.
#[derive(Debug)]
pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

/// Opens a new pseudo-terminal pair (both ends close on exec).
pub fn open() -> io::Result<Pty> {
    let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
    let master = openpt(flags)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let slave = ioctl_tiocgptpeer(&master, flags)?;
    Ok(Pty { master, slave })
}

/// Makes `cmd` run on the terminal `slave`: as stdin, stdout and stderr (so stderr is merged
/// into stdout), in a session of its own whose controlling terminal it is. The caller
/// must not also ask for a process group: a group leader cannot start a session.
pub fn run_on(cmd: &mut std::process::Command, slave: &OwnedFd) -> io::Result<()> {
    cmd.stdin(slave.try_clone()?)
        .stdout(slave.try_clone()?)
        .stderr(slave.try_clone()?);
    #[allow(unsafe_code)]
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: it makes two raw system calls through rustix
    // (setsid(2), ioctl(2) TIOCSCTTY) without allocating, locking or touching shared state.
    // fd 0 is the terminal by then, as the standard streams are set up before the hook.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::setsid()?;
            rustix::process::ioctl_tiocsctty(BorrowedFd::borrow_raw(0))?;
            Ok(())
        });
    }
    Ok(())
}

/// Sets the window size of the terminal (the process group in front gets SIGWINCH).
pub fn set_size(master: impl AsFd, width: u16, height: u16) -> io::Result<()> {
    tcsetwinsize(
        master,
        Winsize {
            ws_row: height,
            ws_col: width,
            ws_xpixel: 0,
            ws_ypixel: 0,
        },
    )?;
    Ok(())
}

/// What to type so that the program reading the terminal sees the end of its input: the
/// terminal's end-of-file character (^D), twice when a line is half typed (the first one
/// only hands the half line over). `None` when the terminal is in raw mode, where no
/// character means end of input (the caller hangs up instead).
pub fn end_of_input(master: impl AsFd, line_open: bool) -> io::Result<Option<Vec<u8>>> {
    let t = tcgetattr(master)?;
    if !t.local_modes.contains(LocalModes::ICANON) {
        return Ok(None);
    }
    let eof = t.special_codes[SpecialCodeIndex::VEOF];
    Ok(Some(if line_open { vec![eof, eof] } else { vec![eof] }))
}

/// The controlling side of a terminal, for tokio: reads end (`Ok(0)`) once every process
/// holding the terminal side has closed it.
pub struct Master(AsyncFd<OwnedFd>);

impl Master {
    /// Takes `fd` (made non-blocking) onto the current tokio runtime.
    pub fn new(fd: OwnedFd) -> io::Result<Self> {
        fcntl_setfl(&fd, fcntl_getfl(&fd)? | OFlags::NONBLOCK)?;
        // `AsyncFd::new` is deprecated because a caller could close the descriptor while
        // it is registered; here the AsyncFd owns the OwnedFd, so it cannot.
        #[allow(deprecated)]
        let fd = AsyncFd::new(fd)?;
        Ok(Master(fd))
    }

    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        let got = self
            .0
            .async_io(Interest::READABLE, |fd| {
                rustix::io::read(fd, &mut *buf).map_err(io::Error::from)
            })
            .await;
        match got {
            // The terminal side is closed by everyone: that is the end, not a failure.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => Ok(0),
            other => other,
        }
    }

    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self
                .0
                .async_io(Interest::WRITABLE, |fd| {
                    rustix::io::write(fd, buf).map_err(io::Error::from)
                })
                .await?;
            buf = &buf[n..];
        }
        Ok(())
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.get_ref().as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_process_on_the_terminal_sees_a_terminal_of_the_size_set_and_its_input() {
        let pty = open().unwrap();
        set_size(&pty.master, 91, 17).unwrap();
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", "tty; stty size; read line; echo got:$line; exit 4"]);
        run_on(&mut cmd, &pty.slave).unwrap();
        let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
        drop(pty.slave);
        let master = Master::new(pty.master).unwrap();
        master.write_all(b"hello\n").await.unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            match master.read(&mut buf).await.unwrap() {
                0 => break,
                n => out.extend_from_slice(&buf[..n]),
            }
        }
        let out = String::from_utf8_lossy(&out);
        assert!(out.contains("/dev/pts/"), "{out}");
        assert!(out.contains("17 91"), "{out}");
        assert!(out.contains("got:hello"), "{out}");
        assert_eq!(child.wait().await.unwrap().code(), Some(4));
    }

    #[tokio::test]
    async fn end_of_input_ends_a_reader_of_the_terminal() {
        let pty = open().unwrap();
        let mut cmd = std::process::Command::new("cat");
        run_on(&mut cmd, &pty.slave).unwrap();
        let mut child = tokio::process::Command::from(cmd).spawn().unwrap();
        drop(pty.slave);
        let master = Master::new(pty.master).unwrap();
        master.write_all(b"half").await.unwrap();
        let eof = end_of_input(master.fd(), true).unwrap().unwrap();
        assert_eq!(eof, [4, 4]);
        master.write_all(&eof).await.unwrap();
        let status = tokio::time::timeout(std::time::Duration::from_secs(10), child.wait())
            .await
            .expect("cat ends on end of input")
            .unwrap();
        assert!(status.success());
    }
}
