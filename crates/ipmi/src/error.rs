//! Typed errors. None of them carries a credential: the password only ever
//! lives inside [`crate::Password`], whose `Debug` and `Display` redact it.

use std::time::Duration;

/// Everything an IPMI call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No (valid) answer arrived after every retransmission.
    #[error("no response from the BMC during {phase} after {attempts} attempts of {per_attempt:?}")]
    Timeout {
        /// What the client was waiting for (e.g. "open session", "Get Device ID").
        phase: &'static str,
        /// Packets sent, the first transmission included.
        attempts: u32,
        /// How long each attempt waited.
        per_attempt: Duration,
    },
    /// The BMC rejected the credentials, or proved it does not know them
    /// (a RAKP message authentication code did not verify).
    #[error("authentication failed: {0}")]
    AuthFailed(&'static str),
    /// Authenticated, but not allowed to do this (privilege level).
    #[error("not authorized: {0}")]
    Unauthorized(&'static str),
    /// The BMC has no free session slot (RMCP+ status 0x01/0x0B or completion code 0xD3/0x83 analogue).
    #[error("the BMC session table is full (status {status:#04x})")]
    SessionLimit {
        /// The RMCP+ status code the BMC returned.
        status: u8,
    },
    /// The BMC does not offer the requested cipher suite.
    #[error("the BMC does not accept cipher suite {suite} (status {status:#04x})")]
    UnsupportedCipherSuite {
        /// Requested suite id.
        suite: u8,
        /// RMCP+ status code returned by the BMC.
        status: u8,
    },
    /// Packets arrived for this session but their integrity AuthCode did not verify.
    #[error("integrity check failed on {0} packet(s) from the BMC")]
    Integrity(u32),
    /// A well-formed answer that violates the protocol (wrong lengths,
    /// algorithms the client did not propose, unexpected payloads).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An RMCP+ session-setup status code that has no more specific variant.
    #[error("session setup rejected by the BMC: RMCP+ status {0:#04x} ({desc})", desc = rakp_status_text(*.0))]
    RakpStatus(u8),
    /// The command reached the BMC and it answered with a non-zero completion code.
    #[error("{command} failed: completion code {code:#04x} ({desc})", desc = completion_code_text(*.code))]
    CompletionCode {
        /// Name of the command.
        command: &'static str,
        /// The completion code.
        code: u8,
    },
    /// Local socket errors before anything was sent (the BMC never saw the request).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The request was sent, then the network failed (host unreachable, ...) before its
    /// answer: the BMC may have carried it out.
    #[error(
        "the network failed after {command} was sent, which the BMC may have carried out: {source}"
    )]
    MaybeSent {
        /// Name of the command.
        command: &'static str,
        /// The socket error.
        source: std::io::Error,
    },
    /// The client was closed.
    #[error("the client is closed")]
    Closed,
}

impl Error {
    /// True when retrying later may help (timeouts, packet loss, session table full).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Timeout { .. }
                | Error::SessionLimit { .. }
                | Error::Io(_)
                | Error::MaybeSent { .. }
        )
    }
}

/// Short description of an RMCP+ status code (IPMI 2.0 table 13-15).
pub fn rakp_status_text(code: u8) -> &'static str {
    match code {
        0x00 => "no errors",
        0x01 => "insufficient resources to create a session",
        0x02 => "invalid session ID",
        0x03 => "invalid payload type",
        0x04 => "invalid authentication algorithm",
        0x05 => "invalid integrity algorithm",
        0x06 => "no matching authentication payload",
        0x07 => "no matching integrity payload",
        0x08 => "inactive session ID",
        0x09 => "invalid role",
        0x0A => "unauthorized role or privilege level requested",
        0x0B => "insufficient resources to create a session at the requested role",
        0x0C => "invalid name length",
        0x0D => "unauthorized name",
        0x0E => "unauthorized GUID",
        0x0F => "invalid integrity check value",
        0x10 => "invalid confidentiality algorithm",
        0x11 => "no cipher suite match with proposed security algorithms",
        0x12 => "illegal or unrecognized parameter",
        _ => "reserved",
    }
}

/// Short description of a generic IPMI completion code (IPMI 2.0 table 5-2).
pub fn completion_code_text(code: u8) -> &'static str {
    match code {
        0x00 => "success",
        0xC0 => "node busy",
        0xC1 => "invalid command",
        0xC2 => "command invalid for given LUN",
        0xC3 => "timeout while processing command",
        0xC4 => "out of space",
        0xC5 => "reservation canceled or invalid reservation ID",
        0xC6 => "request data truncated",
        0xC7 => "request data length invalid",
        0xC8 => "request data field length limit exceeded",
        0xC9 => "parameter out of range",
        0xCA => "cannot return number of requested data bytes",
        0xCB => "requested sensor, data, or record not present",
        0xCC => "invalid data field in request",
        0xCD => "command illegal for specified sensor or record type",
        0xCE => "command response could not be provided",
        0xCF => "cannot execute duplicated request",
        0xD0 => "SDR repository in update mode",
        0xD1 => "device in firmware update mode",
        0xD2 => "BMC initialization in progress",
        0xD3 => "destination unavailable",
        0xD4 => "insufficient privilege level",
        0xD5 => "command not supported in present state",
        0xD6 => "command sub-function disabled or unavailable",
        0xFF => "unspecified error",
        0x80..=0xBE => "command-specific",
        _ => "reserved",
    }
}

/// Result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
