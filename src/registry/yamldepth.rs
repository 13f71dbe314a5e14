//! How deep a YAML body nests, found before it is parsed whole.
//!
//! libyaml (under `serde_yaml_ng`) scans a whole document into events before anything is
//! decoded, and its scanner walks its stack of possible simple keys, one per open flow
//! collection (`[` or `{`), for every token: a body of 20,000 nested `[` costs the square
//! of that, seconds of a thread, before the decoder's own recursion limit ever sees it.
//! So a body with enough flow openers to go deeper than the limit is first read event by
//! event by the same parser, stopping at the first collection nested beyond the limit:
//! that pass never holds more than the limit's worth of keys, so it is linear in the size
//! of the body, and it reads the body exactly as the decoder would.

use std::mem::MaybeUninit;

use unsafe_libyaml as unsafe_sys;

/// Where a body nests deeper than allowed: the line and column (1-based) of the
/// collection that goes beyond.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub line: u64,
    pub column: u64,
}

/// Checks that no collection of `body` is nested more than `limit` deep. A body that is
/// not valid YAML passes: the decoder then says what is wrong with it.
pub fn check(body: &[u8], limit: usize) -> Result<(), TooDeep> {
    // Without more flow openers than the limit, the scanner's work per token is bounded
    // by the limit, and the decoder's recursion limit bounds block nesting as it goes.
    let openers = body.iter().filter(|b| matches!(b, b'[' | b'{')).count();
    if openers <= limit {
        return Ok(());
    }
    let mut parser = Parser::new(body);
    let mut depth = 0usize;
    loop {
        match parser.next() {
            None | Some(Event::End) => return Ok(()),
            Some(Event::Open(mark)) => {
                depth += 1;
                if depth > limit {
                    return Err(mark);
                }
            }
            Some(Event::Close) => depth = depth.saturating_sub(1),
            Some(Event::Other) => {}
        }
    }
}

enum Event {
    Open(TooDeep),
    Close,
    Other,
    End,
}

/// A libyaml parser over a borrowed body, boxed so that its address never changes (it
/// keeps pointers into itself and into the body).
struct Parser<'a> {
    sys: Box<MaybeUninit<unsafe_sys::yaml_parser_t>>,
    /// Initialization succeeded: the parser must be deleted.
    initialized: bool,
    /// It reported an error (or was never initialized): it is not called again.
    failed: bool,
    _body: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Parser<'a> {
    #[allow(unsafe_code)]
    fn new(body: &'a [u8]) -> Self {
        let mut sys = Box::new(MaybeUninit::<unsafe_sys::yaml_parser_t>::uninit());
        // SAFETY: the parser is initialized in place in its box (initialization zeroes it
        // first), and the input pointer stays valid for `'a`, which the parser cannot
        // outlive (`_body`). A failed initialization (no memory) leaves it unusable,
        // which `initialized` records so that it is neither used nor deleted.
        let initialized = unsafe {
            let p = sys.as_mut_ptr();
            if unsafe_sys::yaml_parser_initialize(p).fail {
                false
            } else {
                unsafe_sys::yaml_parser_set_encoding(p, unsafe_sys::YAML_UTF8_ENCODING);
                unsafe_sys::yaml_parser_set_input_string(p, body.as_ptr(), body.len() as u64);
                true
            }
        };
        Parser {
            sys,
            initialized,
            failed: !initialized,
            _body: std::marker::PhantomData,
        }
    }

    /// The next event, or `None` at an error (or after one).
    #[allow(unsafe_code)]
    fn next(&mut self) -> Option<Event> {
        if self.failed {
            return None;
        }
        let mut event = MaybeUninit::<unsafe_sys::yaml_event_t>::uninit();
        // SAFETY: the parser was initialized (`failed` is false) and lives in its box;
        // `yaml_parser_parse` fills `event` when it succeeds, and only then is it read
        // and deleted. A parser that reported an error is not called again.
        unsafe {
            let p = self.sys.as_mut_ptr();
            if unsafe_sys::yaml_parser_parse(p, event.as_mut_ptr()).fail {
                self.failed = true;
                return None;
            }
            let e = event.as_mut_ptr();
            let out = match (*e).type_ {
                unsafe_sys::YAML_SEQUENCE_START_EVENT | unsafe_sys::YAML_MAPPING_START_EVENT => {
                    Event::Open(TooDeep {
                        line: (*e).start_mark.line + 1,
                        column: (*e).start_mark.column + 1,
                    })
                }
                unsafe_sys::YAML_SEQUENCE_END_EVENT | unsafe_sys::YAML_MAPPING_END_EVENT => {
                    Event::Close
                }
                unsafe_sys::YAML_STREAM_END_EVENT => Event::End,
                _ => Event::Other,
            };
            unsafe_sys::yaml_event_delete(e);
            Some(out)
        }
    }
}

impl Drop for Parser<'_> {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if self.initialized {
            // SAFETY: a parser whose initialization succeeded is deleted once, here, also
            // after a parse error (deletion frees what parsing allocated).
            unsafe { unsafe_sys::yaml_parser_delete(self.sys.as_mut_ptr()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flow(n: usize) -> String {
        format!("{{\"a\": {}1{}}}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn a_body_nested_beyond_the_limit_is_refused_where_it_goes_beyond() {
        let at = check(flow(20_000).as_bytes(), 128).unwrap_err();
        // The outer mapping is the first level: the 128th `[` is the 129th.
        assert_eq!(
            at,
            TooDeep {
                line: 1,
                column: 134
            }
        );
        // Block nesting alone costs the scanner nothing extra: the decoder's recursion
        // limit refuses it as it goes.
        let block = format!("a:\n{}1\n", "- ".repeat(20_000));
        check(block.as_bytes(), 128).unwrap();
        assert!(crate::registry::schema::parse_yaml(block.as_bytes()).is_err());
        let mixed = format!("a:\n  - {}1{}\n", "{b: ".repeat(200), "}".repeat(200));
        assert_eq!(check(mixed.as_bytes(), 128).unwrap_err().line, 2);
    }

    #[test]
    fn nesting_up_to_the_limit_and_brackets_in_strings_pass() {
        // 127 `[` in the outer mapping: 128 levels.
        check(flow(127).as_bytes(), 128).unwrap();
        let quoted = format!(
            "a: \"{}\"\nb: '{}'\nc: |\n  {}\n",
            "[".repeat(500),
            "{".repeat(500),
            "[".repeat(500)
        );
        check(quoted.as_bytes(), 128).unwrap();
        // Many collections side by side are no depth.
        let wide = format!("a: [{}]\n", "[1], ".repeat(1000));
        check(wide.as_bytes(), 128).unwrap();
    }

    #[test]
    fn a_body_that_is_no_yaml_is_left_to_the_decoder() {
        let broken = format!("@{}", "[".repeat(200));
        check(broken.as_bytes(), 10).unwrap();
        check(b"", 0).unwrap();
        check(b"\xff\xfe[[[", 1).unwrap();
    }
}
