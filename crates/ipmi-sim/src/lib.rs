//! A fleet of simulated IPMI 2.0 (lanplus) BMCs in one process, for
//! development and tests. Each BMC owns one UDP socket (normally on
//! 127.0.0.1, port chosen by the OS) and implements:
//!
//! - the server side of RMCP+ session setup (Open Session, RAKP 1–4) for
//!   cipher suites 3 and 17, a session table with a maximum, idle expiry,
//!   integrity checking, AES-CBC-128 and a sequence-number replay window;
//! - Get Channel Authentication Capabilities and Get Channel Cipher Suites
//!   (session-less, as ipmitool sends them), ASF presence ping;
//! - Get Device ID / GUID, Get Chassis Status, Chassis Control (a power
//!   state machine), Get/Set System Boot Options (parameter 5, "next boot
//!   only" flags consumed on the next power-up or reset; every start of the host is kept as a
//!   [`BootRecord`]: which device it booted, in which mode), FRU 0 (Get FRU
//!   Inventory Area Info, Read FRU Data with a per-read size limit), SEL
//!   (info, reserve, get, add, clear), and an empty SDR repository;
//! - faults on demand, per BMC: see [`Faults`].
//!
//! Start it with [`serve`]; a CLI can wrap that function directly.

mod bmc;
mod fru;
mod wire;

/// The chassis control script the tests give OpenIPMI's `ipmi_sim` (the reference peer):
/// `ipmi_sim` runs `<script> 0x20 get power boot` / `set power 1`, and the script keeps the state
/// in files `power` and `boot` beside it (each reset appended to `resets`). Power starts on.
pub const OPENIPMI_CHASSIS_SCRIPT: &str = r#"#!/bin/sh
d=$(dirname "$0")
while [ $# -gt 0 ]; do case "$1" in get|set) break;; *) shift;; esac; done
op=$1; shift
[ -f "$d/power" ] || echo 1 > "$d/power"
[ -f "$d/boot" ] || echo none > "$d/boot"
if [ "$op" = get ]; then
  for k in "$@"; do
    case "$k" in
      power) echo "power:$(cat "$d/power")";;
      boot) echo "boot:$(cat "$d/boot")";;
    esac
  done
else
  while [ $# -ge 2 ]; do
    k=$1; v=$2; shift 2
    case "$k" in
      power) echo "$v" > "$d/power";;
      boot) echo "$v" > "$d/boot";;
      reset) echo "$v" >> "$d/resets";;
      shutdown) echo 0 > "$d/power";;
    esac
  done
fi
"#;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

pub use fru::FruInfo;
pub use wire::Suite;

use bmc::Bmc;

/// Values reported by Get Device ID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ID.
    pub device_id: u8,
    /// Device revision (0–15).
    pub device_revision: u8,
    /// Major firmware revision (0–127).
    pub firmware_major: u8,
    /// Minor firmware revision, BCD (0x05 = ".05").
    pub firmware_minor_bcd: u8,
    /// IANA manufacturer id (20 bits).
    pub manufacturer_id: u32,
    /// Product id.
    pub product_id: u16,
    /// Auxiliary firmware revision.
    pub aux_firmware: [u8; 4],
}

impl Default for DeviceInfo {
    fn default() -> Self {
        DeviceInfo {
            device_id: 0x20,
            device_revision: 1,
            firmware_major: 2,
            firmware_minor_bcd: 0x15,
            manufacturer_id: 0xBEEF,
            product_id: 0x0101,
            aux_firmware: [0, 0, 0, 1],
        }
    }
}

/// Faults a BMC can be told to inject; change them at any time with
/// [`BmcHandle::set_faults`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Ignore every datagram (the client sees timeouts).
    pub unresponsive: bool,
    /// Behave as if the BMC's password had been changed (RAKP 2 codes are
    /// computed with a different key, so the client's check fails).
    pub wrong_password: bool,
    /// Answer every Open Session Request with "insufficient resources" (0x01).
    pub session_table_full: bool,
    /// Drop this percentage (0–100) of datagrams in each direction.
    pub loss_percent: u8,
    /// Send every answer this much later.
    pub delay: Duration,
    /// Flip a bit in the integrity AuthCode of every authenticated answer.
    pub corrupt_integrity: bool,
    /// Send every answer twice (a duplicating network, or a replay).
    pub duplicate: bool,
    /// Activate sessions on RAKP 3 but lose every RAKP 4 (the client never
    /// learns that its session exists).
    pub lose_rakp4: bool,
    /// Execute these in-session commands `(netfn, cmd)` but lose their
    /// answers (the client sees a timeout for a command that took effect).
    pub mute_commands: Vec<(u8, u8)>,
    /// Carry out a retransmitted request again instead of answering it from
    /// the last answer (no de-duplication by rqSeq), as many BMCs do: a
    /// retransmitted Chassis Control resets the host twice.
    pub no_dedup: bool,
    /// Store the boot flags (parameter 5) with the EFI bit (byte 1, bit 5)
    /// cleared, whatever was written: a BMC that boots the override in
    /// Legacy mode and cannot keep UEFI.
    pub drop_efi_bit: bool,
    /// Answer this many Get SDR partial reads (offset ≠ 0) with "reservation cancelled"
    /// (0xC5), cancelling the reservation, as a BMC whose SDRs change mid-read does.
    pub sdr_cancellations: u32,
}

/// One sensor of the SDR repository. Threshold sensors get a Full record (reading
/// `y = M * raw` in `unit`), discrete ones a Compact record with sensor-specific states.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimSensor {
    pub number: u8,
    pub name: String,
    /// IPMI sensor type (0x01 temperature, 0x04 fan, 0x08 power supply, ...).
    pub sensor_type: u8,
    /// IPMI base unit type code (1 °C, 18 RPM, ...); threshold sensors only.
    pub unit: u8,
    /// The M of the conversion; threshold sensors only.
    pub m: i16,
    /// The raw reading byte; threshold sensors only.
    pub raw: u8,
    /// Raw thresholds LNC, LC, LNR, UNC, UC, UNR (`None`: not readable); `None` for a
    /// discrete sensor.
    pub thresholds: Option<[Option<u8>; 6]>,
    /// Discrete sensor states (bit 0 is offset 0).
    pub states: u16,
}

impl SimSensor {
    /// An inlet temperature (24 °C; 40 / 45 / 50 upper thresholds), a fan (5600 RPM;
    /// critical under 1000) and a power supply that is present.
    pub fn defaults() -> Vec<SimSensor> {
        vec![
            SimSensor {
                number: 0x01,
                name: "Inlet Temp".into(),
                sensor_type: 0x01,
                unit: 1,
                m: 1,
                raw: 24,
                thresholds: Some([None, None, None, Some(40), Some(45), Some(50)]),
                states: 0,
            },
            SimSensor {
                number: 0x02,
                name: "Fan1".into(),
                sensor_type: 0x04,
                unit: 18,
                m: 100,
                raw: 56,
                thresholds: Some([Some(15), Some(10), None, None, None, None]),
                states: 0,
            },
            SimSensor {
                number: 0x03,
                name: "PS1 Status".into(),
                sensor_type: 0x08,
                unit: 0,
                m: 0,
                raw: 0,
                thresholds: None,
                states: 0x0001,
            },
        ]
    }
}

/// One simulated BMC.
#[derive(Clone, Debug)]
pub struct BmcConfig {
    /// UDP port (0 = any free port).
    pub port: u16,
    /// The single IPMI user (Administrator).
    pub username: String,
    /// Its password (at most 20 bytes are used).
    pub password: String,
    /// BMC key Kg for two-key logins (`None`: the password is used, as most BMCs do).
    pub bmc_key: Option<String>,
    /// System GUID (used in RAKP).
    pub guid: [u8; 16],
    /// Cipher suites accepted.
    pub suites: Vec<Suite>,
    /// Session table size.
    pub max_sessions: usize,
    /// Idle time after which an active session is dropped.
    pub session_timeout: Duration,
    /// Largest Read FRU Data count accepted (larger → completion code 0xCA).
    pub fru_max_read: usize,
    /// Get Device ID values.
    pub device: DeviceInfo,
    /// FRU 0 contents.
    pub fru: FruInfo,
    /// Power state at start.
    pub power_on: bool,
    /// Power up and power down take this long (0: at once); Get Chassis Status reports the
    /// old state until then.
    pub power_delay: Duration,
    /// Power cycle: off at once, on again after this long (0: reboots in place).
    pub cycle_delay: Duration,
    /// Soft shutdown: the "OS" powers off after this long (0: at once).
    pub soft_off_delay: Duration,
    /// Power restore policy bits reported by Get Chassis Status (0 off, 1 previous, 2 on).
    pub restore_policy: u8,
    /// Boot flags (parameter 5) at start.
    pub boot_flags: [u8; 5],
    /// The machine's firmware boot mode (UEFI when true, else Legacy): what a boot without a
    /// valid override uses.
    pub uefi: bool,
    /// The first five bytes of the host's NIC MACs; NIC `k` ends in `k` ([`BmcHandle::mac`]).
    pub mac_base: [u8; 5],
    /// The boot flags' valid bit is cleared this long after it was set,
    /// unless parameter 3 bit 3 ("don't clear after the 60 s timeout") is
    /// set: the IPMI 2.0 chassis timeout (60 s; shorter to test it).
    pub boot_flags_timeout: Duration,
    /// SEL capacity in records.
    pub sel_capacity: usize,
    /// SEL records at start (bytes 2..16 of each record; ids are assigned).
    pub sel: Vec<[u8; 14]>,
    /// The sensors of the SDR repository.
    pub sensors: Vec<SimSensor>,
    /// Largest Get SDR count accepted (larger, but not 0xFF at offset 0 → completion code 0xCA).
    pub sdr_max_read: usize,
}

impl BmcConfig {
    /// A BMC numbered `n` with user `admin`, both suites, 4 sessions, UEFI boot mode.
    pub fn new(n: usize, password: impl Into<String>) -> Self {
        let mut guid = [0u8; 16];
        guid[..8].copy_from_slice(&(n as u64).to_le_bytes());
        guid[8..].copy_from_slice(b"ingotsim");
        BmcConfig {
            port: 0,
            username: "admin".into(),
            password: password.into(),
            bmc_key: None,
            guid,
            suites: vec![Suite::S3, Suite::S17],
            max_sessions: 4,
            session_timeout: Duration::from_secs(60),
            fru_max_read: 24,
            device: DeviceInfo::default(),
            fru: FruInfo::example(n),
            power_on: false,
            power_delay: Duration::ZERO,
            cycle_delay: Duration::ZERO,
            soft_off_delay: Duration::ZERO,
            restore_policy: 0,
            boot_flags: [0x20, 0, 0, 0, 0],
            uefi: true,
            mac_base: [0x02, 0x01, (n >> 16) as u8, (n >> 8) as u8, n as u8],
            boot_flags_timeout: Duration::from_secs(60),
            sel_capacity: 512,
            sel: Vec::new(),
            sensors: SimSensor::defaults(),
            sdr_max_read: 16,
        }
    }
}

/// Where and what to serve.
#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Address every BMC socket binds to (loopback by default).
    pub bind: IpAddr,
    /// The BMCs.
    pub bmcs: Vec<BmcConfig>,
}

impl FleetConfig {
    /// `count` BMCs on 127.0.0.1 with the same password.
    pub fn uniform(count: usize, password: &str) -> Self {
        FleetConfig {
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            bmcs: (0..count).map(|n| BmcConfig::new(n, password)).collect(),
        }
    }
}

/// Counters of one simulated BMC.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BmcStats {
    /// Entries in the session table now (half-open ones included).
    pub sessions: usize,
    /// Highest number of table entries ever held at once.
    pub peak_sessions: usize,
    /// Sessions that completed RAKP.
    pub sessions_opened: u64,
    /// Open Session Requests refused because the table was full.
    pub rejected_full: u64,
    /// Chassis Control sub-commands executed, in order.
    pub chassis_controls: Vec<u8>,
    /// Highest number of activated sessions (RAKP done) held at once.
    pub peak_active_sessions: usize,
    /// Active sessions now.
    pub active_sessions: usize,
    /// In-session commands received `(netfn, cmd)`, in order.
    pub commands: Vec<(u8, u8)>,
    /// Set System Boot Options parameters written, in order.
    pub boot_params_written: Vec<u8>,
}

/// One start of the host (power-up or reset), as its firmware saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootRecord {
    /// 1 for the first start, one more for each start after (a reset is one).
    pub count: u64,
    /// What it booted, by ipmitool's name of the selector (`pxe`, `disk`, `cdrom`, `bios`...):
    /// the override's device when the boot flags were valid and named one, else `disk`.
    pub device: String,
    /// Booted in UEFI mode: the override's EFI bit when it applied, else the machine's mode
    /// ([`BmcConfig::uefi`]).
    pub efi: bool,
    /// Whether an override applied to this boot.
    pub override_applied: bool,
    /// The boot flags (parameter 5) as they stood when the host started.
    pub flags: [u8; 5],
    /// The power went off (or the host was reset) after this boot.
    pub powered_off: bool,
}

/// ipmitool's name of a boot device selector (parameter 5, byte 2 bits 5:2).
pub fn selector_name(selector: u8) -> &'static str {
    match selector {
        0 => "none",
        1 => "pxe",
        2 => "disk",
        3 => "safe",
        4 => "diag",
        5 => "cdrom",
        6 => "bios",
        7 => "remote-floppy",
        8 => "remote-cdrom",
        9 => "remote-media",
        0x0B => "remote-disk",
        0x0F => "floppy",
        _ => "other",
    }
}

/// Control of one running simulated BMC.
#[derive(Clone)]
pub struct BmcHandle {
    addr: SocketAddr,
    state: Arc<Mutex<Bmc>>,
}

fn lock(m: &Mutex<Bmc>) -> MutexGuard<'_, Bmc> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl BmcHandle {
    /// The UDP address clients talk to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replace the active faults.
    pub fn set_faults(&self, faults: Faults) {
        lock(&self.state).faults = faults;
    }

    /// The active faults.
    pub fn faults(&self) -> Faults {
        lock(&self.state).faults.clone()
    }

    /// Current power state.
    pub fn power_on(&self) -> bool {
        let mut b = lock(&self.state);
        b.settle(std::time::Instant::now());
        b.power_on
    }

    /// Set the power state (as if someone pressed the button); a power-up boots the host.
    pub fn set_power(&self, on: bool) {
        let mut b = lock(&self.state);
        if on && !b.power_on {
            b.power_on = true;
            b.boot_happens();
        } else if !on {
            b.power_off_now();
        }
    }

    /// Every start of the host so far, oldest first (power transitions due are completed first).
    pub fn boots(&self) -> Vec<BootRecord> {
        let mut b = lock(&self.state);
        b.settle(std::time::Instant::now());
        b.boots.clone()
    }

    /// The latest start of the host, if it was ever on.
    pub fn last_boot(&self) -> Option<BootRecord> {
        let mut b = lock(&self.state);
        b.settle(std::time::Instant::now());
        b.boots.last().cloned()
    }

    /// The MAC of the host's NIC `nic`, lower case with colons.
    pub fn mac(&self, nic: u8) -> String {
        let b = lock(&self.state);
        let m = b.cfg.mac_base;
        format!(
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{nic:02x}",
            m[0], m[1], m[2], m[3], m[4]
        )
    }

    /// The host's OS reboots itself (an installer's last step): off, then on again after
    /// [`BmcConfig::power_delay`], booting what the flags say (an override used up: the disk).
    /// No IPMI request: nothing is counted.
    pub fn reboot_from_os(&self) {
        let mut b = lock(&self.state);
        let now = std::time::Instant::now();
        b.settle(now);
        if !b.power_on {
            return;
        }
        let delay = b.cfg.power_delay;
        if delay.is_zero() {
            b.boot_happens();
        } else {
            b.power_off_now();
            b.set_pending_power(now + delay, true);
        }
    }

    /// Current boot flags (parameter 5 data bytes).
    pub fn boot_flags(&self) -> [u8; 5] {
        let mut b = lock(&self.state);
        b.settle(std::time::Instant::now());
        b.boot
    }

    /// Append a SEL record (bytes 2..16); returns its record id.
    pub fn add_sel(&self, body: [u8; 14]) -> u16 {
        lock(&self.state).add_sel(body)
    }

    /// Sets the raw reading of threshold sensor `number`.
    pub fn set_sensor_raw(&self, number: u8, raw: u8) {
        lock(&self.state).set_sensor(number, |s| s.raw = raw);
    }

    /// Sets the states of discrete sensor `number`.
    pub fn set_sensor_states(&self, number: u8, states: u16) {
        lock(&self.state).set_sensor(number, |s| s.states = states);
    }

    /// The SEL as stored (full 16-byte records).
    pub fn sel(&self) -> Vec<[u8; 16]> {
        lock(&self.state).sel.clone()
    }

    /// Session and command counters (expired sessions are purged first).
    pub fn stats(&self) -> BmcStats {
        let mut b = lock(&self.state);
        b.expire(std::time::Instant::now());
        b.settle(std::time::Instant::now());
        BmcStats {
            sessions: b.active_sessions(),
            peak_sessions: b.peak_sessions,
            sessions_opened: b.sessions_opened,
            rejected_full: b.rejected_full,
            chassis_controls: b.controls.clone(),
            peak_active_sessions: b.peak_active,
            active_sessions: b.activated_sessions(),
            commands: b.commands.clone(),
            boot_params_written: b.boot_params_written.clone(),
        }
    }
}

/// A running fleet; dropping it stops every BMC.
pub struct Fleet {
    bmcs: Vec<BmcHandle>,
    tasks: Vec<JoinHandle<()>>,
}

impl Fleet {
    /// The BMCs, in configuration order.
    pub fn bmcs(&self) -> &[BmcHandle] {
        &self.bmcs
    }

    /// One BMC.
    pub fn bmc(&self, i: usize) -> Option<&BmcHandle> {
        self.bmcs.get(i)
    }

    /// Stop every BMC (also done on drop).
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Bind one socket per BMC and serve them on the current tokio runtime.
pub async fn serve(cfg: FleetConfig) -> std::io::Result<Fleet> {
    let mut fleet = Fleet {
        bmcs: Vec::new(),
        tasks: Vec::new(),
    };
    for bmc in cfg.bmcs {
        let sock = Arc::new(UdpSocket::bind(SocketAddr::new(cfg.bind, bmc.port)).await?);
        let addr = sock.local_addr()?;
        let state = Arc::new(Mutex::new(Bmc::new(bmc)));
        fleet
            .tasks
            .push(tokio::spawn(run(sock, Arc::clone(&state))));
        fleet.bmcs.push(BmcHandle { addr, state });
    }
    Ok(fleet)
}

fn lose(percent: u8) -> bool {
    percent > 0 && rand::random::<u32>() % 100 < u32::from(percent)
}

async fn run(sock: Arc<UdpSocket>, state: Arc<Mutex<Bmc>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = match sock.recv_from(&mut buf).await {
            Ok(v) => v,
            Err(e) => {
                tracing::debug!(error = %e, "simulated BMC receive error");
                continue;
            }
        };
        let (faults, replies) = {
            let mut b = lock(&state);
            let faults = b.faults.clone();
            if faults.unresponsive || lose(faults.loss_percent) {
                continue;
            }
            (faults.clone(), b.handle(&buf[..n]))
        };
        for mut reply in replies {
            if lose(faults.loss_percent) {
                continue;
            }
            if faults.lose_rakp4 && reply.len() > 5 && reply[4] == 0x06 && reply[5] & 0x3F == 0x15 {
                continue;
            }
            // Authenticated answers carry their AuthCode last.
            if faults.corrupt_integrity
                && reply.len() > 5
                && reply[5] & 0x40 != 0
                && let Some(last) = reply.last_mut()
            {
                *last ^= 0x01;
            }
            let copies = if faults.duplicate { 2 } else { 1 };
            if faults.delay.is_zero() {
                for _ in 0..copies {
                    let _ = sock.send_to(&reply, from).await;
                }
            } else {
                let sock = Arc::clone(&sock);
                let delay = faults.delay;
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    for _ in 0..copies {
                        let _ = sock.send_to(&reply, from).await;
                    }
                });
            }
        }
    }
}
