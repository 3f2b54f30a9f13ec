//! Server-Sent Events, the one framing both directions use: reading the
//! control plane's mode stream ([`EventReader`]), and rewriting an MCP
//! server's stream event by event as it flows ([`rewrite_stream`]: each
//! complete event, up to its blank line, is handed to a rewriter, which may
//! change the JSON in its `data`; every other byte passes as it came).

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use http_body_util::{BodyExt, BodyStream, StreamBody};
use hyper::body::Frame;
use serde_json::Value;

use crate::service::{Body, BoxError};

/// The end of the first complete event in `buf` (after its blank line).
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < buf.len() {
        if buf[i] == b'\n' {
            if buf[i + 1] == b'\n' {
                return Some(i + 2);
            }
            if buf[i + 1] == b'\r' && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// An event's name (`event:`) and its `data:` lines joined by newlines;
/// comments and other fields are ignored.
fn fields(event: &[u8]) -> (String, Option<String>) {
    let text = String::from_utf8_lossy(event);
    let mut name = String::new();
    let mut data: Option<String> = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            name = v.trim().to_owned();
        } else if let Some(v) = line.strip_prefix("data:") {
            let v = v.strip_prefix(' ').unwrap_or(v);
            match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(v);
                }
                None => data = Some(v.to_owned()),
            }
        }
    }
    (name, data)
}

/// Reads events out of a stream's chunks, whatever their boundaries.
#[derive(Debug, Default)]
pub(crate) struct EventReader {
    buf: BytesMut,
}

impl EventReader {
    /// The complete events `chunk` finishes: `(name, data)` each.
    pub(crate) fn feed(&mut self, chunk: &[u8]) -> Vec<(String, String)> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = event_end(&self.buf) {
            let event = self.buf.split_to(end);
            let (name, data) = fields(&event);
            if !name.is_empty() || data.is_some() {
                out.push((name, data.unwrap_or_default()));
            }
        }
        out
    }
}

/// Rewrites one event: `rewrite` sees its `data` as JSON and returns true
/// if it changed it. Unchanged events come back byte for byte.
fn rewrite_event(event: &[u8], rewrite: &mut dyn FnMut(&mut Value) -> bool) -> Bytes {
    let Some(data) = fields(event).1 else {
        return Bytes::copy_from_slice(event);
    };
    let Ok(mut value) = serde_json::from_str::<Value>(&data) else {
        return Bytes::copy_from_slice(event);
    };
    if !rewrite(&mut value) {
        return Bytes::copy_from_slice(event);
    }
    let text = String::from_utf8_lossy(event);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut wrote_data = false;
    for line in lines.iter().filter(|l| !l.is_empty()) {
        if line.starts_with("data:") {
            if !wrote_data {
                out.push_str("data: ");
                out.push_str(&value.to_string());
                out.push('\n');
                wrote_data = true;
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out.push('\n');
    Bytes::from(out)
}

/// An upstream SSE body with each event passed through `rewrite`.
pub(crate) fn rewrite_stream(
    body: Body,
    rewrite: impl FnMut(&mut Value) -> bool + Send + Sync + 'static,
) -> Body {
    struct State<F> {
        upstream: BodyStream<Body>,
        buf: BytesMut,
        rewrite: F,
        done: bool,
    }
    let state = State {
        upstream: BodyStream::new(body),
        buf: BytesMut::new(),
        rewrite,
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(end) = event_end(&st.buf) {
                let event = st.buf.split_to(end);
                let out = rewrite_event(&event, &mut st.rewrite);
                return Some((Ok::<_, BoxError>(Frame::data(out)), st));
            }
            if st.done {
                if st.buf.is_empty() {
                    return None;
                }
                // A last event without its blank line passes as it is.
                let rest = st.buf.split().freeze();
                return Some((Ok(Frame::data(rest)), st));
            }
            match st.upstream.next().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => st.buf.extend_from_slice(&data),
                    // Trailers end the body.
                    Err(_) => st.done = true,
                },
                Some(Err(e)) => return Some((Err(e), st)),
                None => st.done = true,
            }
        }
    });
    BodyExt::boxed(StreamBody::new(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_are_read_across_chunks() {
        let mut p = EventReader::default();
        assert!(p.feed(b"event: mode_snap").is_empty());
        let got = p.feed(b"shot\ndata: {\"agent_mode\":\"monitor\"}\n\n: ping\n\nevent: x\r\n");
        assert_eq!(
            got,
            vec![(
                "mode_snapshot".to_owned(),
                "{\"agent_mode\":\"monitor\"}".to_owned()
            )]
        );
        assert_eq!(
            p.feed(b"data: 1\ndata: 2\n\n"),
            vec![("x".to_owned(), "1\n2".to_owned())]
        );
    }

    #[test]
    fn events_end_at_blank_lines() {
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: 1\n"), None);
    }

    #[test]
    fn only_the_data_changes() {
        let event = b"event: message\nid: 7\ndata: {\"id\":1,\"result\":{\"x\":\"secret\"}}\n\n";
        let out = rewrite_event(event, &mut |v| {
            v["result"]["x"] = json!("***");
            true
        });
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            "event: message\nid: 7\ndata: {\"id\":1,\"result\":{\"x\":\"***\"}}\n\n"
        );
        let untouched = rewrite_event(event, &mut |_| false);
        assert_eq!(&untouched[..], &event[..]);
        let ping = rewrite_event(b": ping\n\n", &mut |_| true);
        assert_eq!(&ping[..], b": ping\n\n");
    }
}
