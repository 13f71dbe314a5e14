//! A connection's write side that gathers a burst of HTTP/2 frames into a few TLS records
//! and syscalls.
//!
//! The HTTP/2 server writes each DATA frame of more than a few hundred bytes on its own and
//! flushes after each one. One watch event fanned out to a thousand watches on one
//! connection would then cost a thousand TLS records and a thousand `writev` calls. Here a
//! flush only marks the buffered bytes as due and wakes the connection task; the bytes leave
//! at the task's next poll, which the HTTP/2 connection always begins with a read or a write
//! on this stream, after it has queued every frame that was ready. Shutting down flushes at
//! once.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, BufWriter, ReadBuf};

/// Bytes gathered before they are encrypted and sent, at most.
const CAPACITY: usize = 64 * 1024;

pub struct Coalesce<T> {
    inner: BufWriter<T>,
    /// Whether flushes wait for the next poll (HTTP/2) or happen at once.
    defer: bool,
    /// Bytes were written since the last flush the caller asked for.
    dirty: bool,
    /// A flush was asked for and has not reached the socket yet.
    due: bool,
}

impl<T: AsyncRead + AsyncWrite + Unpin> Coalesce<T> {
    /// `defer` is for protocols whose server polls the stream again after every wake
    /// (HTTP/2); other streams flush when asked.
    pub fn new(inner: T, defer: bool) -> Self {
        Coalesce {
            inner: BufWriter::with_capacity(CAPACITY, inner),
            defer,
            dirty: false,
            due: false,
        }
    }

    /// Sends what is due. Pending means the socket is full and the task will be woken.
    fn poll_due(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.due {
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
            self.due = false;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesce<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A full socket must not keep reads from making progress; the write is retried
        // when the socket has room (the task is woken then).
        if let Poll::Ready(Err(e)) = this.poll_due(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Coalesce<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.dirty |= n > 0;
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        this.dirty |= n > 0;
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.dirty {
            this.dirty = false;
            this.due = true;
            if this.defer {
                // More frames may follow in this same poll; send them all at the next one.
                cx.waker().wake_by_ref();
                return Poll::Ready(Ok(()));
            }
        }
        ready!(this.poll_due(cx))?;
        // Nothing of ours is buffered; let the layers below flush their own state.
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.dirty = false;
        this.due = true;
        ready!(this.poll_due(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn deferred_flush_sends_everything_at_the_next_poll() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(near, true);
        for i in 0..50u8 {
            w.write_all(&[i; 1000]).await.unwrap();
            w.flush().await.unwrap();
        }
        // Nothing has left yet: the flushes only marked the bytes as due.
        let mut probe = [0u8; 1];
        let early = tokio::time::timeout(
            std::time::Duration::from_millis(20),
            far.read_exact(&mut probe),
        )
        .await;
        assert!(early.is_err(), "bytes left before the next poll");
        // The next poll of the stream (a read here) sends them all.
        let mut sink = [0u8; 1];
        let _ = futures_util::poll!(Box::pin(w.read(&mut sink)));
        let mut got = vec![0u8; 50 * 1000];
        far.read_exact(&mut got).await.unwrap();
        for (i, chunk) in got.chunks(1000).enumerate() {
            assert!(chunk.iter().all(|b| *b == i as u8));
        }
    }

    #[tokio::test]
    async fn immediate_flush_sends_at_once() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(near, false);
        w.write_all(b"hello").await.unwrap();
        w.flush().await.unwrap();
        let mut got = [0u8; 5];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn shutdown_sends_what_is_buffered() {
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(near, true);
        w.write_all(b"last words").await.unwrap();
        w.shutdown().await.unwrap();
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, b"last words");
    }

    struct CountWakes(std::sync::atomic::AtomicUsize);

    impl std::task::Wake for CountWakes {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn only_a_flush_with_bytes_written_wakes_the_task() {
        let (near, _far) = tokio::io::duplex(1 << 20);
        let mut w = Coalesce::new(near, true);
        let wakes = std::sync::Arc::new(CountWakes(0.into()));
        let waker = std::task::Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        let count = || wakes.0.load(std::sync::atomic::Ordering::SeqCst);
        // An idle connection flushes on every poll; that must not schedule another.
        assert!(Pin::new(&mut w).poll_flush(&mut cx).is_ready());
        assert_eq!(count(), 0);
        assert!(Pin::new(&mut w).poll_write(&mut cx, b"frame").is_ready());
        assert!(Pin::new(&mut w).poll_flush(&mut cx).is_ready());
        assert_eq!(count(), 1);
        assert!(w.due);
        // The next flush (with nothing new) sends what is due, without another wake.
        assert!(Pin::new(&mut w).poll_flush(&mut cx).is_ready());
        assert_eq!(count(), 1);
        assert!(!w.due);
    }
}
