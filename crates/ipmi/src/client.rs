//! The public client: one long-lived session per BMC, re-established on
//! demand, kept alive while idle, closed on `close()` or drop.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::Mutex;
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
        }
    }

    fn retry(&self) -> Retry {
        Retry {
            timeout: self.timeout,
            retries: self.retries,
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
            s.close(socket, self.inner.cfg.retry()).await;
        }
    }

    /// Send a raw IPMI request; returns the response data on completion code 0.
    pub async fn raw(&self, netfn: u8, cmd: u8, data: &[u8]) -> Result<Vec<u8>> {
        let r = self.call("raw request", netfn, cmd, data).await?;
        check("raw request", r)
    }

    /// One request with session (re)establishment; the completion code is
    /// left to the caller.
    pub(crate) async fn call(
        &self,
        name: &'static str,
        netfn: u8,
        cmd: u8,
        data: &[u8],
    ) -> Result<Response> {
        let cfg = &self.inner.cfg;
        let mut conn = self.inner.conn.lock().await;
        if conn.closed {
            return Err(Error::Closed);
        }
        let reused = conn.session.is_some();
        ensure_session(cfg, &mut conn).await?;
        match request_once(cfg, &mut conn, name, netfn, cmd, data).await {
            Err(Error::Timeout { .. } | Error::Integrity(_)) if reused => {
                // The BMC may have expired or forgotten the session (reboot,
                // idle timeout). Release it and try once on a fresh one.
                tracing::debug!(peer = %self.inner.peer, command = name, "re-establishing the IPMI session");
                drop_session(cfg, &mut conn).await;
                ensure_session(cfg, &mut conn).await?;
                request_once(cfg, &mut conn, name, netfn, cmd, data).await
            }
            other => other,
        }
    }
}

async fn request_once(
    cfg: &Config,
    conn: &mut Conn,
    name: &'static str,
    netfn: u8,
    cmd: u8,
    data: &[u8],
) -> Result<Response> {
    let Conn {
        socket, session, ..
    } = &mut *conn;
    let Some(s) = session.as_mut() else {
        return Err(Error::Closed);
    };
    let r = s.request(socket, cfg.retry(), name, netfn, cmd, data).await;
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
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let mut conn = inner.conn.lock().await;
        if conn.closed {
            return;
        }
        if conn.session.is_none() || conn.last_activity.elapsed() < every {
            continue;
        }
        // Get Device ID: cheap and universally implemented.
        if let Err(e) = request_once(&inner.cfg, &mut conn, "keep-alive", 0x06, 0x01, &[]).await {
            tracing::debug!(peer = %inner.peer, error = %e, "keep-alive failed; dropping the session");
            conn.session = None;
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
