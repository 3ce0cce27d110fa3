//! `ingot run` as the end-to-end tests start it: one builder for its controllers, arguments,
//! environment and crash point; its HTTP (and power action API) address read back from its log
//! (it binds port 0 itself, so no port is raced for); /metrics scraped; killed, restarted, or
//! waited for at a crash point.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use super::wait_for;

/// The environment variable of `ingot run`'s crash point (test builds only).
pub const CRASH_POINT_ENV: &str = "INGOT_CRASH_POINT";

/// The log line of the health and metrics server, with its `address` field.
const HTTP_LINE: &str = "serving /healthz, /readyz and /metrics";
/// The log line of the power action API, with its `address` field.
const POWER_API_LINE: &str = "serving Harvester's node power actions over HTTPS";

/// How to start `ingot run`; [`OperatorBuilder::start`] starts it.
#[derive(Clone, Debug)]
pub struct OperatorBuilder {
    binary: PathBuf,
    args: Vec<String>,
    defaults: Vec<String>,
    env: Vec<(String, String)>,
    clear_env: bool,
    crash_point: Option<String>,
    log: Option<PathBuf>,
    tag: String,
}

impl OperatorBuilder {
    /// `ingot run` of `binary` (a test passes `env!("CARGO_BIN_EXE_ingot")`), its health and
    /// metrics server on a port of its own choosing (`--http-addr=127.0.0.1:0`).
    pub fn new(binary: impl AsRef<Path>) -> Self {
        Self {
            binary: binary.as_ref().to_owned(),
            args: Vec::new(),
            defaults: vec!["--http-addr=127.0.0.1:0".to_owned()],
            env: Vec::new(),
            clear_env: false,
            crash_point: None,
            log: None,
            tag: "operator".to_owned(),
        }
    }

    /// `--kubeconfig`.
    pub fn kubeconfig(self, path: &Path) -> Self {
        self.arg(format!("--kubeconfig={}", path.display()))
    }

    /// `--controllers` (comma-separated).
    pub fn controllers(self, controllers: &str) -> Self {
        self.arg(format!("--controllers={controllers}"))
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<S: Into<String>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// `--flag=value`, unless an argument given otherwise sets the same `--flag`.
    pub fn default_arg(mut self, arg: impl Into<String>) -> Self {
        self.defaults.push(arg.into());
        self
    }

    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_owned(), value.into()));
        self
    }

    /// Starts the process with only the environment given by [`env`](Self::env), as a
    /// container's.
    pub fn clear_env(mut self) -> Self {
        self.clear_env = true;
        self
    }

    /// Aborts the process at this test-only crash point (`--crash-point`).
    pub fn crash_point(mut self, point: Option<&str>) -> Self {
        self.crash_point = point.map(str::to_owned);
        self
    }

    /// The file its standard error is appended to (default: a new file of its own).
    pub fn log_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = Some(path.into());
        self
    }

    /// A word for the default log file's name.
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.to_owned();
        self
    }

    /// The full argument list, `run` first.
    pub fn argv(&self) -> Vec<String> {
        let flag = |arg: &str| arg.split('=').next().unwrap_or_default().to_owned();
        let mut argv = vec!["run".to_owned()];
        argv.extend(
            self.defaults
                .iter()
                .filter(|d| !self.args.iter().any(|a| flag(a) == flag(d)))
                .cloned(),
        );
        argv.extend(self.args.iter().cloned());
        if let Some(point) = &self.crash_point {
            argv.push(format!("--crash-point={point}"));
        }
        argv
    }

    /// Starts the process.
    pub fn start(self) -> Operator {
        let log = self.log.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!(
                "ingot-{}-{}-{}.log",
                self.tag,
                std::process::id(),
                crate::random_suffix(6)
            ))
        });
        let mut operator = Operator {
            builder: OperatorBuilder {
                log: Some(log.clone()),
                ..self
            },
            child: Mutex::default(),
            log,
            log_from: 0,
            addresses: Mutex::default(),
        };
        operator.spawn();
        operator
    }
}

/// A running (or stopped) `ingot run`, killed by its PID when dropped. Shared references do
/// (`http_addr`, `metrics`, `log`): tests read it from inside their polls.
pub struct Operator {
    builder: OperatorBuilder,
    child: Mutex<Option<Child>>,
    log: PathBuf,
    /// Where this start's lines begin in the log file (restarts append).
    log_from: usize,
    /// This start's addresses, once read from its log.
    addresses: Mutex<BTreeMap<&'static str, SocketAddr>>,
}

impl Operator {
    /// The builder of `ingot run` of `binary`.
    pub fn builder(binary: impl AsRef<Path>) -> OperatorBuilder {
        OperatorBuilder::new(binary)
    }

    fn spawn(&mut self) {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap_or_else(|e| panic!("opening {}: {e}", self.log.display()));
        self.log_from = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
        lock(&self.addresses).clear();
        let mut command = Command::new(&self.builder.binary);
        if self.builder.clear_env {
            command.env_clear();
        }
        command
            .args(self.builder.argv())
            .env_remove(CRASH_POINT_ENV)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        for (key, value) in &self.builder.env {
            command.env(key, value);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", self.builder.binary.display()));
        *lock(&self.child) = Some(child);
    }

    /// Kills the process (if running) and starts it again with the same arguments and log,
    /// armed with `crash_point` (or none).
    pub fn restart(&mut self, crash_point: Option<&str>) {
        self.kill();
        self.builder.crash_point = crash_point.map(str::to_owned);
        self.spawn();
    }

    /// Kills the process by its PID and reaps it.
    pub fn kill(&self) {
        if let Some(mut child) = lock(&self.child).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The running process's PID.
    pub fn pid(&self) -> Option<u32> {
        lock(&self.child).as_ref().map(Child::id)
    }

    /// Sends SIGTERM (the process is left to exit).
    pub fn terminate(&self) {
        if let Some(pid) = self.pid() {
            let pid = nix::unistd::Pid::from_raw(pid as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        }
    }

    /// How the process ended, once it has (`None` while it runs, or when none was started).
    pub fn exit_status(&self) -> Option<ExitStatus> {
        lock(&self.child)
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn is_running(&self) -> bool {
        lock(&self.child).is_some() && self.exit_status().is_none()
    }

    /// Waits (at most `within`) for the process to exit; returns its status.
    pub async fn wait_exit(&self, within: Duration) -> ExitStatus {
        assert!(lock(&self.child).is_some(), "no operator is running");
        let waited = tokio::time::timeout(within, async {
            loop {
                if let Some(status) = self.exit_status() {
                    return status;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        let status = waited.unwrap_or_else(|_| {
            panic!(
                "the operator did not exit within {within:?}; its log:\n{}",
                self.log_tail()
            )
        });
        lock(&self.child).take();
        status
    }

    /// Waits for the process to abort at its crash point `point` (a failure otherwise).
    pub async fn wait_crashed(&self, point: &str, within: Duration) {
        let status = self.wait_exit(within).await;
        assert!(
            !status.success(),
            "the operator exited ({status}), it did not abort at {point}:\n{}",
            self.log_tail()
        );
        assert!(
            self.log().contains(point),
            "the operator exited ({status}), but not at {point}:\n{}",
            self.log_tail()
        );
    }

    /// The log file (every start's lines).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Every start's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last 40 lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        tail(&self.log(), 40)
    }

    /// The address of `line`'s `address` field logged by this start; waits for it (60 s).
    async fn logged_address(&self, line: &'static str) -> SocketAddr {
        if let Some(addr) = lock(&self.addresses).get(line) {
            return *addr;
        }
        let addr = wait_for(
            &format!("the operator to log \"{line}\""),
            Duration::from_secs(60),
            async || {
                if let Some(status) = self.exit_status() {
                    panic!(
                        "the operator exited ({status}) before \"{line}\":\n{}",
                        self.log_tail()
                    );
                }
                let text = std::fs::read(&self.log).ok()?;
                let text = String::from_utf8_lossy(text.get(self.log_from..)?);
                text.lines()
                    .filter(|l| l.contains(line))
                    .find_map(address_field)
            },
        )
        .await;
        lock(&self.addresses).insert(line, addr);
        addr
    }

    /// The health and metrics server's address (`--http-addr`), as this start logged it.
    pub async fn http_addr(&self) -> SocketAddr {
        self.logged_address(HTTP_LINE).await
    }

    /// The power action API's address (`--power-api-addr`), as this start logged it.
    pub async fn power_api_addr(&self) -> SocketAddr {
        self.logged_address(POWER_API_LINE).await
    }

    /// /metrics as text.
    pub async fn metrics_text(&self) -> String {
        let addr = self.http_addr().await;
        scrape(addr)
            .await
            .unwrap_or_else(|e| panic!("scraping http://{addr}/metrics: {e}"))
    }

    /// /metrics, series (name with labels) → value.
    pub async fn metrics(&self) -> BTreeMap<String, f64> {
        parse_metrics(&self.metrics_text().await)
    }

    /// The sum of the samples of `name` whose labels include every one of `labels`
    /// (`key="value"`), 0 when there is none.
    pub async fn metric_sum(&self, name: &str, labels: &[&str]) -> f64 {
        sum_of(&self.metrics_text().await, name, labels)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// GET /metrics of a server at `addr`.
pub async fn scrape(addr: SocketAddr) -> Result<String, String> {
    let response = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .map_err(|e| e.to_string())?;
    response.text().await.map_err(|e| e.to_string())
}

/// Series (name with labels) → value of a /metrics text.
pub fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The sum of the samples of `name` (with any labels) whose labels include all of `labels`.
pub fn sum_of(text: &str, name: &str, labels: &[&str]) -> f64 {
    parse_metrics(text)
        .into_iter()
        .filter(|(series, _)| {
            series == name
                || series
                    .strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{'))
        })
        .filter(|(series, _)| labels.iter().all(|l| series.contains(l)))
        .map(|(_, value)| value)
        .sum()
}

/// The `address` field of a log line, text (`address=…`, colours or not) or JSON
/// (`"address":"…"`).
fn address_field(line: &str) -> Option<SocketAddr> {
    let plain = strip_ansi(line);
    let rest = &plain[plain.find("address")? + "address".len()..];
    let rest = rest.trim_start_matches(['"', '=', ':', ' ']);
    let end = rest
        .find(|c: char| !(c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']')))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A loopback address the test holds for as long as it lives, forwarding each connection to
/// an operator's current address: a stable address for an operator whose own port changes at
/// every restart (an iPXE URL written into a server's user data). The test binds it, so nothing
/// can take it between two restarts.
pub struct Front {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Front {
    /// Binds a loopback port (port 0: the kernel's choice) and forwards each connection to the
    /// health and metrics server of the last start logged in `log` (an [`Operator`]'s
    /// [`log_path`](Operator::log_path), which every restart appends to). A connection made
    /// while the new process has not logged its address yet goes to the last one's, and is
    /// refused there, as by an operator that is down.
    pub async fn following(log: &Path) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("binding a loopback port");
        let addr = listener.local_addr().expect("the bound address");
        let log = log.to_owned();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let text = std::fs::read_to_string(&log).unwrap_or_default();
                let Some(target) = text
                    .lines()
                    .filter(|l| l.contains(HTTP_LINE))
                    .filter_map(address_field)
                    .next_back()
                else {
                    continue; // nothing to forward to yet: the connection is closed
                };
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self { addr, task }
    }

    /// The address the test hands out.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_is_read_from_text_json_and_coloured_lines() {
        let want: SocketAddr = "127.0.0.1:41234".parse().unwrap_or_else(|e| panic!("{e}"));
        for line in [
            "2026-01-01T00:00:00Z  INFO ingot::http: serving /healthz, /readyz and /metrics address=127.0.0.1:41234",
            r#"{"timestamp":"x","level":"INFO","message":"serving /healthz, /readyz and /metrics","address":"127.0.0.1:41234"}"#,
            "\u{1b}[32m INFO\u{1b}[0m \u{1b}[2mingot::http\u{1b}[0m\u{1b}[2m:\u{1b}[0m serving /healthz, /readyz and /metrics \u{1b}[3maddress\u{1b}[0m\u{1b}[2m=\u{1b}[0m127.0.0.1:41234",
        ] {
            assert_eq!(address_field(line), Some(want), "{line}");
        }
        assert_eq!(address_field("serving /healthz"), None);
    }

    #[test]
    fn a_default_argument_yields_to_one_given() {
        let builder = OperatorBuilder::new("ingot")
            .default_arg("--lease-duration-seconds=3")
            .arg("--http-addr=127.0.0.1:8080")
            .crash_point(Some("here"));
        assert_eq!(
            builder.argv(),
            [
                "run",
                "--lease-duration-seconds=3",
                "--http-addr=127.0.0.1:8080",
                "--crash-point=here"
            ]
        );
    }

    #[test]
    fn metric_sums_match_the_name_and_every_label() {
        let text = "# HELP x\nx_total{verb=\"get\",resource=\"nodes\"} 2\nx_total{verb=\"get\",resource=\"pods\"} 3\nx_total_other 7\nx_total 1\n";
        assert_eq!(sum_of(text, "x_total", &["verb=\"get\""]), 5.0);
        assert_eq!(sum_of(text, "x_total", &["resource=\"pods\""]), 3.0);
        assert_eq!(sum_of(text, "x_total", &[]), 6.0);
    }
}
