//! Typed BMC errors. Messages never contain credentials; inner errors are kept as `source`.

use crate::types::BootMode;
use std::time::Duration;

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
pub enum BmcError {
    /// The BMC rejected the credentials (HTTP 401 after a fresh login, IPMI RAKP failure).
    #[error("the BMC rejected the credentials")]
    Unauthorized,
    /// Authenticated, but the account may not do this (HTTP 403).
    #[error("the BMC refused the operation for this account")]
    Forbidden,
    /// No answer within the per-call timeout.
    #[error("no answer from the BMC within {0:?}")]
    Timeout(Duration),
    /// The BMC accepted a power action but the system did not reach the state in time.
    #[error("the system did not reach the requested power state within {0:?}")]
    TransitionTimeout(Duration),
    /// Connection refused, unroutable, DNS failure: the request never left.
    #[error("cannot reach the BMC")]
    Unreachable(#[source] Source),
    /// The request left, then the connection was lost before its answer (reset by the BMC,
    /// host unreachable after sending): the BMC may have carried it out.
    #[error(
        "the connection to the BMC was lost after the request was sent: the BMC may have carried it out"
    )]
    MaybeSent(#[source] Source),
    /// An answer larger than the client reads (a body, an event, a collection page).
    #[error("the BMC's answer is too large: {0}")]
    TooLarge(String),
    /// The TLS handshake failed: untrusted or mismatched certificate, protocol error.
    #[error(
        "TLS handshake with the BMC failed (use a CA bundle, or --insecure to skip verification)"
    )]
    Tls(#[source] Source),
    /// The BMC's session table is full (Redfish `SessionLimitExceeded`, Dell `RAC0218`).
    #[error("the BMC has no free session (session table full)")]
    SessionLimit,
    /// The BMC is busy or starting (HTTP 503 without a session-limit message, 429).
    #[error("the BMC is temporarily unavailable (HTTP {status})")]
    Unavailable { status: u16 },
    /// The BMC answered something that is not the protocol: bad JSON, missing required fields.
    #[error("malformed answer from the BMC: {0}")]
    Malformed(String),
    /// The BMC answered with an error status.
    #[error("the BMC answered HTTP {status} to {method} {path}{}", message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Http {
        status: u16,
        method: String,
        path: String,
        message: Option<String>,
    },
    /// An IPMI command was refused with a completion code that has no more specific variant
    /// (busy codes 0xC0, 0xC3 and 0xD2 are transient).
    #[error("the BMC refused {command}: completion code {code:#04x} ({message})")]
    Command {
        command: String,
        code: u8,
        message: String,
    },
    /// The BMC does not offer this (no such resource, action or allowed value).
    #[error("not supported by this BMC: {0}")]
    Unsupported(String),
    /// The client was misconfigured (bad endpoint, unreadable CA bundle...).
    #[error("invalid BMC client configuration: {0}")]
    Config(String),
    /// The boot override was set, and reading it back shows the BMC switched the firmware
    /// boot mode (UEFI / Legacy) away from the one kept or asked for. ingot does not send the
    /// mode again to force it: the BMC changed it once already, and on some (Dell) a mode
    /// change schedules a BIOS configuration job.
    #[error("{}", not_kept(before, *wanted, *after))]
    BootModeNotKept {
        /// The mode the BMC reported before (`None`: not reported).
        before: Option<BootMode>,
        /// The mode kept or asked for.
        wanted: BootMode,
        /// The mode read back after the override was set.
        after: BootMode,
    },
}

impl BmcError {
    /// A short, low-cardinality label (metrics, `--json` error kind).
    pub fn kind(&self) -> &'static str {
        match self {
            BmcError::Unauthorized => "unauthorized",
            BmcError::Forbidden => "forbidden",
            BmcError::Timeout(_) => "timeout",
            BmcError::TransitionTimeout(_) => "transition_timeout",
            BmcError::Unreachable(_) => "unreachable",
            BmcError::MaybeSent(_) => "maybe_sent",
            BmcError::TooLarge(_) => "too_large",
            BmcError::Tls(_) => "tls",
            BmcError::SessionLimit => "session_limit",
            BmcError::Unavailable { .. } => "unavailable",
            BmcError::Malformed(_) => "malformed",
            BmcError::Http { .. } => "http",
            BmcError::Command { .. } => "command",
            BmcError::Unsupported(_) => "unsupported",
            BmcError::Config(_) => "config",
            BmcError::BootModeNotKept { .. } => "boot_mode_not_kept",
        }
    }

    /// Whether the BMC refused who we are (credentials, privilege, certificate): reading on
    /// will not help.
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            BmcError::Unauthorized | BmcError::Forbidden | BmcError::Tls(_)
        )
    }

    /// Whether a request that changes the BMC may have been carried out although no answer
    /// came (none in time, or the connection lost after sending): a destructive action
    /// (reset, cycle) must not be sent again; its outcome is read from the power state.
    pub fn may_have_acted(&self) -> bool {
        matches!(self, BmcError::Timeout(_) | BmcError::MaybeSent(_))
    }

    /// Whether retrying later may help (the operation itself is fine). A `MaybeSent` request
    /// is transient for repeatable actions only: see [`BmcError::may_have_acted`].
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            BmcError::Timeout(_)
                | BmcError::Unreachable(_)
                | BmcError::MaybeSent(_)
                | BmcError::SessionLimit
                | BmcError::Unavailable { .. }
                | BmcError::Command {
                    code: 0xC0 | 0xC3 | 0xD2,
                    ..
                }
        )
    }
}

fn not_kept(before: &Option<BootMode>, wanted: BootMode, after: BootMode) -> String {
    let what = if *before == Some(after) {
        format!(
            "the BMC still reports boot mode {} after the boot override asked for {}",
            after.redfish(),
            wanted.redfish()
        )
    } else {
        format!(
            "the BMC switched the boot mode from {} to {} when the boot override was set ({} was wanted)",
            before.map(|m| m.redfish()).unwrap_or("an unreported mode"),
            after.redfish(),
            wanted.redfish()
        )
    };
    format!(
        "{what}: this BMC does not keep the firmware boot mode across a boot override, and \
         ingot does not send the mode again to force it. Check the machine's boot mode in its \
         BIOS or BMC settings and set it to {} there, then update the BMC firmware or boot the \
         machine by its own boot order instead of a boot override",
        wanted.redfish()
    )
}
