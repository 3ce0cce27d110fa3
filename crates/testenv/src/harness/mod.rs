//! The end-to-end harness: `ingot run` as a process ([`operator`]), the BMC peers the tests
//! drive it against ([`peers`]: sushy-tools, OpenIPMI's `ipmi_sim`), and one bounded poll
//! ([`wait_for`]), and named tests over one shared fixture ([`scenario`]).
//!
//! No port is ever picked here and handed to a child: the operator and the peers bind port 0
//! and the port they got is read back (their logs, ipmi_sim's socket); an address that must
//! outlive an operator's restarts is a [`operator::Front`] the test itself binds and holds.

// A failure of the harness is the failure of the test that uses it: it panics, with the cause.
#![allow(clippy::expect_used)]

pub mod bench;
pub mod operator;
pub mod peers;
pub mod scenario;

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Polls `probe` until it returns `Some`, for at most `within`; panics naming `what` after that.
pub async fn wait_for<T>(
    what: &str,
    within: Duration,
    mut probe: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A fresh private directory under the system's temporary directory.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ingot-{tag}-{}-{}",
        std::process::id(),
        crate::random_suffix(8)
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("creating the directory {}: {e}", dir.display()));
    dir
}

/// The path of `tool` on PATH, or a failure that says how to install it (`how`).
pub fn require_tool_from(tool: &str, how: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("`{tool}` is not on PATH. {how}, then run the tests again"))
}

/// A Python test peer from scripts/deps/requirements.txt.
pub fn require_tool(tool: &str) -> PathBuf {
    require_tool_from(
        tool,
        "It is a test peer listed in scripts/deps/requirements.txt; install it with \
         `source scripts/lib.sh && install_python_packages` (the README's test command does this)",
    )
}

/// A tool of a Debian package listed in scripts/deps/apt.txt.
pub fn require_apt_tool(tool: &str, package: &str) -> PathBuf {
    require_tool_from(
        tool,
        &format!(
            "It is a test peer from the Debian package `{package}` (listed in scripts/deps/apt.txt); \
             install it with `source scripts/lib.sh && install_apt_packages`"
        ),
    )
}

/// A child process killed (by its PID) and reaped when dropped.
pub struct ChildGuard(pub std::process::Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback TCP port nothing listens on (it was free a moment ago), for objects that must
/// point at a closed port. Never for a child to bind: a port chosen here can be taken first.
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A loopback UDP port nothing listens on, for objects that must point at a closed IPMI port.
pub fn closed_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .expect("a free loopback UDP port")
}
