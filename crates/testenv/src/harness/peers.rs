//! The BMC peers of the end-to-end tests, each in a private directory and stopped by its PID:
//! sushy-tools' Redfish emulator over TLS and OpenIPMI's `ipmi_sim` (lanplus, cipher suite 3).
//! Both bind port 0 and the port they got is read back (sushy's log, ipmi_sim's socket).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{ChildGuard, require_apt_tool, require_tool, temp_dir};

/// sushy-tools' emulator over TLS (a certificate from a CA of its own, `ca`): the fake system
/// `fake` (on), then any others it was started with.
pub struct Sushy {
    _child: ChildGuard,
    pub port: u16,
    pub dir: PathBuf,
    /// PEM of the CA that signed sushy's certificate.
    pub ca: PathBuf,
}

/// A fake system besides the first: its `Name`, `Id` (a UUID) and power state.
pub struct SushySystem<'a> {
    pub name: &'a str,
    pub uuid: &'a str,
    pub power_state: &'a str,
}

pub fn start_sushy_tls(user: &str, password: &str) -> Sushy {
    start_sushy_tls_with(user, password, &[])
}

fn run_ok(command: &mut Command) -> String {
    let shown = format!("{command:?}");
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A CA (`ca.pem`) and a certificate for 127.0.0.1 it signed (`cert.pem`, `key.pem`) in `dir`.
fn tls_files(dir: &Path) {
    std::fs::write(
        dir.join("cert.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap_or_else(|e| panic!("writing cert.ext: {e}"));
    let openssl = |args: &[&str]| {
        run_ok(Command::new("openssl").current_dir(dir).args(args));
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=sushy test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "cert.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-days",
        "1",
        "-in",
        "cert.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca-key.pem",
        "-CAcreateserial",
        "-extfile",
        "cert.ext",
        "-out",
        "cert.pem",
    ]);
}

/// sushy-tools over TLS with the fake system `fake` (on) and `more` systems.
pub fn start_sushy_tls_with(user: &str, password: &str, more: &[SushySystem]) -> Sushy {
    let sushy = require_tool("sushy-emulator");
    let python = sushy
        .parent()
        .map(|d| d.join("python3"))
        .filter(|p| p.is_file())
        .unwrap_or_else(|| "python3".into());
    let dir = temp_dir("sushy-tls");
    // bcrypt with the interpreter that runs sushy (bcrypt is one of its dependencies).
    let digest = run_ok(Command::new(&python).args([
        "-c",
        "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())",
        password,
    ]));
    let write = |file: &str, text: String| {
        std::fs::write(dir.join(file), text).unwrap_or_else(|e| panic!("writing {file}: {e}"));
    };
    write("htpasswd", format!("{user}:{digest}\n"));
    // A CA of its own signs the certificate, so that clients can trust sushy by that CA
    // (`--bmc-ca-bundle`) as well as skip verification.
    tls_files(&dir);
    let conf = format!(
        r#"
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = 0
SUSHY_EMULATOR_SSL_CERT = '{cert}'
SUSHY_EMULATOR_SSL_KEY = '{key}'
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '{state}'
SUSHY_EMULATOR_AUTH_FILE = '{auth}'
SUSHY_EMULATOR_FAKE_SYSTEMS = [{{
    'uuid': '27946b59-9e44-4fa7-8e91-f3527a1ef094',
    'name': 'fake',
    'power_state': 'On',
    'external_notifier': False,
    'nics': [{{'mac': '00:5c:52:31:3a:9c', 'ip': '127.0.0.2'}}],
}}{more}]
"#,
        more = more
            .iter()
            .map(|m| format!(
                ", {{'uuid': '{}', 'name': '{}', 'power_state': '{}', 'external_notifier': False}}",
                m.uuid, m.name, m.power_state
            ))
            .collect::<String>(),
        cert = dir.join("cert.pem").display(),
        key = dir.join("key.pem").display(),
        state = dir.join("state").display(),
        auth = dir.join("htpasswd").display(),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap_or_else(|e| panic!("state dir: {e}"));
    write("conf.py", conf);
    let log_path = dir.join("sushy.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("sushy.log: {e}"));
    let stdout = log.try_clone().unwrap_or_else(|e| panic!("sushy.log: {e}"));
    let mut child = ChildGuard(
        Command::new(&sushy)
            // sushy fetches virtual media images itself: from loopback, never through a proxy.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .arg("--config")
            .arg(dir.join("conf.py"))
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", sushy.display())),
    );
    // Flask logs the port it bound: ` * Running on https://127.0.0.1:<port>`.
    let port = wait_blocking(
        "sushy-emulator to log its port",
        &mut child,
        &log_path,
        |log| {
            log.lines()
                .find_map(|l| l.split("Running on https://127.0.0.1:").nth(1))
                .and_then(|rest| rest.trim().parse().ok())
        },
    );
    Sushy {
        _child: child,
        port,
        ca: dir.join("ca.pem"),
        dir,
    }
}

/// Polls `read` on the log for 30 s, failing with the log if the peer exits first.
fn wait_blocking<T>(
    what: &str,
    child: &mut ChildGuard,
    log: &Path,
    read: impl Fn(&str) -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(value) = read(&text) {
            return value;
        }
        if let Ok(Some(status)) = child.0.try_wait() {
            panic!("gave up waiting for {what}: it exited ({status}):\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting for {what} after 30 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Sushy {
    /// The fake system as sushy itself reports it (its own API, not ingot's client).
    pub async fn system(&self, user: &str, password: &str) -> Option<Value> {
        self.systems(user, password).await.into_iter().next()
    }

    /// The system named `name`, as sushy reports it.
    pub async fn system_named(&self, user: &str, password: &str, name: &str) -> Option<Value> {
        self.systems(user, password)
            .await
            .into_iter()
            .find(|s| s["Name"] == name)
    }

    /// The first system's virtual CD device, as sushy reports it.
    pub async fn virtual_cd(&self, user: &str, password: &str) -> Option<Value> {
        let system = self.system(user, password).await?;
        let path = format!("{}/VirtualMedia/Cd", system["@odata.id"].as_str()?);
        self.get(user, password, path).await
    }

    async fn get(&self, user: &str, password: &str, path: String) -> Option<Value> {
        let http = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .timeout(Duration::from_secs(5))
            .build()
            .ok()?;
        http.get(format!("https://127.0.0.1:{}{path}", self.port))
            .basic_auth(user, Some(password))
            .send()
            .await
            .ok()?
            .json::<Value>()
            .await
            .ok()
    }

    /// Every member of sushy's `Systems`, in its order (empty when sushy does not answer).
    async fn systems(&self, user: &str, password: &str) -> Vec<Value> {
        let get = |path: String| self.get(user, password, path);
        let Some(collection) = get("/redfish/v1/Systems".into()).await else {
            return Vec::new();
        };
        let mut systems = Vec::new();
        for member in collection["Members"].as_array().into_iter().flatten() {
            let Some(path) = member["@odata.id"].as_str() else {
                continue;
            };
            match get(path.to_owned()).await {
                Some(system) => systems.push(system),
                None => return Vec::new(),
            }
        }
        systems
    }
}

/// ipmi_sim's account.
pub const IPMI_USER: &str = "ingot";
pub const IPMI_PASSWORD: &str = "sim-password";

/// A running ipmi_sim with its configuration and chassis state (`power`, `boot`) in `dir`.
pub struct IpmiSim {
    child: Option<ChildGuard>,
    pub addr: SocketAddr,
    pub dir: PathBuf,
}

impl IpmiSim {
    /// Stops it (by its PID); it answers no more.
    pub fn stop(&mut self) {
        self.child = None;
    }

    /// Waits (30 s at most) until it answers ipmitool's `chassis power status`.
    pub async fn wait_answering(&self) {
        super::wait_for("ipmi_sim to answer", Duration::from_secs(30), async || {
            self.ipmitool(&["chassis", "power", "status"])
                .contains("Chassis Power is")
                .then_some(())
        })
        .await;
    }

    /// `ipmitool -I lanplus -C 3` against it, with its account; standard output, trimmed.
    pub fn ipmitool(&self, args: &[&str]) -> String {
        let out = Command::new(require_apt_tool("ipmitool", "ipmitool"))
            .args(["-I", "lanplus", "-C", "3", "-H", "127.0.0.1"])
            .arg("-p")
            .arg(self.addr.port().to_string())
            .args(["-U", IPMI_USER, "-P", IPMI_PASSWORD])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running ipmitool: {e}"));
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        self.child = None;
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts ipmi_sim with two SEL records and FRU 0 from `fru_image`, on a UDP port of its own
/// (read back from its socket).
pub fn start_ipmi_sim(fru_image: &[u8]) -> IpmiSim {
    let bin = require_apt_tool("ipmi_sim", "openipmi");
    let dir = temp_dir("ipmi-sim");
    std::fs::create_dir_all(dir.join("state")).unwrap_or_else(|e| panic!("state dir: {e}"));
    let script = dir.join("chassis.sh");
    std::fs::write(&script, ingot_ipmi_sim::OPENIPMI_CHASSIS_SCRIPT)
        .unwrap_or_else(|e| panic!("chassis.sh: {e}"));
    run_ok(Command::new("chmod").arg("+x").arg(&script));
    let lan = format!(
        r#"name "ingot"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 0
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{script} 0x20"
  user 2 true "{IPMI_USER}" "{IPMI_PASSWORD}" admin 10 none md2 md5 straight
"#,
        script = script.display()
    );
    std::fs::write(dir.join("lan.conf"), lan).unwrap_or_else(|e| panic!("lan.conf: {e}"));
    let mut fru_line = format!("mc_add_fru_data 0x20 0 {} data", fru_image.len());
    for b in fru_image {
        let _ = write!(fru_line, " 0x{b:02x}");
    }
    // Manufacturer 0x1291 (4753), product 0xf02; two system event records.
    let emu = format!(
        "mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x01 0x30 0x01 0x59 0x00 0x00
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x07 0x02 0x6f 0x00 0xff 0xff
{fru_line}
mc_enable 0x20
"
    );
    std::fs::write(dir.join("sim.emu"), emu).unwrap_or_else(|e| panic!("sim.emu: {e}"));
    let log_path = dir.join("ipmi_sim.log");
    let log = std::fs::File::create(&log_path).unwrap_or_else(|e| panic!("ipmi_sim.log: {e}"));
    let mut child = ChildGuard(
        Command::new(bin)
            .current_dir(&dir)
            .arg("-c")
            .arg(dir.join("lan.conf"))
            .arg("-f")
            .arg(dir.join("sim.emu"))
            .arg("-s")
            .arg(dir.join("state"))
            .arg("-n")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting ipmi_sim: {e}")),
    );
    let pid = child.0.id();
    let port = wait_blocking(
        "ipmi_sim to bind its UDP port",
        &mut child,
        &log_path,
        |_| udp_port_of(pid),
    );
    IpmiSim {
        child: Some(child),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    }
}

/// The local port of the (one) loopback UDP socket process `pid` holds, from /proc.
fn udp_port_of(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    // `sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode`; the local
    // address is `0100007F:<port in hex>`.
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let inode = fields.get(9)?;
        if !inodes.iter().any(|i| i == inode) {
            return None;
        }
        let (_, port) = fields.get(1)?.split_once(':')?;
        u16::from_str_radix(port, 16).ok().filter(|p| *p != 0)
    })
}
