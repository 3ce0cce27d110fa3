//! The public client: one long-lived session per BMC, re-established on
//! demand, kept alive while idle, closed on `close()` or drop.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{Mutex, Semaphore};
use tokio::time::Instant;

use crate::crypto::{CipherSuite, Password};
use crate::error::{Error, Result};
use crate::packet::Response;
use crate::rakp::Privilege;
use crate::session::{Counters, Login, Retry, Session};

/// How to reach and authenticate to one BMC.
#[derive(Clone, Debug)]
pub struct Config {
    /// BMC address (`host:port`; IPMI's port is 623).
    pub address: String,
    /// IPMI user name (at most 16 bytes).
    pub username: String,
    /// IPMI password (at most 20 bytes). Redacted in `Debug`.
    pub password: Password,
    /// Optional BMC key Kg (two-key login); `None` means Kg = password.
    pub bmc_key: Option<Password>,
    /// Cipher suites to try, in order; the next one is tried only when the
    /// BMC refuses the previous one or ignores its Open Session Request.
    /// Configure a single suite to forbid any fallback. Suite 0 cannot be
    /// expressed.
    pub cipher_suites: Vec<CipherSuite>,
    /// Privilege level requested for the session.
    pub privilege: Privilege,
    /// How long to wait for each answer before retransmitting.
    pub timeout: Duration,
    /// Retransmissions after the first packet of each exchange.
    pub retries: u32,
    /// Send a cheap request when the session has been idle this long, so the
    /// BMC does not expire it (BMCs commonly drop sessions after 60 s idle).
    /// `None` disables keep-alive.
    pub keepalive: Option<Duration>,
    /// Reads only: retransmit the first time after this (shorter) delay
    /// instead of the full `timeout`, so one lost datagram costs a short
    /// wait ("hedged" requests). `None`: every retransmission waits `timeout`.
    /// Commands that change the BMC are never retransmitted early.
    pub hedge_after: Option<Duration>,
}

impl Config {
    /// Defaults: suites 17 then 3, Operator privilege, 1 s × (1 + 3 retries), keep-alive every 30 s.
    pub fn new(
        address: impl Into<String>,
        username: impl Into<String>,
        password: impl Into<Password>,
    ) -> Self {
        Config {
            address: address.into(),
            username: username.into(),
            password: password.into(),
            bmc_key: None,
            cipher_suites: vec![CipherSuite::Suite17, CipherSuite::Suite3],
            privilege: Privilege::Operator,
            timeout: Duration::from_secs(1),
            retries: 3,
            keepalive: Some(Duration::from_secs(30)),
            hedge_after: None,
        }
    }

    fn retry(&self) -> Retry {
        Retry {
            timeout: self.timeout,
            retries: self.retries,
            hedge: self.hedge_after,
        }
    }

    /// Upper bound on how long any single client call can take: opening a
    /// session (three exchanges and Set Session Privilege per suite), the
    /// request, and — when a reused session turns out dead — closing it,
    /// opening a new one and repeating the request.
    pub fn worst_case(&self) -> Duration {
        let exchange = self.timeout * (self.retries + 1);
        let suites = self.cipher_suites.len().max(1) as u32;
        // Get Channel Authentication Capabilities, then per suite: Open
        // Session, RAKP 1/2, RAKP 3/4 (plus one Close Session attempt if
        // RAKP 4 never came), Set Session Privilege Level and a Close Session
        // (two attempts) if that last step fails.
        let open = exchange + (exchange * 4 + self.timeout * 3) * suites;
        // Request, one Close Session attempt, a fresh session, the request again.
        exchange * 2 + self.timeout + open * 2
    }
}

/// Counters about the client's use of the BMC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Sessions opened so far (one per successful RAKP handshake).
    pub sessions_opened: u64,
    /// Whether a session is currently open.
    pub session_open: bool,
    /// Requests answered.
    pub requests: u64,
    /// Packets dropped because their session sequence number was a replay or too old.
    pub replays_dropped: u64,
    /// Packets dropped because their integrity AuthCode did not verify.
    pub integrity_failures: u64,
}

struct Conn {
    socket: Arc<UdpSocket>,
    session: Option<Session>,
    last_activity: Instant,
    closed: bool,
    stats: ClientStats,
    suite: Option<CipherSuite>,
    counters: Arc<Counters>,
}

struct Inner {
    cfg: Config,
    peer: SocketAddr,
    /// A limit shared with other clients (a fleet), taken per exchange.
    gate: Option<Arc<Semaphore>>,
    conn: Mutex<Conn>,
    keepalive: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// An async IPMI 2.0 client for one BMC. Calls are serialised: at most one
/// request is in flight and at most one session is open per client.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.inner.peer)
            .field("username", &self.inner.cfg.username)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Resolve the address, open a session and start the keep-alive task.
    pub async fn connect(cfg: Config) -> Result<Client> {
        Self::connect_gated(cfg, None).await
    }

    /// Like [`Client::connect`], with a permit of `gate` taken for each
    /// exchange with the BMC (session setup, each request, keep-alive) and
    /// released in between: a fleet-wide limit that a slow or dead BMC holds
    /// only while one of its exchanges is outstanding.
    pub async fn connect_gated(cfg: Config, gate: Option<Arc<Semaphore>>) -> Result<Client> {
        if cfg.cipher_suites.is_empty() {
            return Err(Error::Protocol("no cipher suite configured".into()));
        }
        let peer = tokio::net::lookup_host(&cfg.address)
            .await?
            .next()
            .ok_or_else(|| Error::Protocol(format!("{} did not resolve", cfg.address)))?;
        let bind: SocketAddr = if peer.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            ([0u16; 8], 0).into()
        };
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(peer).await?;
        let inner = Arc::new(Inner {
            cfg,
            peer,
            gate,
            conn: Mutex::new(Conn {
                socket: Arc::new(socket),
                session: None,
                last_activity: Instant::now(),
                closed: false,
                stats: ClientStats::default(),
                suite: None,
                counters: Arc::default(),
            }),
            keepalive: std::sync::Mutex::new(None),
        });
        {
            let mut conn = inner.conn.lock().await;
            let _permit = inner.permit().await?;
            ensure_session(&inner.cfg, &mut conn).await?;
        }
        if let Some(every) = inner.cfg.keepalive {
            let task = tokio::spawn(keepalive(Arc::downgrade(&inner), every));
            if let Ok(mut slot) = inner.keepalive.lock() {
                *slot = Some(task);
            }
        }
        Ok(Client { inner })
    }

    /// The BMC's socket address.
    pub fn peer(&self) -> SocketAddr {
        self.inner.peer
    }

    /// The cipher suite of the current (or last) session.
    pub async fn cipher_suite(&self) -> Option<CipherSuite> {
        self.inner.conn.lock().await.suite
    }

    /// Session and request counters.
    pub async fn stats(&self) -> ClientStats {
        let conn = self.inner.conn.lock().await;
        ClientStats {
            session_open: conn.session.is_some(),
            replays_dropped: conn.counters.replays.load(Ordering::Relaxed),
            integrity_failures: conn.counters.integrity.load(Ordering::Relaxed),
            ..conn.stats
        }
    }

    /// Close the session. Later calls fail with [`Error::Closed`].
    pub async fn close(&self) {
        if let Ok(mut slot) = self.inner.keepalive.lock()
            && let Some(t) = slot.take()
        {
            t.abort();
        }
        let mut conn = self.inner.conn.lock().await;
        conn.closed = true;
        let Conn {
            socket, session, ..
        } = &mut *conn;
        if let Some(mut s) = session.take() {
            let _permit = self.inner.permit().await;
            s.close(socket, self.inner.cfg.retry()).await;
        }
    }

    /// Send a raw IPMI request; returns the response data on completion code 0.
    pub async fn raw(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>> {
        let r = self.call("raw request", netfn, cmd, data).await?;
        check("raw request", r)
    }

    /// An idempotent request (a read) with session (re)establishment: when a
    /// reused session does not answer, it is released and the request is
    /// repeated once on a new session. The completion code is left to the caller.
    pub(crate) async fn call(
        &self,
        name: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<Response> {
        self.call_with(name, netfn, cmd, data, Kind::Read).await
    }

    /// A request that changes the BMC (Chassis Control, boot options, SEL
    /// clear): never repeated on a new session after a timeout, because the
    /// BMC may have carried it out and only its answer was lost. The timeout
    /// is returned; a dead session is noticed by the next read.
    pub(crate) async fn call_once(
        &self,
        name: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<Response> {
        self.call_with(name, netfn, cmd, data, Kind::Write).await
    }

    /// A request that must never run twice (Chassis Control: a second hard reset is not
    /// harmless): sent once, never retransmitted, its answer awaited for the whole
    /// retransmission budget. A BMC that does not recognise a retransmission (same rqSeq,
    /// new session sequence number) carries out every copy, and many do not.
    pub(crate) async fn call_unrepeated(
        &self,
        name: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<Response> {
        self.call_with(name, netfn, cmd, data, Kind::Destructive)
            .await
    }

    async fn call_with(
        &self,
        name: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
        kind: Kind,
    ) -> Result<Response> {
        let idempotent = kind == Kind::Read;
        let cfg = &self.inner.cfg;
        let mut conn = self.inner.conn.lock().await;
        if conn.closed {
            return Err(Error::Closed);
        }
        let reused = conn.session.is_some();
        if !reused {
            let _permit = self.inner.permit().await?;
            ensure_session(cfg, &mut conn).await?;
        }
        let first = {
            let _permit = self.inner.permit().await?;
            request_once(cfg, &mut conn, name, netfn, cmd, data, kind).await
        };
        match first {
            Err(Error::Timeout { .. } | Error::Integrity(_)) if reused && idempotent => {
                // The BMC may have expired or forgotten the session (reboot,
                // idle timeout). Release it and try once on a fresh one.
                tracing::debug!(peer = %self.inner.peer, command = name, "re-establishing the IPMI session");
                let _permit = self.inner.permit().await?;
                drop_session(cfg, &mut conn).await;
                ensure_session(cfg, &mut conn).await?;
                request_once(cfg, &mut conn, name, netfn, cmd, data, kind).await
            }
            other => other,
        }
    }
}

impl Inner {
    async fn permit(&self) -> Result<Option<tokio::sync::SemaphorePermit<'_>>> {
        match &self.gate {
            Some(g) => g.acquire().await.map(Some).map_err(|_| Error::Closed),
            None => Ok(None),
        }
    }
}

/// How a request may be repeated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A read: hedged, retransmitted, repeated once on a new session.
    Read,
    /// A change that is harmless twice: retransmitted within its session only.
    Write,
    /// A change that must not run twice: sent once.
    Destructive,
}

async fn request_once(
    cfg: &Config,
    conn: &mut Conn,
    name: &'static str,
    netfn: u8,
    cmd: u8,
    data: &[u8],
    kind: Kind,
) -> Result<Response> {
    let Conn {
        socket, session, ..
    } = &mut *conn;
    let Some(s) = session.as_mut() else {
        return Err(Error::Closed);
    };
    let mut retry = cfg.retry();
    if kind != Kind::Read {
        retry.hedge = None;
    }
    if kind == Kind::Destructive {
        retry = Retry {
            timeout: cfg.timeout * (cfg.retries + 1),
            retries: 0,
            hedge: None,
        };
    }
    let r = s.request(socket, retry, name, netfn, cmd, data).await;
    match &r {
        Ok(_) => {
            conn.last_activity = Instant::now();
            conn.stats.requests += 1;
        }
        Err(Error::Timeout { .. } | Error::Integrity(_)) => {
            // Leave the session in place; the caller decides whether to drop it.
        }
        Err(_) => {}
    }
    r
}

/// Forget the current session after one Close Session attempt.
async fn drop_session(cfg: &Config, conn: &mut Conn) {
    let Conn {
        socket, session, ..
    } = &mut *conn;
    if let Some(mut s) = session.take() {
        let quick = Retry {
            timeout: cfg.timeout,
            retries: 0,
            hedge: None,
        };
        s.close(socket, quick).await;
    }
}

async fn ensure_session(cfg: &Config, conn: &mut Conn) -> Result<()> {
    if conn.session.is_some() {
        return Ok(());
    }
    // Once per (re)connection: fails fast, before any suite is tried, when
    // the BMC is not there at all.
    crate::session::channel_auth_caps(&conn.socket, cfg.privilege, cfg.retry()).await?;
    let mut last = Error::Protocol("no cipher suite configured".into());
    for suite in &cfg.cipher_suites {
        let login = Login {
            suite: *suite,
            username: &cfg.username,
            password: &cfg.password,
            bmc_key: cfg.bmc_key.as_ref(),
            privilege: cfg.privilege,
        };
        match Session::establish(
            &conn.socket,
            &login,
            cfg.retry(),
            Arc::clone(&conn.counters),
        )
        .await
        {
            Ok(s) => {
                conn.session = Some(s);
                conn.suite = Some(*suite);
                conn.stats.sessions_opened += 1;
                conn.last_activity = Instant::now();
                return Ok(());
            }
            // Refused, or ignored (some BMCs drop Open Session Requests for
            // algorithms they lack instead of answering with a status):
            // try the next configured suite.
            Err(e @ Error::UnsupportedCipherSuite { .. }) => last = e,
            Err(
                e @ Error::Timeout {
                    phase: "open session",
                    ..
                },
            ) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Keep the session from expiring while idle. A failed keep-alive drops the
/// session; the next call opens a new one (idle clients of a dead BMC stay quiet).
async fn keepalive(inner: Weak<Inner>, every: Duration) {
    // Scheduled from the last exchange, not on a fixed tick: a call just
    // after a tick must not push the next keep-alive to almost 2 × `every`.
    let mut wake = Instant::now() + every;
    loop {
        tokio::time::sleep_until(wake).await;
        let Some(inner) = inner.upgrade() else { return };
        let mut conn = inner.conn.lock().await;
        if conn.closed {
            return;
        }
        let due = conn.last_activity + every;
        if conn.session.is_none() || Instant::now() < due {
            wake = due.max(Instant::now() + Duration::from_millis(1));
            if conn.session.is_none() {
                wake = Instant::now() + every;
            }
            continue;
        }
        // Get Device ID: cheap and universally implemented.
        let r = match inner.permit().await {
            Ok(_permit) => {
                request_once(
                    &inner.cfg,
                    &mut conn,
                    "keep-alive",
                    0x06,
                    0x01,
                    &[],
                    Kind::Read,
                )
                .await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            tracing::debug!(peer = %inner.peer, error = %e, "keep-alive failed; dropping the session");
            drop_session(&inner.cfg, &mut conn).await;
        }
        wake = conn.last_activity + every;
        if wake <= Instant::now() {
            wake = Instant::now() + every;
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(mut slot) = self.keepalive.lock()
            && let Some(t) = slot.take()
        {
            t.abort();
        }
        let conn = self.conn.get_mut();
        let Some(mut session) = conn.session.take() else {
            return;
        };
        if conn.closed {
            return;
        }
        // Close Session without blocking the dropping thread.
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let retry = Retry {
            timeout: self.cfg.timeout,
            retries: 0,
            hedge: None,
        };
        let sock = Arc::clone(&conn.socket);
        handle.spawn(async move {
            session.close(&sock, retry).await;
        });
    }
}

/// Map a non-zero completion code to an error.
pub(crate) fn check(command: &'static str, r: Response) -> Result<Vec<u8>> {
    match r.completion {
        0 => Ok(r.data),
        0xD4 => Err(Error::Unauthorized(
            "insufficient privilege level for this command",
        )),
        code => Err(Error::CompletionCode { command, code }),
    }
}
