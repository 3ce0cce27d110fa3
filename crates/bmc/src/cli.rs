//! `ingot bmc`: the command an operator reaches for instead of ipmitool / redfishtool.
//!
//! The binary embeds [`BmcArgs`] as a subcommand and calls [`run`] (or [`run_with`] to add the
//! IPMI connector). With `--json`, stdout carries exactly one JSON document (schema in
//! `docs/bmc.md`); without it, short human-readable text.

use crate::error::BmcError;
use crate::ipmi::{IpmiConnector, IpmiOptions, ipmi_address};
use crate::manager::{BmcConfig, Connector, ManagerOptions, SessionManager};
use crate::redfish::{AuthMode, RedfishOptions};
use crate::secret::Password;
use crate::types::*;
use crate::{Bmc, Endpoint};
use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// Version of the `--json` document layout.
pub const JSON_SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Args)]
pub struct BmcArgs {
    /// BMC host name, address or URL (`bmc1`, `10.0.0.5`, `[fe80::1]`, `https://h:8443`, `http://h:8000`).
    #[arg(long)]
    pub host: String,
    /// Port (overrides a port in --host). Redfish default 443 (80 for http://), IPMI 623 (UDP).
    #[arg(long)]
    pub port: Option<u16>,
    /// BMC user name.
    #[arg(long, short = 'u')]
    pub user: String,
    /// Name of the environment variable that holds the password.
    #[arg(long, value_name = "VAR")]
    pub password_env: String,
    /// Protocol; detected when omitted (Redfish first, then IPMI lanplus).
    #[arg(long, value_enum)]
    pub protocol: Option<Protocol>,
    /// Do not verify the BMC's TLS certificate.
    #[arg(long)]
    pub insecure: bool,
    /// PEM file of CA certificates to trust in addition to the system roots.
    #[arg(long, value_name = "FILE")]
    pub ca_bundle: Option<std::path::PathBuf>,
    /// Redfish authentication: a session (falling back to Basic when none is offered), sessions only, or Basic.
    #[arg(long, value_enum, default_value = "auto")]
    pub auth: AuthArg,
    /// Timeout of every Redfish request, in seconds (IPMI: 1 s per exchange, 3 retransmissions).
    #[arg(long, default_value_t = 15)]
    pub timeout: u64,
    /// IPMI cipher suite; by default 17 (SHA-256), then 3 (SHA-1) if the BMC refuses or ignores 17.
    #[arg(long, value_enum, value_name = "SUITE")]
    pub cipher_suite: Option<CipherSuiteArg>,
    /// Print one JSON document (stable schema) instead of text (`events`: one per event, one a
    /// line). May also follow the command (`events --json`).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: BmcCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CipherSuiteArg {
    /// RAKP-HMAC-SHA256, HMAC-SHA256-128, AES-CBC-128.
    #[value(name = "17")]
    Suite17,
    /// RAKP-HMAC-SHA1, HMAC-SHA1-96, AES-CBC-128.
    #[value(name = "3")]
    Suite3,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum AuthArg {
    Auto,
    Session,
    Basic,
}

#[derive(Debug, Clone, Subcommand)]
pub enum BmcCommand {
    /// Power state and actions.
    Power {
        #[arg(value_enum)]
        op: PowerOp,
        /// After an action, poll until the system reports the end state (on, or off for
        /// off/soft), for at most this many seconds.
        #[arg(long, value_name = "SECS")]
        wait: Option<u64>,
    },
    /// Boot override: `boot show`, `boot pxe --once`, `boot disk --persistent`.
    Boot {
        #[arg(value_enum)]
        target: BootTarget,
        /// Next boot only (the default).
        #[arg(long, conflicts_with = "persistent")]
        once: bool,
        /// Every boot.
        #[arg(long)]
        persistent: bool,
        /// Ask for a boot mode (this may switch the machine's); by default the mode the BMC
        /// reports is kept (over IPMI, UEFI when it reports none).
        #[arg(long, value_enum)]
        mode: Option<BootMode>,
    },
    /// Virtual media (Redfish): `media show`, `media insert URL`, `media eject`.
    Media {
        #[arg(value_enum)]
        op: MediaOp,
        /// The image's URL, which the BMC fetches (`insert` only).
        #[arg(required_if_eq("op", "insert"))]
        url: Option<String>,
        /// The kind of device to use (`insert`, `eject`).
        #[arg(long, value_enum, default_value = "CD")]
        kind: MediaKind,
    },
    /// Hardware inventory.
    Inventory,
    /// Event log entries (Redfish LogServices / IPMI SEL).
    Sel,
    /// Sensor readings, thresholds and health (IPMI SDR sensors; Redfish `Sensors`, the
    /// chassis' fans, temperatures and power supplies).
    Sensors,
    /// Follow the BMC's events until interrupted (SIGINT or SIGTERM end it with exit 0): Redfish
    /// server-sent events when the EventService offers them (reconnecting after a drop), else
    /// the event log polled; over IPMI the SEL polled. One line per event; with --json, one JSON
    /// document per line.
    Events {
        /// Print only events that come after the start (by default the log's existing entries
        /// are printed first).
        #[arg(long)]
        since_now: bool,
        /// Seconds between two reads of the event log or SEL when polling (1 to 3600).
        #[arg(long, value_name = "SECS", default_value_t = 10,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        poll_seconds: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PowerOp {
    Status,
    On,
    Off,
    Soft,
    Reset,
    Cycle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MediaOp {
    Show,
    Insert,
    Eject,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BootTarget {
    Show,
    None,
    Pxe,
    Disk,
    Cdrom,
    Bios,
    Usb,
}

impl BmcCommand {
    fn name(&self) -> String {
        match self {
            BmcCommand::Power { op, .. } => format!("power {}", value_name(op)),
            BmcCommand::Boot { target, .. } => format!("boot {}", value_name(target)),
            BmcCommand::Media { op, .. } => format!("media {}", value_name(op)),
            BmcCommand::Inventory => "inventory".into(),
            BmcCommand::Sel => "sel".into(),
            BmcCommand::Sensors => "sensors".into(),
            BmcCommand::Events { .. } => "events".into(),
        }
    }
}

fn value_name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value()
        .map(|p| p.get_name().to_owned())
        .unwrap_or_default()
}

/// What a command produced: the JSON document, the text form, and the exit code.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub json: Value,
    pub text: String,
    pub code: u8,
}

/// Exit codes: 0 success, 1 the BMC call failed, 2 bad arguments or configuration.
pub const EXIT_BMC_ERROR: u8 = 1;
pub const EXIT_USAGE: u8 = 2;

/// Runs the command and prints the result (Redfish, and IPMI through [`crate::ipmi`]).
pub async fn run(args: BmcArgs) -> anyhow::Result<ExitCode> {
    run_with(args, Vec::new()).await
}

/// Runs the command with extra protocol connectors and prints the result. An IPMI connector
/// built from the arguments is added unless `connectors` already has one.
pub async fn run_with(
    args: BmcArgs,
    connectors: Vec<Arc<dyn Connector>>,
) -> anyhow::Result<ExitCode> {
    if let BmcCommand::Events {
        since_now,
        poll_seconds,
    } = args.command
    {
        return crate::follow::run(args, connectors, since_now, poll_seconds).await;
    }
    let json = args.json;
    let out = execute(args, connectors).await;
    print_outcome(json, &out)?;
    Ok(ExitCode::from(out.code))
}

/// Prints a command's outcome: its JSON document, or its text (on stderr for an error).
pub(crate) fn print_outcome(json: bool, out: &Outcome) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(&out.json)?);
    } else if out.code == 0 {
        println!("{}", out.text);
    } else {
        eprintln!("error: {}", out.text);
    }
    Ok(())
}

/// Runs the command and returns its output without printing.
pub async fn execute(args: BmcArgs, connectors: Vec<Arc<dyn Connector>>) -> Outcome {
    execute_with(args, connectors, |name| std::env::var(name).ok()).await
}

/// As [`execute`], reading `--password-env` through `env` (tests, embedding).
pub async fn execute_with(
    args: BmcArgs,
    connectors: Vec<Arc<dyn Connector>>,
    env: impl Fn(&str) -> Option<String>,
) -> Outcome {
    let command = args.command.name();
    let (manager, bmc, endpoint) = match prepare(&args, connectors, env) {
        Ok(p) => p,
        Err(out) => return out,
    };
    let result = dispatch(&bmc, &args.command).await;
    let protocol = bmc.protocol_detected();
    manager.shutdown().await;
    match result {
        Ok((value, text)) => Outcome {
            json: json!({
                "schemaVersion": JSON_SCHEMA_VERSION,
                "host": host_of(&endpoint, protocol),
                "protocol": protocol,
                "command": command,
                "ok": true,
                "result": value,
            }),
            text,
            code: 0,
        },
        Err(e) => failure(&args, EXIT_BMC_ERROR, e.kind(), error_message(&e)),
    }
}

/// `host` of a JSON document: the Redfish base URL, or the IPMI socket.
pub(crate) fn host_of(endpoint: &Endpoint, protocol: Option<Protocol>) -> String {
    match protocol {
        Some(Protocol::Ipmi) => ipmi_address(endpoint),
        _ => endpoint.to_string(),
    }
}

/// An error with its sources, on one line.
pub(crate) fn error_message(e: &BmcError) -> String {
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(&format!(": {s}"));
        source = s.source();
    }
    message
}

/// The failure document of a command.
pub(crate) fn failure(args: &BmcArgs, code: u8, kind: &str, message: String) -> Outcome {
    Outcome {
        json: json!({
            "schemaVersion": JSON_SCHEMA_VERSION,
            "host": args.host,
            "command": args.command.name(),
            "ok": false,
            "error": {"kind": kind, "message": message},
        }),
        text: message,
        code,
    }
}

/// The session manager and the BMC the arguments name, or the usage error.
#[allow(clippy::result_large_err)]
pub(crate) fn prepare(
    args: &BmcArgs,
    connectors: Vec<Arc<dyn Connector>>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Arc<SessionManager>, crate::manager::ManagedBmc, Endpoint), Outcome> {
    let fail = |code: u8, kind: &str, message: String| Err(failure(args, code, kind, message));
    let endpoint = match Endpoint::parse(&args.host, args.port) {
        Ok(e) => e,
        Err(e) => return fail(EXIT_USAGE, "usage", e.to_string()),
    };
    if let BmcCommand::Media {
        op: op @ (MediaOp::Show | MediaOp::Eject),
        url: Some(url),
        ..
    } = &args.command
    {
        return fail(
            EXIT_USAGE,
            "usage",
            format!(
                "media {} takes no URL (got {url:?}); use `media insert URL`",
                value_name(op)
            ),
        );
    }
    let password = match env(&args.password_env) {
        Some(p) => Password::new(p),
        None => {
            return fail(
                EXIT_USAGE,
                "usage",
                format!("environment variable {} is not set", args.password_env),
            );
        }
    };
    let ca_bundle_pem = match &args.ca_bundle {
        Some(path) => match std::fs::read(path) {
            Ok(b) => Some(Arc::new(b)),
            Err(e) => {
                return fail(
                    EXIT_USAGE,
                    "usage",
                    format!("cannot read CA bundle {}: {e}", path.display()),
                );
            }
        },
        None => None,
    };
    let options = ManagerOptions {
        per_bmc_limit: 1,
        fleet_limit: 1,
        redfish: RedfishOptions {
            timeout: Duration::from_secs(args.timeout.max(1)),
            auth: match args.auth {
                AuthArg::Auto => AuthMode::Auto,
                AuthArg::Session => AuthMode::Session,
                AuthArg::Basic => AuthMode::Basic,
            },
            ..RedfishOptions::default()
        },
        ..ManagerOptions::default()
    };
    let mut connectors = connectors;
    if !connectors.iter().any(|c| c.protocol() == Protocol::Ipmi) {
        connectors.push(Arc::new(IpmiConnector::new(ipmi_options(
            args.cipher_suite,
        ))));
    }
    let manager = SessionManager::with_connectors(options, connectors);
    let bmc = manager.bmc(BmcConfig {
        endpoint: endpoint.clone(),
        username: args.user.clone(),
        password,
        protocol: args.protocol,
        insecure_tls: args.insecure,
        ca_bundle_pem,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    });
    Ok((manager, bmc, endpoint))
}

/// IPMI settings for one command: each exchange waits a second and is sent up to four times
/// (the library defaults), suites 17 then 3 unless one is given; no keep-alive for a one-shot
/// session.
pub fn ipmi_options(suite: Option<CipherSuiteArg>) -> IpmiOptions {
    let defaults = IpmiOptions::default();
    IpmiOptions {
        keepalive: None,
        cipher_suites: match suite {
            Some(CipherSuiteArg::Suite17) => vec![ingot_ipmi::CipherSuite::Suite17],
            Some(CipherSuiteArg::Suite3) => vec![ingot_ipmi::CipherSuite::Suite3],
            None => defaults.cipher_suites.clone(),
        },
        ..defaults
    }
}

async fn dispatch(bmc: &dyn Bmc, command: &BmcCommand) -> Result<(Value, String), BmcError> {
    Ok(match command {
        BmcCommand::Power {
            op: PowerOp::Status,
            ..
        } => {
            let s = bmc.power_state().await?;
            (json!({"powerState": s}), format!("Power is {s}"))
        }
        BmcCommand::Power { op, wait } => {
            let action = match op {
                PowerOp::Off => PowerAction::Off,
                PowerOp::Soft => PowerAction::Soft,
                PowerOp::Reset => PowerAction::Reset,
                PowerOp::Cycle => PowerAction::Cycle,
                // `Status` was matched above.
                PowerOp::On | PowerOp::Status => PowerAction::On,
            };
            let o = bmc.power(action).await?;
            let mut text = if o.already_in_state {
                format!("power {action}: already in that state, nothing sent")
            } else {
                format!("power {action}: sent {}", o.sent.join(", then "))
            };
            let mut value = to_json(&o);
            if let Some(secs) = wait {
                let want = match action {
                    PowerAction::Off | PowerAction::Soft => PowerState::Off,
                    _ => PowerState::On,
                };
                let limit = Duration::from_secs(*secs);
                let deadline = tokio::time::Instant::now() + limit;
                // A restart may still read On before it goes down: give it a moment first.
                if matches!(action, PowerAction::Reset | PowerAction::Cycle) && !o.already_in_state
                {
                    tokio::time::sleep(Duration::from_secs(1).min(limit)).await;
                }
                loop {
                    let state = bmc.power_state().await?;
                    if state == want {
                        break;
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(BmcError::TransitionTimeout(limit));
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                if let Value::Object(m) = &mut value {
                    m.insert("powerState".into(), json!(want));
                }
                text.push_str(&format!("; power is {want}"));
            }
            (value, text)
        }
        BmcCommand::Boot {
            target: BootTarget::Show,
            ..
        } => {
            let b = bmc.boot_override().await?;
            let text = boot_text(&b);
            (to_json(&b), text)
        }
        BmcCommand::Boot {
            target,
            persistent,
            mode,
            ..
        } => {
            let device = match target {
                BootTarget::None | BootTarget::Show => BootDevice::None,
                BootTarget::Pxe => BootDevice::Pxe,
                BootTarget::Disk => BootDevice::Disk,
                BootTarget::Cdrom => BootDevice::Cdrom,
                BootTarget::Bios => BootDevice::Bios,
                BootTarget::Usb => BootDevice::Usb,
            };
            let b = bmc
                .set_boot_override(BootRequest {
                    device,
                    persistent: *persistent,
                    mode: *mode,
                })
                .await?;
            let text = boot_text(&b);
            (to_json(&b), text)
        }
        BmcCommand::Media { op, url, kind } => {
            match op {
                MediaOp::Show => {}
                MediaOp::Insert => bmc.set_virtual_media(*kind, url.clone()).await?,
                MediaOp::Eject => bmc.set_virtual_media(*kind, None).await?,
            }
            let devices = bmc.virtual_media().await?;
            let text = media_text(&devices);
            (json!({"devices": devices}), text)
        }
        BmcCommand::Inventory => {
            let inv = bmc.inventory().await?;
            let text = inventory_text(&inv);
            (to_json(&inv), text)
        }
        BmcCommand::Events { .. } => {
            return Err(BmcError::Config(
                "events follows the BMC and is run by cli::run, not execute".into(),
            ));
        }
        BmcCommand::Sel => {
            let entries = bmc.event_log().await?;
            let mut text = String::new();
            for e in &entries {
                text.push_str(&format!(
                    "{} | {} | {} | {}\n",
                    e.created.as_deref().unwrap_or("-"),
                    e.severity.as_deref().unwrap_or("-"),
                    e.message,
                    e.id
                ));
            }
            if entries.is_empty() {
                text.push_str("no entries");
            }
            (json!({"entries": entries}), text.trim_end().to_owned())
        }
        BmcCommand::Sensors => {
            let sensors = bmc.sensors().await?;
            let text = sensors_text(&sensors);
            (json!({"sensors": sensors}), text)
        }
    })
}

/// A number as it reads best: no trailing zeros, at most three decimals.
fn num(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.to_owned() }
}

/// One line per sensor: name, kind, reading, unit, thresholds (`lower fatal/critical/
/// non-critical .. upper non-critical/critical/fatal`, `-` where none), health and state.
fn sensors_text(sensors: &[Sensor]) -> String {
    if sensors.is_empty() {
        return "no sensors".into();
    }
    let o = |v: Option<f64>| v.map(num).unwrap_or_else(|| "-".into());
    let rows: Vec<[String; 7]> = sensors
        .iter()
        .map(|s| {
            let t = &s.thresholds;
            [
                s.name.clone(),
                s.kind.to_string(),
                match (s.reading, s.state) {
                    (Some(r), _) => num(r),
                    (None, SensorState::Enabled) => "-".into(),
                    (None, state) => format!("{state:?}").to_lowercase(),
                },
                s.unit.clone().unwrap_or_else(|| "-".into()),
                if t.is_empty() {
                    "-".into()
                } else {
                    format!(
                        "{}/{}/{} .. {}/{}/{}",
                        o(t.lower_fatal),
                        o(t.lower_critical),
                        o(t.lower_non_critical),
                        o(t.upper_non_critical),
                        o(t.upper_critical),
                        o(t.upper_fatal)
                    )
                },
                s.health
                    .map(|h| format!("{h:?}").to_lowercase())
                    .unwrap_or_else(|| "-".into()),
                s.source.clone(),
            ]
        })
        .collect();
    let header = [
        "NAME",
        "KIND",
        "READING",
        "UNIT",
        "THRESHOLDS (LF/LC/LNC .. UNC/UC/UF)",
        "HEALTH",
        "SOURCE",
    ];
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in &rows {
        for (w, c) in widths.iter_mut().zip(r.iter()) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    for r in &rows {
        out.push(line(r.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

fn to_json<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn boot_text(b: &BootOverride) -> String {
    let mode = match b.mode {
        Some(BootMode::Uefi) => "UEFI",
        Some(BootMode::Legacy) => "Legacy",
        None => "unknown",
    };
    if !b.enabled {
        return format!("boot override: none (mode {mode})");
    }
    format!(
        "boot override: {} {} (mode {mode})",
        b.raw_target.as_deref().unwrap_or("?"),
        if b.persistent { "persistent" } else { "once" }
    )
}

fn media_text(devices: &[MediaSlot]) -> String {
    if devices.is_empty() {
        return "no virtual media devices".into();
    }
    devices
        .iter()
        .map(|d| {
            let holds = match (&d.image, d.inserted) {
                (Some(image), true) => format!("inserted {image}"),
                (Some(image), false) => format!("not inserted ({image})"),
                (None, _) => "empty".into(),
            };
            format!("{} [{}]: {holds}", d.id, d.media_types.join(", "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn inventory_text(i: &Inventory) -> String {
    let o = |s: &Option<String>| s.clone().unwrap_or_else(|| "-".into());
    let mut t = format!(
        "Manufacturer: {}\nModel:        {}\nSerial:       {}\nSKU:          {}\nBIOS:         {}\nBMC firmware: {}\nVendor:       {}\nPower:        {}\nHealth:       {}\n",
        o(&i.manufacturer),
        o(&i.model),
        o(&i.serial_number),
        o(&i.sku),
        o(&i.bios_version),
        o(&i.bmc_firmware_version),
        i.vendor,
        i.power_state,
        i.health
            .system
            .map(|h| format!("{h:?}").to_lowercase())
            .unwrap_or_else(|| "-".into()),
    );
    for c in &i.cpus {
        t.push_str(&format!(
            "CPU {}: {} ({} cores)\n",
            c.id,
            o(&c.model),
            c.cores.map(|c| c.to_string()).unwrap_or_else(|| "?".into())
        ));
    }
    if let Some(g) = i.total_memory_gib {
        t.push_str(&format!("Memory: {g} GiB in {} modules\n", i.memory.len()));
    }
    for n in &i.nics {
        t.push_str(&format!("NIC {}: {}\n", n.id, o(&n.mac_address)));
    }
    for d in &i.disks {
        t.push_str(&format!(
            "Disk {}: {} {}\n",
            d.id,
            o(&d.model),
            d.capacity_bytes
                .map(|b| format!("{} GB", b / 1_000_000_000))
                .unwrap_or_default()
        ));
    }
    t.trim_end().to_owned()
}
