//! A real machine for the provisioning tests: QEMU boots from the network with Debian's iPXE ROM,
//! through user-mode networking only (slirp: the guest reaches the host's loopback at 10.0.2.2,
//! and its DHCP hands iPXE the boot URL, the one line a site's DHCP server needs), a Debian kernel
//! and the installer initrd of [`QemuPeer::installer_initrd`], which plays the Harvester
//! installer's first steps (`init.sh`).
//!
//! `scripts/lib.sh install_qemu_peer` unpacks the pinned Debian packages (no root) into one cache
//! directory and exports it as `INGOT_QEMU_DIR`. [`QemuServer`] runs one machine, stopped by its
//! PID when dropped; KVM when it can run a stock kernel here, TCG otherwise ([`Accel::detect`]).

pub mod initrd;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{ChildGuard, temp_dir};

/// The variable naming the directory `install_qemu_peer` unpacked.
pub const DIR_ENV: &str = "INGOT_QEMU_DIR";

/// The `/init` of the installer initrd.
pub const INSTALLER_INIT: &str = include_str!("init.sh");

/// The kernel modules of the NIC the machine gets (virtio-net over virtio-pci), loaded by the
/// initrd with what they depend on.
pub const NIC_MODULES: [&str; 2] = ["virtio_pci", "virtio_net"];

/// The unpacked peer: QEMU, its firmware and iPXE ROMs, the libraries it needs that the machine
/// lacks, a Debian kernel with the NIC's modules, and busybox.
#[derive(Clone, Debug)]
pub struct QemuPeer {
    dir: PathBuf,
}

const HOW: &str =
    "install it with `source scripts/lib.sh && install_qemu_peer` (scripts/test.sh does this)";

impl QemuPeer {
    /// The peer `INGOT_QEMU_DIR` names. When it is not set, `None` and a line saying the test
    /// `test` was skipped, except in CI (`CI=true`) or the full suite (`INGOT_FULL_SUITE`, set by
    /// scripts/test.sh), where a missing peer fails the test. A set but broken one always fails.
    pub fn installed_or_skip(test: &str) -> Option<Self> {
        match std::env::var_os(DIR_ENV).filter(|d| !d.is_empty()) {
            Some(dir) => Some(Self::at(Path::new(&dir)).unwrap_or_else(|e| panic!("{e}"))),
            None => {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true");
                let full = std::env::var_os("INGOT_FULL_SUITE").is_some();
                assert!(
                    !ci && !full,
                    "{test}: {DIR_ENV} is not set, and the QEMU peer is required here; {HOW}"
                );
                eprintln!(
                    "skipped {test}: the QEMU peer is not installed ({DIR_ENV} is not set); {HOW}"
                );
                None
            }
        }
    }

    /// The peer unpacked in `dir`, checked file by file.
    pub fn at(dir: &Path) -> Result<Self, String> {
        let peer = Self {
            dir: dir.to_owned(),
        };
        let kernel = peer.kernel()?;
        for path in [
            peer.qemu(),
            peer.ipxe_rom_dir().join(ROM),
            peer.busybox(),
            peer.uefi_firmware(),
            peer.boot_media_dir().join("ipxe.efi"),
            kernel,
            peer.kernel_modules()?,
        ] {
            if !path.exists() {
                return Err(format!(
                    "{DIR_ENV}={} lacks {}; reinstall it: {HOW}",
                    dir.display(),
                    path.display()
                ));
            }
        }
        Ok(peer)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn qemu(&self) -> PathBuf {
        self.dir.join("usr/bin/qemu-system-x86_64")
    }

    /// `isolinux.bin`, `ldlinux.c32`, `ipxe.lkrn` and `ipxe.efi`, as `ingot run --boot-media-dir`
    /// takes them.
    pub fn boot_media_dir(&self) -> PathBuf {
        self.dir.join("boot-media")
    }

    /// The directory of Debian's iPXE ROMs for QEMU's NICs (`efi-virtio.rom`...).
    pub fn ipxe_rom_dir(&self) -> PathBuf {
        self.dir.join("usr/lib/ipxe/qemu")
    }

    /// UEFI firmware for QEMU (Debian's OVMF).
    pub fn uefi_firmware(&self) -> PathBuf {
        self.dir.join("usr/share/ovmf/OVMF.fd")
    }

    pub fn busybox(&self) -> PathBuf {
        self.dir.join("bin/busybox")
    }

    /// The kernel (`boot/vmlinuz-<version>`).
    pub fn kernel(&self) -> Result<PathBuf, String> {
        self.one_in("boot", "vmlinuz-")
    }

    /// `lib/modules/<version>`, which holds the NIC's modules.
    pub fn kernel_modules(&self) -> Result<PathBuf, String> {
        self.one_in("lib/modules", "")
    }

    fn one_in(&self, sub: &str, prefix: &str) -> Result<PathBuf, String> {
        let dir = self.dir.join(sub);
        let mut found: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{DIR_ENV}: reading {}: {e}; {HOW}", dir.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(prefix))
            })
            .collect();
        match found.len() {
            1 => Ok(found.remove(0)),
            n => Err(format!(
                "{DIR_ENV}: {} holds {n} entries named {prefix}*, not one; {HOW}",
                dir.display()
            )),
        }
    }

    /// The installer initrd: busybox, `/init` ([`INSTALLER_INIT`]), `/dev/console`, and the NIC's
    /// modules in load order under `/modules`.
    pub fn installer_initrd(&self) -> Vec<u8> {
        self.initrd_with_init(INSTALLER_INIT)
    }

    /// The same initrd with another `/init` script.
    pub fn initrd_with_init(&self, init: &str) -> Vec<u8> {
        let read = |path: &Path| {
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        };
        let modules_dir = self.kernel_modules().unwrap_or_else(|e| panic!("{e}"));
        let modules = initrd::modules_in_load_order(&modules_dir, &NIC_MODULES)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut cpio = initrd::Cpio::default();
        for dir in ["bin", "dev", "modules", "proc", "sys", "tmp"] {
            cpio.dir(dir);
        }
        cpio.char_device("dev/console", 0o600, 5, 1);
        cpio.file("bin/busybox", 0o755, &read(&self.busybox()));
        cpio.file("init", 0o755, init.as_bytes());
        for (i, module) in modules.iter().enumerate() {
            let name = module
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            cpio.file(&format!("modules/{i:02}-{name}"), 0o644, &read(module));
        }
        cpio.finish()
    }

    fn library_path(&self) -> OsString {
        let mut dirs = vec![
            self.dir.join("usr/lib/x86_64-linux-gnu"),
            self.dir.join("lib/x86_64-linux-gnu"),
        ];
        if let Some(more) = std::env::var_os("LD_LIBRARY_PATH") {
            dirs.extend(std::env::split_paths(&more));
        }
        std::env::join_paths(dirs).unwrap_or_default()
    }
}

/// The NIC's iPXE ROM (virtio-net-pci's default, found in [`QemuPeer::ipxe_rom_dir`]).
const ROM: &str = "efi-virtio.rom";

/// How QEMU runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl fmt::Display for Accel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        })
    }
}

impl Accel {
    /// `INGOT_QEMU_ACCEL` (`kvm` or `tcg`) when set; else KVM when `/dev/kvm` opens read-write
    /// and the kernel runs it on the CPU's virtualization (`kvm_intel` or `kvm_amd` loaded: a
    /// paravirtual KVM such as `kvm_pvm` runs only guest kernels built for it); else TCG. With
    /// the reason, for the test's output.
    pub fn detect() -> (Accel, String) {
        match std::env::var("INGOT_QEMU_ACCEL").as_deref() {
            Ok("kvm") => return (Accel::Kvm, "INGOT_QEMU_ACCEL=kvm".into()),
            Ok("tcg") => return (Accel::Tcg, "INGOT_QEMU_ACCEL=tcg".into()),
            Ok(other) => {
                panic!("INGOT_QEMU_ACCEL={other}: use kvm or tcg, or leave it unset to detect")
            }
            Err(_) => {}
        }
        if let Err(e) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
        {
            return (Accel::Tcg, format!("/dev/kvm cannot be opened ({e})"));
        }
        let hardware = ["kvm_intel", "kvm_amd"]
            .into_iter()
            .find(|m| Path::new("/sys/module").join(m).exists());
        match hardware {
            Some(module) => (Accel::Kvm, format!("/dev/kvm opens and {module} is loaded")),
            None => (
                Accel::Tcg,
                "/dev/kvm opens but neither kvm_intel nor kvm_amd is loaded (it cannot run a stock kernel)"
                    .into(),
            ),
        }
    }
}

/// What the machine is given.
pub struct QemuOptions<'a> {
    /// The NIC's MAC, `52:54:00:12:34:56` style.
    pub mac: &'a str,
    pub memory_mib: u32,
    /// The boot file URL slirp's DHCP hands iPXE; iPXE expands settings in it (`${net0/mac}`).
    /// Not used with `cdrom`.
    pub boot_url: &'a str,
    /// A CD image to boot from instead of the network, as a BMC's virtual media is.
    pub cdrom: Option<&'a Path>,
    pub firmware: Firmware,
}

/// The machine's firmware, that is its boot mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// SeaBIOS (legacy BIOS boot).
    Bios,
    /// OVMF (UEFI boot). Its CD is named first in the boot order (`bootindex=0`).
    Uefi,
}

/// A running machine booting from the network, its serial console in `serial_log`.
pub struct QemuServer {
    child: ChildGuard,
    pub accel: Accel,
    pub mac: String,
    pub dir: PathBuf,
    pub serial_log: PathBuf,
    qemu_log: PathBuf,
    command_line: String,
    started: Instant,
}

impl QemuServer {
    /// Starts QEMU: `-boot n` from a virtio NIC with Debian's iPXE ROM (or from the CD),
    /// `-netdev user` with the boot URL, the serial console to a file, `-no-reboot` (a reboot ends
    /// it, as powering off does); SeaBIOS, or OVMF for [`Firmware::Uefi`].
    pub fn start(peer: &QemuPeer, options: &QemuOptions) -> Self {
        check_mac(options.mac).unwrap_or_else(|e| panic!("{e}"));
        let (accel, reason) = Accel::detect();
        eprintln!("QEMU accelerator: {accel} ({reason})");
        let dir = temp_dir("qemu");
        let serial_log = dir.join("serial.log");
        let qemu_log = dir.join("qemu.log");
        let log = std::fs::File::create(&qemu_log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", qemu_log.display()));
        // QEMU's option syntax doubles a comma inside a value.
        let boot_url = options.boot_url.replace(',', ",,");
        let mut command = Command::new(peer.qemu());
        command
            .env("LD_LIBRARY_PATH", peer.library_path())
            .env(
                "QEMU_MODULE_DIR",
                peer.dir.join("usr/lib/x86_64-linux-gnu/qemu"),
            )
            // Firmware from the peer only: the iPXE ROMs first, then SeaBIOS and QEMU's own. (The
            // NIC takes its default ROM, efi-virtio.rom, from there: named with `romfile=`, a ROM
            // is not patched to the device and SeaBIOS does not boot from it.)
            .arg("-L")
            .arg(peer.ipxe_rom_dir())
            .arg("-L")
            .arg(peer.dir.join("usr/share/seabios"))
            .arg("-L")
            .arg(peer.dir.join("usr/share/qemu"))
            .args([
                "-nodefaults",
                "-nographic",
                "-no-reboot",
                "-monitor",
                "none",
            ])
            .args(["-accel", &accel.to_string()])
            .args(["-m", &options.memory_mib.to_string(), "-smp", "1"])
            .arg("-serial")
            .arg(format!("file:{}", serial_log.display()))
            .arg("-netdev")
            .arg(if options.cdrom.is_some() {
                // Booted from the CD: slirp's DHCP hands out no boot file.
                "user,id=net0".to_owned()
            } else {
                format!("user,id=net0,bootfile={boot_url}")
            })
            .arg("-device")
            .arg(format!("virtio-net-pci,netdev=net0,mac={}", options.mac))
            .args(["-boot", if options.cdrom.is_some() { "d" } else { "n" }])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap_or_else(|e| panic!("qemu.log: {e}")))
            .stderr(log);
        if options.firmware == Firmware::Uefi {
            command.arg("-bios").arg(peer.uefi_firmware());
        }
        match (options.cdrom, options.firmware) {
            (Some(cdrom), Firmware::Bios) => {
                command.arg("-cdrom").arg(cdrom);
            }
            (Some(cdrom), Firmware::Uefi) => {
                // OVMF takes its boot order from `bootindex`, not from `-boot`.
                let cdrom = cdrom.display().to_string().replace(',', ",,");
                command
                    .arg("-drive")
                    .arg(format!(
                        "file={cdrom},media=cdrom,if=none,id=cd,readonly=on"
                    ))
                    .args(["-device", "ide-cd,drive=cd,bootindex=0"]);
            }
            (None, _) => {}
        }
        let command_line = format!("{command:?}");
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", peer.qemu().display()));
        Self {
            child: ChildGuard(child),
            accel,
            mac: options.mac.to_owned(),
            dir,
            serial_log,
            qemu_log,
            command_line,
            started: Instant::now(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Time since QEMU was started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The serial console so far.
    pub fn serial(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.serial_log).unwrap_or_default()).into_owned()
    }

    /// Waits (at most `within`) for a serial line for which `matches` holds, and returns it;
    /// fails with the console and QEMU's own output if QEMU ends first or time runs out.
    pub async fn wait_for_serial_line(
        &mut self,
        what: &str,
        within: Duration,
        matches: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + within;
        loop {
            // Whether QEMU had ended before this read of the console: then the line never comes.
            let ended = self.child.0.try_wait().ok().flatten();
            let serial = self.serial();
            if let Some(line) = serial.lines().find(|l| matches(l)) {
                return line.trim_end_matches('\r').to_owned();
            }
            if let Some(status) = ended {
                panic!(
                    "QEMU ended ({status}) while waiting for {what}:\n{}",
                    self.report()
                );
            }
            // SeaBIOS's last word when no boot device (the NIC's ROM included) worked.
            assert!(
                !serial.contains("No bootable device."),
                "the machine found no boot device while waiting for {what}:\n{}",
                self.report()
            );
            assert!(
                Instant::now() < deadline,
                "gave up waiting for {what} after {within:?}:\n{}",
                self.report()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (at most `within`) for QEMU to end (the guest powered off) and returns its status.
    pub async fn wait_exit(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.0.try_wait() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "QEMU did not end within {within:?}:\n{}",
                self.report()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The serial console's last lines and QEMU's own output, for failures.
    pub fn report(&self) -> String {
        let serial = self.serial();
        let lines: Vec<&str> = serial.lines().collect();
        let tail = lines[lines.len().saturating_sub(60)..].join("\n");
        let qemu = std::fs::read_to_string(&self.qemu_log).unwrap_or_default();
        format!(
            "--- serial console ({}), last lines:\n{tail}\n--- QEMU ({}): {}\n{qemu}",
            self.serial_log.display(),
            self.accel,
            self.command_line
        )
    }
}

impl Drop for QemuServer {
    fn drop(&mut self) {
        // ChildGuard kills QEMU by its PID; keep the logs of a failed test for reading.
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// `mac` as QEMU and the kernel write it: six two-digit hex bytes separated by colons.
pub fn check_mac(mac: &str) -> Result<(), String> {
    let parts: Vec<&str> = mac.split(':').collect();
    if parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(())
    } else {
        Err(format!(
            "MAC address {mac:?} is not six two-digit hex bytes separated by colons (52:54:00:12:34:56)"
        ))
    }
}
