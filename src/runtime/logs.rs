//! Reading a container instance's log (the CRI format the shim writes:
//! `<RFC3339Nano> <stream> <F|P> <text>`) the way `kubectl logs` asks for it: the rotated
//! files oldest first, `tailLines`, `sinceTime`, `timestamps`, `limitBytes`, and `follow`,
//! which waits for new lines through inotify on the instance directory (no polling) and
//! ends when the container's exit record appears.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use rustix::fs::inotify;

use super::shim::{EXIT_FILE, LOG_FILE};

/// What to read.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub follow: bool,
    pub tail_lines: Option<usize>,
    pub since: Option<jiff::Timestamp>,
    pub timestamps: bool,
    pub limit_bytes: Option<usize>,
}

/// One entry of the log.
struct Entry<'a> {
    time: &'a str,
    partial: bool,
    text: &'a [u8],
}

fn parse(line: &[u8]) -> Option<Entry<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = std::str::from_utf8(parts.next()?).ok()?;
    let _stream = parts.next()?;
    let tag = parts.next()?;
    let text = parts.next().unwrap_or(b"");
    Some(Entry {
        time,
        partial: tag == b"P",
        text,
    })
}

/// The files of an instance's log, oldest first.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut rotated: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n: u32 = name.strip_prefix("log.")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    rotated.sort_by_key(|r| std::cmp::Reverse(r.0));
    let mut out: Vec<PathBuf> = rotated.into_iter().map(|(_, p)| p).collect();
    out.push(dir.join(LOG_FILE));
    out
}

/// Turns entries into the text `kubectl logs` prints: partial pieces joined, one line per
/// full entry, each prefixed with its time when asked.
struct Renderer {
    timestamps: bool,
    since: Option<jiff::Timestamp>,
    /// Inside a line made of partial pieces.
    open: bool,
}

impl Renderer {
    fn push(&mut self, e: &Entry<'_>, out: &mut Vec<u8>) {
        if let Some(since) = self.since
            && !self.open
            && e.time.parse::<jiff::Timestamp>().is_ok_and(|t| t < since)
        {
            return;
        }
        if self.timestamps && !self.open {
            out.extend_from_slice(e.time.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(e.text);
        if e.partial {
            self.open = true;
        } else {
            out.push(b'\n');
            self.open = false;
        }
    }
}

/// Keeps the last `n` lines of `text`.
fn tail(text: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = text.strip_suffix(b"\n").unwrap_or(text);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &text[i + 1..];
            }
        }
    }
    text
}

/// Where reading the current log file stopped: its inode and offset.
pub type Position = Option<(u64, u64)>;

/// Everything the instance logged so far, and where reading stopped (for following).
pub fn read(dir: &Path, opts: &Options) -> io::Result<(Vec<u8>, Position)> {
    let mut r = Renderer {
        timestamps: opts.timestamps,
        since: opts.since,
        open: false,
    };
    let mut out = Vec::new();
    let mut position = None;
    for path in files(dir) {
        let Ok(f) = File::open(&path) else { continue };
        let ino = f.metadata()?.ino();
        let mut reader = BufReader::new(f);
        let mut line = Vec::new();
        let mut offset = 0u64;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line)?;
            if n == 0 || !line.ends_with(b"\n") {
                break; // an entry still being written is read on the next pass
            }
            offset += n as u64;
            if let Some(e) = parse(&line) {
                r.push(&e, &mut out);
            }
        }
        if path.ends_with(LOG_FILE) {
            position = Some((ino, offset));
        }
    }
    if let Some(n) = opts.tail_lines {
        out = tail(&out, n).to_vec();
    }
    if let Some(limit) = opts.limit_bytes {
        out.truncate(limit);
    }
    Ok((out, position))
}

/// Follows an instance's log after `read`: yields new text as it is written and ends when
/// the container has exited and everything is read (or `limit` bytes were sent).
pub fn follow(
    dir: PathBuf,
    opts: Options,
    start: Position,
    sent: usize,
) -> impl futures_util::Stream<Item = io::Result<Bytes>> + Send {
    struct State {
        dir: PathBuf,
        renderer: Renderer,
        pos: Position,
        left: Option<usize>,
        watch: Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>>,
        done: bool,
    }
    let watch = inotify::init(inotify::CreateFlags::NONBLOCK | inotify::CreateFlags::CLOEXEC)
        .and_then(|fd| {
            inotify::add_watch(
                &fd,
                &dir,
                inotify::WatchFlags::MODIFY
                    | inotify::WatchFlags::MOVED_TO
                    | inotify::WatchFlags::CREATE
                    | inotify::WatchFlags::DELETE_SELF,
            )?;
            Ok(fd)
        })
        .ok()
        .and_then(|fd| {
            // The AsyncFd owns the descriptor, so it cannot be closed while registered.
            #[allow(deprecated)]
            let registered = tokio::io::unix::AsyncFd::new(fd);
            registered.ok()
        });
    let state = State {
        renderer: Renderer {
            timestamps: opts.timestamps,
            since: None,
            open: false,
        },
        dir,
        pos: start,
        left: opts.limit_bytes.map(|l| l.saturating_sub(sent)),
        watch,
        done: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if st.done || st.left == Some(0) {
                return None;
            }
            let exited = st.dir.join(EXIT_FILE).exists();
            let chunk = match read_new(&st.dir, &mut st.pos, &mut st.renderer) {
                Ok(c) => c,
                Err(e) => return Some((Err(e), State { done: true, ..st })),
            };
            if !chunk.is_empty() {
                let mut chunk = chunk;
                if let Some(left) = st.left.as_mut() {
                    chunk.truncate(*left);
                    *left -= chunk.len();
                }
                return Some((Ok(Bytes::from(chunk)), st));
            }
            if exited {
                return None;
            }
            // Wait for the directory to change: a write, a rotation or the exit record.
            if !changed(st.watch.as_ref()?).await {
                return None;
            }
        }
    })
}

/// Waits until an inotify descriptor has events and consumes them all; false when it
/// cannot be waited on.
pub(crate) async fn changed(w: &tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>) -> bool {
    match w.readable().await {
        Ok(mut guard) => {
            let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
            let mut reader = inotify::Reader::new(w.get_ref(), &mut buf);
            while reader.next().is_ok() {}
            guard.clear_ready();
            true
        }
        Err(_) => false,
    }
}

/// Reads what was appended to the current log file since `pos` (starting over when the
/// file was rotated).
fn read_new(dir: &Path, pos: &mut Position, renderer: &mut Renderer) -> io::Result<Vec<u8>> {
    let path = dir.join(LOG_FILE);
    let Ok(mut f) = File::open(&path) else {
        return Ok(Vec::new());
    };
    let meta = f.metadata()?;
    let offset = match *pos {
        Some((ino, off)) if ino == meta.ino() && off <= meta.len() => off,
        _ => 0,
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut data = Vec::new();
    f.take(1 << 20).read_to_end(&mut data)?;
    // Only whole entries; the rest is read once it is complete.
    let whole = data.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut out = Vec::new();
    for line in data[..whole].split_inclusive(|b| *b == b'\n') {
        if let Some(e) = parse(line) {
            renderer.push(&e, &mut out);
        }
    }
    *pos = Some((meta.ino(), offset + whole as u64));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, lines: &[&str]) {
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        std::fs::write(dir.join(name), text).unwrap();
    }

    #[test]
    fn rotated_files_are_read_oldest_first_and_partials_joined() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "log.2",
            &["2026-01-01T00:00:01.000000000Z stdout F one"],
        );
        write(
            dir.path(),
            "log.1",
            &["2026-01-01T00:00:02.000000000Z stderr F two"],
        );
        write(
            dir.path(),
            "log",
            &[
                "2026-01-01T00:00:03.000000000Z stdout P thr",
                "2026-01-01T00:00:03.100000000Z stdout F ee",
            ],
        );
        let (text, pos) = read(dir.path(), &Options::default()).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "one\ntwo\nthree\n");
        assert!(pos.is_some());
        let opts = Options {
            timestamps: true,
            tail_lines: Some(2),
            ..Options::default()
        };
        let (text, _) = read(dir.path(), &opts).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "2026-01-01T00:00:02.000000000Z two\n2026-01-01T00:00:03.000000000Z three\n"
        );
        let since = Options {
            since: Some("2026-01-01T00:00:02Z".parse().unwrap()),
            limit_bytes: Some(6),
            ..Options::default()
        };
        let (text, _) = read(dir.path(), &since).unwrap();
        assert_eq!(String::from_utf8(text).unwrap(), "two\nth");
    }

    #[test]
    fn tail_of_zero_is_empty_and_of_many_is_everything() {
        assert_eq!(tail(b"a\nb\n", 0), b"");
        assert_eq!(tail(b"a\nb\n", 1), b"b\n");
        assert_eq!(tail(b"a\nb\n", 9), b"a\nb\n");
    }

    #[tokio::test]
    async fn follow_yields_new_lines_and_ends_with_the_container() {
        use futures_util::StreamExt;
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "log",
            &["2026-01-01T00:00:01.000000000Z stdout F first"],
        );
        let (text, pos) = read(dir.path(), &Options::default()).unwrap();
        assert_eq!(text, b"first\n");
        let mut s = Box::pin(follow(dir.path().to_path_buf(), Options::default(), pos, 0));
        let d = dir.path().to_path_buf();
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .open(d.join("log"))
                .unwrap();
            f.write_all(b"2026-01-01T00:00:02.000000000Z stdout F second\n")
                .unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            std::fs::write(d.join(".exit.tmp"), b"{}").unwrap();
            std::fs::rename(d.join(".exit.tmp"), d.join("exit")).unwrap();
        });
        let next = tokio::time::timeout(std::time::Duration::from_secs(10), s.next())
            .await
            .unwrap();
        assert_eq!(next.unwrap().unwrap(), Bytes::from_static(b"second\n"));
        let end = tokio::time::timeout(std::time::Duration::from_secs(10), s.next())
            .await
            .unwrap();
        assert!(end.is_none(), "the stream ends with the container");
    }
}
