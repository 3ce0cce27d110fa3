//! Helpers shared by the integration tests: finding the real peers, free
//! loopback ports, peer processes stopped by PID, and running ipmitool.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use ingot_ipmi::{CipherSuite, Client, Config, Error};

/// Locate `bin` on PATH or fail the test with how to install it.
pub fn require(bin: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let p = dir.join(bin);
        if p.is_file() {
            return p;
        }
    }
    let how = match bin {
        "ipmi_sim" => "apt package `openipmi` (listed in scripts/deps/apt.txt)",
        "ipmitool" => "apt package `ipmitool` (listed in scripts/deps/apt.txt)",
        "fakebmc" => "pip package `pyghmi` (listed in scripts/deps/requirements.txt)",
        _ => "see scripts/deps",
    };
    panic!(
        "`{bin}` is not on PATH: install {how}, e.g. `source scripts/lib.sh && install_apt_packages && install_python_packages`"
    );
}

/// A free UDP port on 127.0.0.1 (bound and released).
pub fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// A peer process, stopped by its PID when dropped.
pub struct Peer {
    pub child: Child,
    pub name: &'static str,
}

impl Peer {
    pub fn spawn(name: &'static str, mut cmd: Command) -> Peer {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Peer { child, name }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // Child::kill signals exactly this PID.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client configuration with short timeouts for loopback peers.
pub fn config(addr: SocketAddr, user: &str, pass: &str, suites: &[CipherSuite]) -> Config {
    let mut c = Config::new(addr.to_string(), user, pass);
    c.cipher_suites = suites.to_vec();
    c.timeout = Duration::from_millis(500);
    c.retries = 3;
    c.keepalive = None;
    c
}

/// Connect, retrying until `within` passes (the peer may still be starting).
pub async fn connect_when_ready(cfg: Config, within: Duration) -> Client {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match Client::connect(cfg.clone()).await {
            Ok(c) => return c,
            Err(e @ Error::Timeout { .. }) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("could not connect to {}: {e}", cfg.address),
        }
    }
}

/// Run ipmitool lanplus against a peer; returns stdout, panics on failure.
/// The password goes through the environment (-E), not the command line.
pub async fn ipmitool(
    suite: u8,
    addr: SocketAddr,
    user: &str,
    pass: &str,
    args: &[&str],
) -> String {
    let (out, ok, err) = ipmitool_status(suite, addr, user, pass, args).await;
    assert!(ok, "ipmitool {args:?} failed: {err}\n{out}");
    out
}

/// Like [`ipmitool`] but returns (stdout, success, stderr).
pub async fn ipmitool_status(
    suite: u8,
    addr: SocketAddr,
    user: &str,
    pass: &str,
    args: &[&str],
) -> (String, bool, String) {
    let bin = require("ipmitool");
    let mut cmd = Command::new(bin);
    cmd.args([
        "-I",
        "lanplus",
        "-C",
        &suite.to_string(),
        "-H",
        &addr.ip().to_string(),
    ])
    .args([
        "-p",
        &addr.port().to_string(),
        "-U",
        user,
        "-E",
        "-N",
        "1",
        "-R",
        "3",
    ])
    .args(args)
    .env("IPMITOOL_PASSWORD", pass)
    .env("TZ", "UTC")
    .stdin(Stdio::null());
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of a `Key : value` line in ipmitool output.
pub fn field(out: &str, key: &str) -> Option<String> {
    out.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == key).then(|| v.trim().to_string())
    })
}

/// Record ids (hex, first column) of `ipmitool sel list` output.
pub fn sel_list_ids(out: &str) -> Vec<u16> {
    out.lines()
        .filter_map(|l| l.split('|').next())
        .filter_map(|id| u16::from_str_radix(id.trim(), 16).ok())
        .collect()
}

/// Poll `cond` every 50 ms until it holds or `within` passes.
pub async fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
