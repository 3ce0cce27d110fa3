//! Errors of the provider layer and of the Equinix Metal client.

use std::time::Duration;

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong talking to a bare-metal cloud. Controllers decide on the variant: retry
/// (`Transient`, `RateLimited`), report (`Validation`, `NoCapacity`), fix credentials
/// (`Unauthorized`, `Forbidden`) or treat as gone (`NotFound`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not found: {message}")]
    NotFound { message: String },
    #[error("unauthorised (check the API token): {message}")]
    Unauthorized { message: String },
    #[error("forbidden: {message}")]
    Forbidden { message: String },
    #[error("no capacity: {message}")]
    NoCapacity { message: String },
    #[error("request refused by the API: {message}")]
    Validation { message: String },
    #[error("conflict: {message}")]
    Conflict { message: String },
    #[error("rate limited by the API, retry after {retry_after:?}")]
    RateLimited { retry_after: Option<Duration> },
    #[error("transient failure: {message}")]
    Transient {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("unexpected answer from the API: {message}")]
    Protocol {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// On premises: no server could be taken, for the reason `why` (the message names the
    /// selector and what was found).
    #[error("no server to take: {message}")]
    NoServer { why: Shortage, message: String },
    /// An operation that exists only on a cloud (network modes and VLANs of its port API,
    /// plans, locations, capacity, its iPXE URL): servers on premises have none.
    #[error("not on premises: {message}")]
    NotOnPremises { message: String },
}

/// Why no server on premises could be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortage {
    /// No server matches the selector at all.
    NoneMatching,
    /// Some match, and are free, but none is ready (its BMC not reached yet).
    NotReady,
    /// Every server that matches is taken (claimed, in a provisioned Cluster, being deleted).
    NoneFree,
}

impl Shortage {
    /// A short stable name, for conditions (`NoneMatching`, `NotReady`, `NoneFree`).
    pub fn as_str(self) -> &'static str {
        match self {
            Shortage::NoneMatching => "NoneMatching",
            Shortage::NotReady => "NotReady",
            Shortage::NoneFree => "NoneFree",
        }
    }
}

impl Error {
    /// Worth retrying later as is.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transient { .. } | Error::RateLimited { .. })
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// A short stable name, for metric labels and conditions.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "not_found",
            Error::Unauthorized { .. } => "unauthorized",
            Error::Forbidden { .. } => "forbidden",
            Error::NoCapacity { .. } => "no_capacity",
            Error::Validation { .. } => "validation",
            Error::Conflict { .. } => "conflict",
            Error::RateLimited { .. } => "rate_limited",
            Error::Transient { .. } => "transient",
            Error::InvalidRequest(_) => "invalid_request",
            Error::Protocol { .. } => "protocol",
            Error::NoServer { .. } => "no_server",
            Error::NotOnPremises { .. } => "not_on_premises",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
