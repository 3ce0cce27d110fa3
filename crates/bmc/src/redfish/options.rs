//! The client's settings: authentication, TLS, timeouts, connection reuse, hedging and the
//! system to manage.

use std::time::Duration;

/// How the client authenticates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// A Redfish session when the service offers one, else HTTP Basic.
    #[default]
    Auto,
    /// Sessions only.
    Session,
    /// HTTP Basic on every request, no session.
    Basic,
}

/// TLS settings. Certificates are verified against the system roots by default.
#[derive(Clone, Debug, Default)]
pub struct TlsOptions {
    /// Skip certificate verification (rufio's `insecureTLS: true`). Opt-in only.
    pub insecure: bool,
    /// Extra trusted roots, PEM (one or more certificates).
    pub ca_bundle_pem: Option<Vec<u8>>,
    /// Trust exactly the server certificate with this SHA-256 fingerprint (of its DER), and
    /// no other: roots, the CA bundle and `insecure` are then not consulted.
    pub pinned_sha256: Option<[u8; 32]>,
}

/// Client settings.
#[derive(Clone, Debug)]
pub struct RedfishOptions {
    /// Bound on every HTTP request (connect + answer).
    pub timeout: Duration,
    pub tls: TlsOptions,
    pub auth: AuthMode,
    /// How long `cycle` waits for the system to report `Off` when it has to emulate
    /// `PowerCycle` with `ForceOff` + `On`.
    pub transition_timeout: Duration,
    /// Idle connections kept per BMC. Sessions do not depend on connections: at fleet scale
    /// (thousands of BMCs, limited file descriptors) 0 reconnects per request and keeps only
    /// the in-flight connections open.
    pub idle_connections_per_bmc: usize,
    /// How long an idle connection is kept. Long enough to carry one operation's requests
    /// (a Job's tasks, a power transition's polls every 3 s), short enough that a fleet polled
    /// every few minutes does not hold a connection (TLS and HTTP buffers, about 50 KiB) per
    /// BMC between polls: at 10,000 BMCs polled every 3 minutes, about 55 connections open a
    /// second, so 10 s kept 550 or more open and 4 s keeps about 220.
    pub idle_connection_timeout: Duration,
    /// Idempotent reads (GET, and the DELETE of our own session) are hedged: when no answer
    /// came after the BMC's usual answer time plus four deviations (`AnswerTime`), at most
    /// this long and half the timeout, an identical copy is sent, another after twice that
    /// and a third after three times, within a fleet-wide budget of copies (`RedfishStats`);
    /// the first answer wins
    /// ("The Tail at Scale"). A login without an answer after this long is sent again (the
    /// slower session is deleted). `None`: no hedging. PATCH, POST actions and other
    /// DELETEs are never hedged.
    pub hedge_after: Option<Duration>,
    /// The computer system to manage when the BMC has several, by `Name` (as bmclib matches
    /// rufio's `systemName`) or else `Id`; `None`: the first member of `Systems`.
    pub system_name: Option<String>,
}

impl Default for RedfishOptions {
    fn default() -> Self {
        RedfishOptions {
            timeout: Duration::from_secs(15),
            tls: TlsOptions::default(),
            auth: AuthMode::Auto,
            transition_timeout: Duration::from_secs(60),
            idle_connections_per_bmc: 1,
            idle_connection_timeout: Duration::from_secs(4),
            hedge_after: Some(Duration::from_secs(2)),
            system_name: None,
        }
    }
}
