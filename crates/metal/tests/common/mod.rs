//! Shared set-up of the client tests: an emulator on a loopback port and clients for it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use ingot_metal::equinix::{ClientConfig, EquinixClient, EquinixMetal, RateLimiter, RetryPolicy};
use ingot_metal::{ApiToken, Boot, CreateServer};
use ingot_metal_sim::{SimConfig, SimServer};

pub const TOKEN: &str = "tok-5d1e0c3b-very-secret";
pub const PROJECT: &str = "8e3c6f4a-1b2d-4c5e-9f70-a1b2c3d4e5f6";
pub const OTHER_PROJECT: &str = "0a9b8c7d-6e5f-4a3b-8c2d-1e0f9a8b7c6d";
pub const OWNER: &str = "ingot.io/pool=test";

pub fn config() -> SimConfig {
    let mut cfg = SimConfig::single(TOKEN, PROJECT);
    cfg.record_traffic = true;
    cfg
}

pub async fn start(cfg: SimConfig) -> SimServer {
    SimServer::start(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("emulator starts")
}

pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(50),
        max_rate_limit_wait: Duration::from_secs(30),
    }
}

pub fn client_with(
    srv: &SimServer,
    token: &str,
    timeout: Duration,
    retry: RetryPolicy,
) -> EquinixClient {
    let mut cfg = ClientConfig::new(srv.base_url(), ApiToken::new(token));
    cfg.timeout = timeout;
    cfg.retry = retry;
    EquinixClient::with_limiter(cfg, Arc::new(RateLimiter::unlimited())).expect("client")
}

pub fn client(srv: &SimServer) -> EquinixClient {
    client_with(srv, TOKEN, Duration::from_secs(10), fast_retry())
}

pub fn cloud(srv: &SimServer) -> EquinixMetal {
    EquinixMetal::new(client(srv), PROJECT)
}

pub fn ipxe_server(hostname: &str) -> CreateServer {
    let mut s = CreateServer::new(
        hostname,
        "c3.small.x86",
        "sv",
        OWNER,
        Boot::Ipxe {
            script_url: Some("http://127.0.0.1:9/boot.ipxe".to_string()),
            always: false,
        },
    );
    s.userdata = Some("#cloud-config\nhostname: x\n".to_string());
    s
}
