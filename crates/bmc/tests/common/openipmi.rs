//! OpenIPMI's `ipmi_sim` as a lanplus peer (cipher suite 3), configured in a private directory
//! and stopped by its PID.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use super::{ChildGuard, require_apt_tool, temp_dir};
use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub const USER: &str = "ingot";
pub const PASSWORD: &str = "sim-password";

pub struct IpmiSim {
    _child: ChildGuard,
    pub addr: SocketAddr,
    pub dir: PathBuf,
}

impl Drop for IpmiSim {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts ipmi_sim with two SEL records and FRU 0 from `fru_image`.
pub fn start(fru_image: &[u8]) -> IpmiSim {
    start_with(fru_image, "")
}

/// A Full sensor record (type 0x01, threshold-based, owned by the BMC at 0x20) as
/// `main_sdr_add` takes it: `m`, `b` and the exponents as in the conversion
/// `y = (M*x + B*10^bexp) * 10^rexp`; `thresholds` are the raw LNC, LC, LNR, UNC, UC, UNR
/// the record holds, `readable` which of them can be read.
#[allow(clippy::too_many_arguments)]
pub fn full_sdr(
    number: u8,
    sensor_type: u8,
    unit: u8,
    name: &str,
    (m, b, rexp, bexp): (i16, i16, i8, i8),
    thresholds: [u8; 6],
    readable: u8,
) -> String {
    let mut r = vec![0u8; 48];
    r[2] = 0x51;
    r[3] = 0x01;
    r[5] = 0x20;
    r[7] = number;
    r[8] = 0x07;
    r[9] = 1;
    r[10] = 0x7F; // initialise scanning, events, thresholds, hysteresis, type; defaults
    r[11] = 2 << 2; // thresholds readable and settable
    r[12] = sensor_type;
    r[13] = 0x01;
    r[18] = readable;
    r[19] = readable;
    r[21] = unit;
    r[24] = (m & 0xFF) as u8;
    r[25] = (((m >> 8) & 3) as u8) << 6;
    r[26] = (b & 0xFF) as u8;
    r[27] = (((b >> 8) & 3) as u8) << 6;
    r[29] = (((rexp as u8) & 0x0F) << 4) | ((bexp as u8) & 0x0F);
    let [lnc, lc, lnr, unc, uc, unr] = thresholds;
    r[36..42].copy_from_slice(&[unr, uc, unc, lnr, lc, lnc]);
    r[47] = 0xC0 | name.len() as u8;
    r.extend_from_slice(name.as_bytes());
    r[4] = (r.len() - 5) as u8;
    sdr_line(&r)
}

/// A Compact sensor record (type 0x02) with a sensor-specific (0x6F) reading.
pub fn compact_sdr(number: u8, sensor_type: u8, name: &str) -> String {
    let mut r = vec![0u8; 32];
    r[2] = 0x51;
    r[3] = 0x02;
    r[5] = 0x20;
    r[7] = number;
    r[8] = 0x0A;
    r[9] = 1;
    r[10] = 0x43; // initialise scanning and events; defaults
    r[12] = sensor_type;
    r[13] = 0x6F;
    r[31] = 0xC0 | name.len() as u8;
    r.extend_from_slice(name.as_bytes());
    r[4] = (r.len() - 5) as u8;
    sdr_line(&r)
}

fn sdr_line(r: &[u8]) -> String {
    let mut line = "main_sdr_add 0x20".to_owned();
    for b in r {
        write!(line, " 0x{b:02x}").unwrap();
    }
    line.push('\n');
    line
}

/// Starts ipmi_sim like [`start`], with `extra` emulator commands (SDRs, sensors) run before
/// the BMC is enabled.
pub fn start_with(fru_image: &[u8], extra: &str) -> IpmiSim {
    let bin = require_apt_tool("ipmi_sim", "openipmi");
    let port = free_udp_port();
    let dir = temp_dir("ipmi-sim");
    std::fs::create_dir_all(dir.join("state")).unwrap();
    let script = dir.join("chassis.sh");
    std::fs::write(&script, ingot_ipmi_sim::OPENIPMI_CHASSIS_SCRIPT).unwrap();
    Command::new("chmod")
        .arg("+x")
        .arg(&script)
        .status()
        .unwrap();
    let lan = format!(
        r#"name "ingot"
set_working_mc 0x20
  startlan 1
    addr 127.0.0.1 {port}
    priv_limit admin
    allowed_auths_callback none md2 md5 straight
    allowed_auths_user none md2 md5 straight
    allowed_auths_operator none md2 md5 straight
    allowed_auths_admin none md2 md5 straight
    guid a123456789abcdefa123456789abcdef
  endlan
  chassis_control "{script} 0x20"
  user 2 true "{USER}" "{PASSWORD}" admin 10 none md2 md5 straight
"#,
        script = script.display()
    );
    std::fs::write(dir.join("lan.conf"), lan).unwrap();
    let mut fru_line = format!("mc_add_fru_data 0x20 0 {} data", fru_image.len());
    for b in fru_image {
        write!(fru_line, " 0x{b:02x}").unwrap();
    }
    // Manufacturer 0x1291 (4753), product 0xf02; two system event records.
    let emu = format!(
        "mc_setbmc 0x20
mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr
sel_enable 0x20 1000 0x0a
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x01 0x30 0x01 0x59 0x00 0x00
sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x07 0x02 0x6f 0x00 0xff 0xff
{fru_line}
{extra}
mc_enable 0x20
"
    );
    std::fs::write(dir.join("sim.emu"), emu).unwrap();
    let mut cmd = Command::new(bin);
    cmd.current_dir(&dir)
        .arg("-c")
        .arg(dir.join("lan.conf"))
        .arg("-f")
        .arg(dir.join("sim.emu"))
        .arg("-s")
        .arg(dir.join("state"))
        .arg("-n")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    IpmiSim {
        _child: super::spawn(&mut cmd),
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        dir,
    }
}
