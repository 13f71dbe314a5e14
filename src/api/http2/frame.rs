//! HTTP/2's wire format: frame types, flags, error codes and settings; the connection's
//! write buffer that frames are encoded into, and padding stripped from frames read.

use bytes::Bytes;

use super::WRITE_HIGH;

// Frame types.
pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const PRIORITY: u8 = 0x2;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const PUSH_PROMISE: u8 = 0x5;
pub(super) const PING: u8 = 0x6;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const WINDOW_UPDATE: u8 = 0x8;
pub(super) const CONTINUATION: u8 = 0x9;

// Flags.
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const ACK: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY_FLAG: u8 = 0x20;

// Error codes.
pub(super) const NO_ERROR: u32 = 0x0;
pub(super) const PROTOCOL_ERROR: u32 = 0x1;
pub(super) const INTERNAL_ERROR: u32 = 0x2;
pub(super) const FLOW_CONTROL_ERROR: u32 = 0x3;
pub(super) const STREAM_CLOSED: u32 = 0x5;
pub(super) const FRAME_SIZE_ERROR: u32 = 0x6;
pub(super) const REFUSED_STREAM: u32 = 0x7;
#[cfg(test)]
pub(super) const CANCEL: u32 = 0x8;
pub(super) const COMPRESSION_ERROR: u32 = 0x9;
pub(super) const ENHANCE_YOUR_CALM: u32 = 0xb;

// Settings.
pub(super) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub(super) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(super) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(super) const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub(super) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// The connection's write side: the frames made and not yet written.
pub(super) struct Out {
    pub(super) buf: Vec<u8>,
    /// Bytes at the front of `buf` already written.
    pub(super) written: usize,
    /// What we may still send on the connection.
    pub(super) window: i64,
    /// The client's largest frame.
    pub(super) max_frame: usize,
}

impl Out {
    pub(super) fn waiting(&self) -> usize {
        self.buf.len() - self.written
    }

    pub(super) fn full(&self) -> bool {
        self.waiting() >= WRITE_HIGH
    }

    pub(super) fn head(&mut self, len: usize, kind: u8, flags: u8, id: u32) {
        let len = len as u32;
        self.buf
            .extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
        self.buf
            .extend_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    }

    pub(super) fn settings(&mut self, settings: &[(u16, u32)]) {
        self.head(settings.len() * 6, SETTINGS, 0, 0);
        for (k, v) in settings {
            self.buf.extend_from_slice(&k.to_be_bytes());
            self.buf.extend_from_slice(&v.to_be_bytes());
        }
    }

    pub(super) fn window_update(&mut self, id: u32, n: u32) {
        self.head(4, WINDOW_UPDATE, 0, id);
        self.buf.extend_from_slice(&n.to_be_bytes());
    }

    pub(super) fn reset(&mut self, id: u32, code: u32) {
        self.head(4, RST_STREAM, 0, id);
        self.buf.extend_from_slice(&code.to_be_bytes());
    }

    pub(super) fn goaway(&mut self, last: u32, code: u32, debug: &str) {
        self.head(8 + debug.len(), GOAWAY, 0, 0);
        self.buf.extend_from_slice(&last.to_be_bytes());
        self.buf.extend_from_slice(&code.to_be_bytes());
        self.buf.extend_from_slice(debug.as_bytes());
    }

    /// A header block, split into HEADERS and CONTINUATION frames as the client's frame
    /// size requires.
    pub(super) fn header_block(&mut self, id: u32, block: &[u8], end_stream: bool) {
        let mut chunks = block.chunks(self.max_frame).peekable();
        let first = chunks.next().unwrap_or(&[]);
        let mut flags = if end_stream { END_STREAM } else { 0 };
        if chunks.peek().is_none() {
            flags |= END_HEADERS;
        }
        self.head(first.len(), HEADERS, flags, id);
        self.buf.extend_from_slice(first);
        while let Some(chunk) = chunks.next() {
            let flags = if chunks.peek().is_none() {
                END_HEADERS
            } else {
                0
            };
            self.head(chunk.len(), CONTINUATION, flags, id);
            self.buf.extend_from_slice(chunk);
        }
    }

    /// Sends as much of `data` as the windows allow; returns what is left, if any.
    pub(super) fn data(
        &mut self,
        id: u32,
        window: &mut i64,
        mut data: Bytes,
        end: bool,
    ) -> Option<Bytes> {
        loop {
            let room = (*window).min(self.window).max(0) as usize;
            let n = data.len().min(room).min(self.max_frame);
            if n == 0 && !data.is_empty() {
                return Some(data);
            }
            let chunk = data.split_to(n);
            let last = data.is_empty();
            self.head(n, DATA, if last && end { END_STREAM } else { 0 }, id);
            self.buf.extend_from_slice(&chunk);
            *window -= n as i64;
            self.window -= n as i64;
            if last {
                return None;
            }
        }
    }
}

/// The payload of a DATA or HEADERS frame without its padding; `None` if the padding
/// claims more than the frame holds.
pub(super) fn strip_padding(flags: u8, mut payload: Bytes) -> Option<Bytes> {
    if flags & PADDED == 0 {
        return Some(payload);
    }
    let pad = usize::from(*payload.first()?);
    let _ = payload.split_to(1);
    if pad > payload.len() {
        return None;
    }
    payload.truncate(payload.len() - pad);
    Some(payload)
}
