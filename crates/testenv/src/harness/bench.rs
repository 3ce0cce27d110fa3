//! What the benchmarks share: the operator as a measured process, and its memory.

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

/// A process started in its own process group (`Command::process_group(0)`), stopped by a
/// SIGTERM to that group when dropped, so that the operator logs out and a profiler wrapping it
/// (`INGOT_BENCH_WRAP=heaptrack`) writes its data; killed after 30 s if it has not exited.
pub struct ProcessGroup(pub Child);

impl ProcessGroup {
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// CPU time the process has used so far (user and system), in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.id())).unwrap_or_default();
        // After the command's closing parenthesis: state is field 3, utime 14, stime 15.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest.split_whitespace().collect())
            .unwrap_or_default();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / 100.0
    }

    /// Peak and current resident set size, in MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let mib = |key| proc_status_kib(self.id(), key) as f64 / 1024.0;
        (mib("VmHWM:"), mib("VmRSS:"))
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGTERM,
            );
        }
        for _ in 0..300 {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS:`, `VmHWM:`), 0 once the process is gone.
pub fn proc_status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// `INGOT_BENCH_BINARY` (a release build: its figures are what a cluster runs), or the `ingot`
/// binary of the running example's profile (`target/<profile>/ingot`).
pub fn ingot_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("INGOT_BENCH_BINARY") {
        return binary.into();
    }
    let exe = std::env::current_exe().expect("the running example's path");
    let binary = exe
        .parent()
        .and_then(|examples| examples.parent())
        .expect("an example runs from target/<profile>/examples")
        .join("ingot");
    assert!(
        binary.is_file(),
        "{} is missing: run `cargo build -p ingot` first",
        binary.display()
    );
    binary
}
