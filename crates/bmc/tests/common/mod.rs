//! Shared test helpers: external peers on PATH, free loopback ports, child processes stopped
//! by their own PID, bounded polling.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod openipmi;

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The path of `tool`, or a failure that says how to install it.
pub fn require_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(tool);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "`{tool}` is not on PATH. It is a test peer listed in scripts/deps/requirements.txt; \
         install it with `source scripts/lib.sh && install_python_packages` (the README's test \
         command does this), then run the tests again"
    );
}

/// The path of `tool` from a Debian package, or a failure that says how to install it.
pub fn require_apt_tool(tool: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(tool);
        if candidate.is_file() {
            return candidate;
        }
    }
    panic!(
        "`{tool}` is not on PATH. It is a test peer from the Debian package `{package}` (listed in \
         scripts/deps/apt.txt); install it with `source scripts/lib.sh && install_apt_packages`, \
         then run the tests again"
    );
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free loopback port")
}

/// A child process killed (by its PID) and reaped when dropped.
pub struct ChildGuard(pub Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn spawn(cmd: &mut Command) -> ChildGuard {
    ChildGuard(cmd.spawn().expect("start test peer"))
}

/// Polls `f` until it returns `Some`, at most until `deadline` passes.
pub async fn poll_until<T, F, Fut>(what: &str, deadline: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < end,
            "gave up waiting for {what} after {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ingot-bmc-{tag}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// How the tests reach an emulated BMC: its URL, the emulator's default account, the protocol
/// detected.
pub fn bmc_config(url: &str) -> ingot_bmc::manager::BmcConfig {
    ingot_bmc::manager::BmcConfig {
        endpoint: ingot_bmc::Endpoint::parse(url, None).unwrap(),
        username: "admin".into(),
        password: ingot_bmc::Password::new("password"),
        protocol: None,
        insecure_tls: false,
        ca_bundle_pem: None,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    }
}
