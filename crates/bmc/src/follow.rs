//! `ingot bmc ... events`: follows a BMC's events until SIGINT or SIGTERM.
//!
//! Redfish: the EventService's server-sent events, reconnecting after a drop (with
//! `Last-Event-ID` when the BMC gave ids), or, where the BMC offers none, the event log read every
//! `--poll-seconds`. IPMI: the SEL read every `--poll-seconds`. Polling prints only entries not
//! printed before, remembered in a bounded set.

use crate::Bmc;
use crate::Endpoint;
use crate::cli::{
    BmcArgs, EXIT_BMC_ERROR, JSON_SCHEMA_VERSION, error_message, failure, host_of, ipmi_options,
    prepare, print_outcome,
};
use crate::error::BmcError;
use crate::ipmi::{IpmiConnector, IpmiOptions};
use crate::manager::{Connector, ManagedBmc};
use crate::types::{LogEntry, Protocol, PushedEvent, PushedEvents};
use futures::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{HashSet, VecDeque};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Entries remembered as printed while polling: more than a SEL holds (65,535 records) and
/// than the Redfish client reads of a log (100 pages of 200), so an entry still in the log is
/// never printed twice; the oldest are forgotten first.
pub const MAX_SEEN: usize = 100_000;
/// First wait before reconnecting a dropped event stream; doubled after every failed attempt
/// (and every drop with no event in between), up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait after `backoff`: twice as long, at most [`MAX_BACKOFF`].
fn next_backoff(backoff: Duration) -> Duration {
    (backoff * 2).min(MAX_BACKOFF)
}
/// Records of one pushed event printed at most (an event of up to 1 MiB could list many).
const MAX_RECORDS_PER_EVENT: usize = 1000;
/// Characters of one printed field at most.
const MAX_FIELD_CHARS: usize = 4096;

/// One followed event, as printed.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Followed {
    /// `sse` (pushed by the BMC), `log` (Redfish event log entry) or `sel` (IPMI SEL).
    source: &'static str,
    id: Option<String>,
    time: Option<String>,
    severity: Option<String>,
    message_id: Option<String>,
    message: String,
    /// The resource the event is about (`OriginOfCondition`), or the log it was read from.
    origin: Option<String>,
}

fn clip(s: &str) -> String {
    s.chars().take(MAX_FIELD_CHARS).collect()
}

fn field(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(clip(s)),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The records of a Redfish `Event` (its `Events` array; a bare record is taken as one).
fn records_of(event: &PushedEvent) -> Vec<Followed> {
    let data = &event.data;
    let list: Vec<&Value> = match data.get("Events") {
        Some(Value::Array(a)) => a.iter().take(MAX_RECORDS_PER_EVENT).collect(),
        _ if data.get("Message").is_some() || data.get("MessageId").is_some() => vec![data],
        _ => Vec::new(),
    };
    list.into_iter()
        .map(|r| Followed {
            source: "sse",
            id: field(r, "EventId").or_else(|| event.id.as_deref().map(clip)),
            time: field(r, "EventTimestamp"),
            severity: field(r, "MessageSeverity").or_else(|| field(r, "Severity")),
            message_id: field(r, "MessageId"),
            message: field(r, "Message").unwrap_or_default(),
            origin: r
                .get("OriginOfCondition")
                .and_then(|o| field(o, "@odata.id")),
        })
        .collect()
}

fn from_entry(e: &LogEntry, protocol: Protocol) -> Followed {
    Followed {
        source: if protocol == Protocol::Ipmi {
            "sel"
        } else {
            "log"
        },
        id: Some(clip(&e.id)),
        time: e.created.as_deref().map(clip),
        severity: e.severity.as_deref().map(clip),
        message_id: e.message_id.as_deref().map(clip),
        message: clip(&e.message),
        origin: Some(clip(&e.log)),
    }
}

/// One line of text: control characters (a newline in a BMC's message) become spaces.
fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

struct Printer {
    json: bool,
    endpoint: Endpoint,
}

impl Printer {
    fn print(&self, protocol: Protocol, e: &Followed) -> std::io::Result<()> {
        let line = if self.json {
            json!({
                "schemaVersion": JSON_SCHEMA_VERSION,
                "host": host_of(&self.endpoint, Some(protocol)),
                "protocol": protocol,
                "command": "events",
                "ok": true,
                "result": e,
            })
            .to_string()
        } else {
            let o = |s: &Option<String>| s.as_deref().map(one_line).unwrap_or_else(|| "-".into());
            format!(
                "{} | {} | {} | {}",
                o(&e.time),
                o(&e.severity),
                o(&e.message_id),
                one_line(&e.message)
            )
        };
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()
    }
}

/// Printed entry keys, bounded: the oldest are forgotten first.
struct Seen {
    set: HashSet<String>,
    order: VecDeque<String>,
    cap: usize,
}

impl Seen {
    fn new(cap: usize) -> Self {
        Seen {
            set: HashSet::new(),
            order: VecDeque::new(),
            cap: cap.max(1),
        }
    }

    /// Whether `key` is new (then remembered).
    fn insert(&mut self, key: String) -> bool {
        if self.set.contains(&key) {
            return false;
        }
        if self.order.len() >= self.cap
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.set.insert(key.clone());
        self.order.push_back(key);
        true
    }

    fn clear(&mut self) {
        self.set.clear();
        self.order.clear();
    }
}

/// Why following stopped short of a signal.
enum Stop {
    Bmc(BmcError),
    /// stdout can no longer be written (closed by the reader).
    Output,
}

impl From<BmcError> for Stop {
    fn from(e: BmcError) -> Self {
        Stop::Bmc(e)
    }
}

impl From<std::io::Error> for Stop {
    fn from(_: std::io::Error) -> Self {
        Stop::Output
    }
}

/// Whether the BMC does not push events (so the log is polled instead).
fn pushes_none(e: &BmcError) -> bool {
    matches!(
        e,
        BmcError::Unsupported(_) | BmcError::Http { .. } | BmcError::Unavailable { .. }
    )
}

/// Runs `events` and prints what it follows; exit 0 on SIGINT / SIGTERM.
pub(crate) async fn run(
    args: BmcArgs,
    connectors: Vec<Arc<dyn Connector>>,
    since_now: bool,
    poll_seconds: u64,
) -> anyhow::Result<ExitCode> {
    let signal = match signalled() {
        Ok(s) => s,
        Err(e) => {
            let out = failure(
                &args,
                EXIT_BMC_ERROR,
                "config",
                format!("cannot listen for SIGINT/SIGTERM: {e}"),
            );
            print_outcome(args.json, &out)?;
            return Ok(ExitCode::from(out.code));
        }
    };
    // The IPMI session lives as long as the command: kept alive between polls (as the library
    // does by default), where a one-shot command needs no keep-alive.
    let mut connectors = connectors;
    if !connectors.iter().any(|c| c.protocol() == Protocol::Ipmi) {
        connectors.push(Arc::new(IpmiConnector::new(IpmiOptions {
            keepalive: IpmiOptions::default().keepalive,
            ..ipmi_options(args.cipher_suite)
        })));
    }
    let (manager, bmc, endpoint) = match prepare(&args, connectors, |n| std::env::var(n).ok()) {
        Ok(p) => p,
        Err(out) => {
            print_outcome(args.json, &out)?;
            return Ok(ExitCode::from(out.code));
        }
    };
    let printer = Printer {
        json: args.json,
        endpoint,
    };
    let poll = Duration::from_secs(poll_seconds.clamp(1, 3600));
    let stop = tokio::select! {
        stop = follow(&bmc, &printer, since_now, poll) => Some(stop),
        () = signal => None,
    };
    manager.shutdown().await;
    match stop {
        None => Ok(ExitCode::SUCCESS),
        // stdout closed (`| head`): nothing more to say.
        Some(Stop::Output) => Ok(ExitCode::SUCCESS),
        Some(Stop::Bmc(e)) => {
            let out = failure(&args, EXIT_BMC_ERROR, e.kind(), error_message(&e));
            print_outcome(args.json, &out)?;
            Ok(ExitCode::from(out.code))
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM (handlers installed now).
#[cfg(unix)]
fn signalled() -> std::io::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}

#[cfg(not(unix))]
fn signalled() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}

async fn follow(bmc: &ManagedBmc, out: &Printer, since_now: bool, poll: Duration) -> Stop {
    let stop = match bmc.pushed_events(None).await {
        Ok(stream) => {
            eprintln!("following the BMC's server-sent events (Redfish EventService)");
            follow_pushed(bmc, out, stream, since_now, poll).await
        }
        Err(e) if pushes_none(&e) => {
            match bmc.protocol() {
                Protocol::Ipmi => eprintln!("following the SEL, read every {}s", poll.as_secs()),
                Protocol::Redfish => eprintln!(
                    "the BMC offers no server-sent events ({e}); following the event log, read every {}s",
                    poll.as_secs()
                ),
            }
            poll_log(bmc, out, since_now, poll).await
        }
        Err(e) => Err(e.into()),
    };
    match stop {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

/// The log's entries now, printed (errors said on stderr: the events still follow).
async fn print_log(bmc: &ManagedBmc, out: &Printer) -> Result<(), Stop> {
    match bmc.event_log().await {
        Ok(entries) => {
            for e in &entries {
                out.print(bmc.protocol(), &from_entry(e, bmc.protocol()))?;
            }
        }
        Err(e) if e.is_auth() => return Err(e.into()),
        Err(e) => eprintln!("the event log could not be read ({e}); following new events only"),
    }
    Ok(())
}

async fn follow_pushed(
    bmc: &ManagedBmc,
    out: &Printer,
    mut stream: PushedEvents,
    since_now: bool,
    poll: Duration,
) -> Result<std::convert::Infallible, Stop> {
    // The stream is open before the log is read: an entry made meanwhile may show twice, but
    // none is missed.
    if !since_now {
        print_log(bmc, out).await?;
    }
    let mut last_id: Option<String> = None;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let why = match stream.next().await {
            Some(Ok(event)) => {
                if event.id.is_some() {
                    last_id.clone_from(&event.id);
                }
                for r in records_of(&event) {
                    out.print(Protocol::Redfish, &r)?;
                }
                backoff = FIRST_BACKOFF;
                continue;
            }
            Some(Err(e)) => error_message(&e),
            None => "the stream ended".into(),
        };
        eprintln!(
            "the event stream dropped ({why}); reconnecting in {}s",
            backoff.as_secs()
        );
        stream = loop {
            tokio::time::sleep(backoff).await;
            backoff = next_backoff(backoff);
            match bmc.pushed_events(last_id.clone()).await {
                Ok(s) => {
                    match &last_id {
                        Some(id) => eprintln!("event stream reconnected (Last-Event-ID {id})"),
                        None => eprintln!("event stream reconnected"),
                    }
                    break s;
                }
                Err(e) if e.is_auth() => return Err(e.into()),
                Err(e) if pushes_none(&e) => {
                    eprintln!(
                        "the BMC no longer offers server-sent events ({e}); following the event log, read every {}s",
                        poll.as_secs()
                    );
                    return poll_log(bmc, out, true, poll).await;
                }
                Err(e) => eprintln!(
                    "reconnecting the event stream failed ({}); retrying in {}s",
                    error_message(&e),
                    backoff.as_secs()
                ),
            }
        };
    }
}

/// Reads the log (SEL) every `poll`, printing the entries not printed before.
async fn poll_log(
    bmc: &ManagedBmc,
    out: &Printer,
    since_now: bool,
    poll: Duration,
) -> Result<std::convert::Infallible, Stop> {
    let mut seen = Seen::new(MAX_SEEN);
    let mut previous: Option<HashSet<String>> = None;
    loop {
        match bmc.event_log().await {
            Ok(entries) => {
                let protocol = bmc.protocol();
                let keys: HashSet<String> = entries.iter().map(LogEntry::dedup_key).collect();
                if let Some(prev) = &previous
                    && !prev.is_empty()
                    && prev.is_disjoint(&keys)
                {
                    eprintln!(
                        "the {} was cleared: none of the {} entries read before is there now",
                        if protocol == Protocol::Ipmi {
                            "SEL"
                        } else {
                            "event log"
                        },
                        prev.len()
                    );
                    seen.clear();
                }
                let quiet = previous.is_none() && since_now;
                for e in &entries {
                    if seen.insert(e.dedup_key()) && !quiet {
                        out.print(protocol, &from_entry(e, protocol))?;
                    }
                }
                previous = Some(keys);
            }
            Err(e) if e.is_auth() || previous.is_none() => return Err(e.into()),
            Err(e) => eprintln!(
                "reading the event log failed ({}); trying again in {}s",
                error_message(&e),
                poll.as_secs()
            ),
        }
        tokio::time::sleep(poll).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_seen_set_is_bounded_and_forgets_the_oldest() {
        let mut s = Seen::new(2);
        assert!(s.insert("a".into()));
        assert!(!s.insert("a".into()));
        assert!(s.insert("b".into()));
        assert!(s.insert("c".into()));
        assert_eq!(s.set.len(), 2);
        assert!(s.insert("a".into()), "the oldest was forgotten");
        assert!(!s.insert("c".into()));
    }

    #[test]
    fn only_a_bmc_without_the_stream_is_polled() {
        let http = BmcError::Http {
            status: 404,
            method: "GET".into(),
            path: "/redfish/v1/EventService/SSE".into(),
            message: None,
        };
        assert!(pushes_none(&http));
        assert!(pushes_none(&BmcError::Unavailable { status: 503 }));
        assert!(pushes_none(&BmcError::Unsupported("x".into())));
        assert!(!pushes_none(&BmcError::Unauthorized));
        assert!(!pushes_none(&BmcError::Timeout(Duration::from_secs(1))));
    }

    #[test]
    fn the_backoff_doubles_up_to_thirty_seconds() {
        let mut d = FIRST_BACKOFF;
        let mut waits = vec![d.as_secs()];
        for _ in 0..6 {
            d = next_backoff(d);
            waits.push(d.as_secs());
        }
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
    }

    #[test]
    fn records_and_fields_are_bounded() {
        let long = "x".repeat(MAX_FIELD_CHARS + 10);
        let record = json!({"Message": long, "MessageId": long});
        let event = PushedEvent {
            id: None,
            data: json!({"Events": vec![record; MAX_RECORDS_PER_EVENT + 5]}),
        };
        let r = records_of(&event);
        assert_eq!(r.len(), 1000);
        assert_eq!(r[0].message.chars().count(), 4096);
        assert_eq!(r[0].message_id.as_ref().unwrap().chars().count(), 4096);
    }

    #[test]
    fn records_of_any_event_document() {
        let ev = |data: Value| PushedEvent {
            id: Some("4".into()),
            data,
        };
        let r = records_of(&ev(json!({"Events": [
            {"EventId": "9", "Message": "PSU\nlost", "MessageId": "A.1", "Severity": "Critical",
             "OriginOfCondition": {"@odata.id": "/x"}},
            {"Message": 3}
        ]})));
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].id.as_deref(), Some("9"));
        assert_eq!(r[0].origin.as_deref(), Some("/x"));
        assert_eq!(r[1].id.as_deref(), Some("4"));
        assert_eq!(r[1].message, "3");
        assert_eq!(one_line(&r[0].message), "PSU lost");
        assert!(records_of(&ev(json!([1, 2]))).is_empty());
        assert!(records_of(&ev(json!({"Events": "x"}))).is_empty());
        assert_eq!(records_of(&ev(json!({"MessageId": "B.2"}))).len(), 1);
    }
}
