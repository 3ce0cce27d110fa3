//! Configuration of the emulator: projects, tokens, timings and faults.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// How long each state of a device lasts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    pub queued_ms: u64,
    pub provisioning_ms: u64,
    pub reinstalling_ms: u64,
    pub deprovisioning_ms: u64,
    pub power_ms: u64,
}

impl Timings {
    /// Every transition happens at the next read: `queued` in the create response, `active` at
    /// the next GET. For tests.
    pub fn instant() -> Self {
        Timings {
            queued_ms: 0,
            provisioning_ms: 0,
            reinstalling_ms: 0,
            deprovisioning_ms: 0,
            power_ms: 0,
        }
    }

    /// Durations in the order of what the real service showed, shortened for a demo.
    pub fn realistic() -> Self {
        Timings {
            queued_ms: 3_000,
            provisioning_ms: 30_000,
            reinstalling_ms: 20_000,
            deprovisioning_ms: 10_000,
            power_ms: 5_000,
        }
    }

    /// These timings run `factor` times faster (the benchmarks' servers: realistic, divided
    /// by ten).
    pub fn faster(self, factor: u64) -> Self {
        let f = factor.max(1);
        Timings {
            queued_ms: self.queued_ms / f,
            provisioning_ms: self.provisioning_ms / f,
            reinstalling_ms: self.reinstalling_ms / f,
            deprovisioning_ms: self.deprovisioning_ms / f,
            power_ms: self.power_ms / f,
        }
    }

    pub(crate) fn d(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }
}

impl Default for Timings {
    fn default() -> Self {
        Timings::instant()
    }
}

/// A project served by the emulator.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectConfig {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

/// An API token and the projects it may use.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    pub token: String,
    /// Project ids this token may use.
    pub projects: Vec<String>,
    /// A read-only token gets 403 on every write.
    #[serde(default)]
    pub read_only: bool,
}

impl std::fmt::Debug for TokenConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenConfig")
            .field("token", &"***")
            .field("projects", &self.projects)
            .field("read_only", &self.read_only)
            .finish()
    }
}

/// Faults injected on one endpoint, named by the spec's operationId (e.g. `createDevice`) or
/// `*` for every endpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EndpointFault {
    /// Probability (0..=1) that a request fails with `status` before being processed.
    pub error_rate: f64,
    /// The next N requests fail with `status` before being processed.
    pub error_count: u32,
    /// Status of injected errors (default 500).
    pub status: Option<u16>,
    /// The next N requests are processed, then their response is held for `hang_ms`
    /// (the client times out: the response is lost).
    pub lose_response_count: u32,
    /// Added latency for this endpoint.
    pub latency_ms: u64,
}

/// A burst of 429 answers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitBurst {
    /// How many requests get 429.
    pub count: u32,
    /// `Retry-After` in seconds; when absent only `X-RateLimit-Reset` tells when to come back.
    #[serde(default)]
    pub retry_after_secs: Option<u64>,
    /// Seconds from now written to `X-RateLimit-Reset`.
    #[serde(default = "one")]
    pub reset_in_secs: u64,
}

fn one() -> u64 {
    1
}

/// A server-side rate limit: at most `limit` requests per window of `window_secs` seconds
/// (windows aligned on epoch seconds). Every answer carries `X-RateLimit-Limit`,
/// `X-RateLimit-Remaining` and `X-RateLimit-Reset`; a request beyond the limit gets 429 with
/// `Retry-After`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRateLimit {
    pub limit: u32,
    pub window_secs: u64,
}

/// A plan in a metro.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMetro {
    pub plan: String,
    pub metro: String,
}

/// Faults on demand. Replace them at run time with `PUT /_sim/faults`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Faults {
    /// Added latency on every request.
    pub latency_ms: u64,
    /// Per-endpoint faults keyed by operationId, or `*`.
    pub endpoints: BTreeMap<String, EndpointFault>,
    /// The next requests (any endpoint) get 429.
    pub rate_limit_burst: Option<RateLimitBurst>,
    /// A rate limit enforced by the emulator, announced in `X-RateLimit-*` headers.
    pub server_rate_limit: Option<ServerRateLimit>,
    /// Creating a device of this plan in this metro fails for lack of capacity.
    pub capacity_exhausted: Vec<PlanMetro>,
    /// Devices with these hostnames go queued -> provisioning -> failed.
    pub fail_provisioning: Vec<String>,
    /// Deprovisioning takes this long instead of the timing's value.
    pub slow_delete_ms: Option<u64>,
    /// How long a lost response is held (default 5000 ms).
    pub hang_ms: Option<u64>,
}

/// The whole emulator configuration (also the `--config` file, JSON).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    pub projects: Vec<ProjectConfig>,
    pub tokens: Vec<TokenConfig>,
    pub timings: Timings,
    pub faults: Faults,
    /// Seed of the random faults (error rates), so that runs repeat.
    pub seed: u64,
    /// Keep every request and response for `GET /_sim/traffic` (conformance checks).
    pub record_traffic: bool,
    /// Hardware reservations: servers set aside for a project, provisioned by passing their id
    /// (or `next-available`) as `hardware_reservation_id` when creating a device.
    pub hardware_reservations: Vec<HardwareReservationConfig>,
}

/// A hardware reservation of a project: one server of a plan in a metro.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareReservationConfig {
    /// Its UUID.
    pub id: String,
    pub project: String,
    pub plan: String,
    pub metro: String,
    /// `false`: a spare, which cannot be provisioned until activated.
    #[serde(default = "yes")]
    pub provisionable: bool,
}

fn yes() -> bool {
    true
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            projects: Vec::new(),
            tokens: Vec::new(),
            timings: Timings::instant(),
            faults: Faults::default(),
            seed: 1,
            record_traffic: false,
            hardware_reservations: Vec::new(),
        }
    }
}

impl SimConfig {
    /// One project that one token may use.
    pub fn single(token: &str, project: &str) -> Self {
        SimConfig {
            projects: vec![ProjectConfig {
                id: project.to_string(),
                name: "default".to_string(),
            }],
            tokens: vec![TokenConfig {
                token: token.to_string(),
                projects: vec![project.to_string()],
                read_only: false,
            }],
            ..SimConfig::default()
        }
    }

    /// Adds the project and a token for it unless they are there.
    pub fn with_project(mut self, token: &str, project: &str) -> Self {
        if !self.projects.iter().any(|p| p.id == project) {
            self.projects.push(ProjectConfig {
                id: project.to_string(),
                name: String::new(),
            });
        }
        match self.tokens.iter_mut().find(|t| t.token == token) {
            Some(t) => {
                if !t.projects.iter().any(|p| p == project) {
                    t.projects.push(project.to_string());
                }
            }
            None => self.tokens.push(TokenConfig {
                token: token.to_string(),
                projects: vec![project.to_string()],
                read_only: false,
            }),
        }
        self
    }
}
