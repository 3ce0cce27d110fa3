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
