//! Redfish EventService server-sent events: a stream of `Event` documents.

use super::RedfishClient;
use super::json::string;
use super::sessions::{Auth, token_header};
use super::transport::{Response, check_status};
use crate::error::BmcError;
use crate::types::PushedEvent;
use futures::{Stream, StreamExt};
use reqwest::Method;
use serde_json::Value;
use std::time::Duration;

/// How long the stream may stay silent (BMCs send keep-alive comments far more often).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// Largest event (all its lines) read: a Redfish event is a few KiB. A stream that sends
/// more without ending the event ends with an error rather than growing the buffer.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Longest event id kept for `Last-Event-ID` (a longer one is not sent back).
pub const MAX_EVENT_ID_BYTES: usize = 256;

/// The `id` field of an SSE message, if it has one fit to send back as `Last-Event-ID`.
fn message_id(block: &str) -> Option<String> {
    let id = block
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .next_back()?;
    (id.len() <= MAX_EVENT_ID_BYTES && !id.contains('\0') && !id.chars().any(char::is_control))
        .then(|| id.to_owned())
}

/// One SSE message's `data`, parsed as JSON.
fn parse_message(block: &str) -> Option<Result<Value, BmcError>> {
    let data: Vec<&str> = block
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect();
    if data.is_empty() {
        return None; // a comment / keep-alive
    }
    Some(
        serde_json::from_str(&data.join("\n"))
            .map_err(|e| BmcError::Malformed(format!("event is not JSON ({e})"))),
    )
}

/// Splits the event stream into messages, however its bytes arrive: the buffer holds bytes, so a
/// character cut between two reads is decoded whole, and lines end with CRLF, LF or CR as the
/// SSE format has it.
#[derive(Default)]
pub(super) struct Framer {
    buf: Vec<u8>,
    /// The last `id` a message carried (SSE's "last event ID").
    last_id: Option<String>,
}

impl Framer {
    /// Bytes as one read of the stream returned them.
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The id of the last message that carried one.
    pub(super) fn last_id(&self) -> Option<String> {
        self.last_id.clone()
    }

    /// Bytes held that do not yet make a complete message.
    pub(super) fn pending(&self) -> usize {
        self.buf.len()
    }

    /// The next complete message (comments skipped); `None` until a blank line ends one.
    pub(super) fn next_message(&mut self) -> Option<Result<Value, BmcError>> {
        loop {
            let (len, consumed) = message_end(&self.buf)?;
            let block = String::from_utf8_lossy(&self.buf[..len])
                .replace("\r\n", "\n")
                .replace('\r', "\n");
            self.buf.drain(..consumed);
            if let Some(id) = message_id(&block) {
                self.last_id = Some(id);
            }
            if let Some(item) = parse_message(&block) {
                return Some(item);
            }
        }
    }
}

/// Where the first message of `buf` ends: its length (its lines and their ends) and the bytes
/// to consume with the blank line after it. `None` while no blank line is complete (a CR last
/// in `buf` may be the first half of a CRLF).
fn message_end(buf: &[u8]) -> Option<(usize, usize)> {
    let mut line_start = 0;
    let mut i = 0;
    while let Some(&b) = buf.get(i) {
        let eol = match (b, buf.get(i + 1)) {
            (b'\n', _) => 1,
            (b'\r', Some(b'\n')) => 2,
            (b'\r', Some(_)) => 1,
            (b'\r', None) => return None,
            _ => {
                i += 1;
                continue;
            }
        };
        if i == line_start {
            return Some((line_start, i + eol));
        }
        i += eol;
        line_start = i;
    }
    None
}

impl RedfishClient {
    /// Opens the EventService's server-sent event stream (`ServerSentEventUri`). The stream
    /// holds its own connection and no session-manager permit; it ends with an error when the
    /// BMC is silent for `idle_timeout` or the connection drops.
    pub async fn event_stream(
        &self,
        idle_timeout: Duration,
    ) -> Result<impl Stream<Item = Result<Value, BmcError>> + Send + 'static, BmcError> {
        Ok(self
            .event_stream_from(idle_timeout, None)
            .await?
            .map(|r| r.map(|e| e.data)))
    }

    /// The BMC's EventService; [`BmcError::Unsupported`] (naming `what` needs it) without one,
    /// or with one disabled.
    pub(super) async fn enabled_event_service(&self, what: &str) -> Result<Value, BmcError> {
        let root = self.root().await?;
        let service = root
            .event_service
            .clone()
            .ok_or_else(|| BmcError::Unsupported("EventService".into()))?;
        let service = self.get(&service).await?;
        if service.get("ServiceEnabled").and_then(Value::as_bool) == Some(false) {
            return Err(BmcError::Unsupported(format!(
                "{what} (the EventService is disabled)"
            )));
        }
        Ok(service)
    }

    /// As [`RedfishClient::event_stream`], each event with the SSE id it carried (or the last
    /// one before it), sending `Last-Event-ID: last_event_id` when given (a reconnection). An
    /// EventService with `ServiceEnabled: false` or without `ServerSentEventUri` is
    /// [`BmcError::Unsupported`].
    pub async fn event_stream_from(
        &self,
        idle_timeout: Duration,
        last_event_id: Option<String>,
    ) -> Result<impl Stream<Item = Result<PushedEvent, BmcError>> + Send + 'static, BmcError> {
        let service = self.enabled_event_service("server-sent events").await?;
        let uri = string(&service, "ServerSentEventUri")
            .ok_or_else(|| BmcError::Unsupported("server-sent events".into()))?;
        let last = last_event_id.as_deref();
        let mut auth = self.current_auth().await?;
        let mut resp = self.open_stream(&uri, &auth, last).await?;
        if resp.status() == reqwest::StatusCode::UNAUTHORIZED {
            auth = self.relogin(&auth).await?;
            resp = self.open_stream(&uri, &auth, last).await?;
        }
        if !resp.status().is_success() {
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            check_status(
                &Response {
                    status,
                    headers,
                    body,
                },
                "GET",
                &uri,
            )?;
            return Err(BmcError::Malformed(format!("{uri} answered HTTP {status}")));
        }
        let timeout = self.options.timeout;
        let bytes = resp.bytes_stream();
        let state = (bytes, Framer::default(), false);
        Ok(futures::stream::unfold(
            state,
            move |(mut bytes, mut buf, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(item) = buf.next_message() {
                        let id = buf.last_id();
                        let item = item.map(|data| PushedEvent { id, data });
                        return Some((item, (bytes, buf, false)));
                    }
                    // Complete messages are taken above; what is left is one unfinished event.
                    if buf.pending() > MAX_EVENT_BYTES {
                        let e = BmcError::TooLarge(format!(
                            "an event of the event stream is larger than {} KiB",
                            MAX_EVENT_BYTES >> 10
                        ));
                        return Some((Err(e), (bytes, Framer::default(), true)));
                    }
                    match tokio::time::timeout(idle_timeout, bytes.next()).await {
                        Err(_) => {
                            return Some((
                                Err(BmcError::Timeout(idle_timeout)),
                                (bytes, buf, true),
                            ));
                        }
                        Ok(None) => {
                            let e = BmcError::Unreachable("the event stream ended".into());
                            return Some((Err(e), (bytes, buf, true)));
                        }
                        Ok(Some(Err(e))) => {
                            let e = if e.is_timeout() {
                                BmcError::Timeout(timeout)
                            } else {
                                BmcError::Unreachable(Box::new(e))
                            };
                            return Some((Err(e), (bytes, buf, true)));
                        }
                        Ok(Some(Ok(chunk))) => buf.push(&chunk),
                    }
                }
            },
        ))
    }

    async fn open_stream(
        &self,
        uri: &str,
        auth: &Auth,
        last_event_id: Option<&str>,
    ) -> Result<reqwest::Response, BmcError> {
        let mut req = self
            .http
            .request(Method::GET, self.url(uri))
            .header("Accept", "text/event-stream")
            // The stream is long-lived: no overall deadline, only the idle timeout above.
            .timeout(Duration::from_secs(365 * 24 * 3600));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        match auth {
            Auth::Session { token, .. } => req = req.header("X-Auth-Token", token_header(token)),
            Auth::Basic => req = req.basic_auth(&self.user, Some(self.password.expose())),
            Auth::None => {}
        }
        let send = req.send();
        match tokio::time::timeout(self.options.timeout, send).await {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(e)) => Err(self.map_send_error(e)),
            Err(_) => Err(BmcError::Timeout(self.options.timeout)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn sse_blocks() {
        assert!(parse_message(": keep-alive").is_none());
        let v = parse_message("id: 1\ndata: {\"a\":\ndata: 1}")
            .unwrap()
            .unwrap();
        assert_eq!(v["a"], 1);
        assert!(matches!(
            parse_message("data: nope"),
            Some(Err(BmcError::Malformed(_)))
        ));
    }

    #[test]
    fn the_last_event_id_is_kept() {
        let mut framer = Framer::default();
        framer.push(b"id: 7\ndata: 1\n\ndata: 2\n\nid: 9\n\nid: \x01\ndata: 3\n\n");
        let long = format!("id: {}\ndata: 4\n\n", "8".repeat(MAX_EVENT_ID_BYTES + 1));
        framer.push(long.as_bytes());
        assert_eq!(framer.next_message().unwrap().unwrap(), 1);
        assert_eq!(framer.last_id().as_deref(), Some("7"));
        assert_eq!(framer.next_message().unwrap().unwrap(), 2);
        assert_eq!(framer.last_id().as_deref(), Some("7"));
        // An id-only block changes the id; a control character in an id is not kept.
        assert_eq!(framer.next_message().unwrap().unwrap(), 3);
        assert_eq!(framer.last_id().as_deref(), Some("9"));
        // An id longer than 256 bytes is not kept either.
        assert_eq!(framer.next_message().unwrap().unwrap(), 4);
        assert_eq!(framer.last_id().as_deref(), Some("9"));
    }

    #[test]
    fn a_character_cut_between_two_reads_is_kept() {
        // Found by the redfish_sse fuzz target: each read was decoded on its own, so the two
        // halves of a character became two U+FFFD.
        let stream = "data: {\"Message\": \"Inlet at 45 \u{b0}C\"}\n\n".as_bytes();
        let cut = stream.iter().position(|b| *b == 0xC2).unwrap() + 1;
        let mut framer = Framer::default();
        framer.push(&stream[..cut]);
        assert!(framer.next_message().is_none());
        framer.push(&stream[cut..]);
        let event = framer.next_message().unwrap().unwrap();
        assert_eq!(event["Message"], "Inlet at 45 \u{b0}C");
    }

    #[test]
    fn lines_end_with_crlf_lf_or_cr_even_when_cut() {
        // A CR last in what was read may be half a CRLF: the message ends at the next byte.
        for stream in [
            "data: 1\r\n\r\n",
            "data: 1\n\n",
            "data: 1\r\r: keep-alive\n\n",
        ] {
            for cut in 0..=stream.len() {
                let mut framer = Framer::default();
                framer.push(&stream.as_bytes()[..cut]);
                let mut got: Vec<_> = std::iter::from_fn(|| framer.next_message()).collect();
                framer.push(&stream.as_bytes()[cut..]);
                got.extend(std::iter::from_fn(|| framer.next_message()));
                assert_eq!(got.len(), 1, "{stream:?} cut at {cut}");
                assert_eq!(got[0].as_ref().unwrap(), 1);
            }
        }
    }
}
