//! Hardware health → Events on the Node, in Seeder's format (its `ClusterEventReconciler`,
//! `pkg/events/events.go`), and hardware facts → Node annotations. Pure decisions only: what
//! to say, whether it was said already, and what to write back.
//!
//! Seeder's messages are kept to the letter (reason `HarvesterHardwareDiscovery`, source
//! component `boots`): `fan <Name> is <Health>` per unhealthy fan, `ThermalHealth: <Name>
//! reported temp: <C>C,...` for the temperatures, then `DriveHealth:`, `PowerSupplyHealth:`,
//! `NetworkAdapterHealth:`, `StorageHealth:`, `PCIDeviceHealth:`, `CPUHealth:`,
//! `MemoryHealth:` listing the parts whose health is not OK (`<Name> is <Health>`, joined by
//! `,`). Unlike Seeder:
//!
//! - a reading is emitted only when it changed since it was last emitted (Seeder repeats every
//!   message every 15 minutes): the fingerprints of the readings last emitted are kept on the
//!   Node ([`READINGS_ANNOTATION`]), so a restart does not repeat them either;
//! - informational readings (the temperatures) are `Normal`, only non-OK health is `Warning`
//!   (Seeder: all `Warning`);
//! - event-log entries (IPMI SEL, Redfish LogServices) are Events too, each once: the newest
//!   entry seen is kept on the Node ([`EVENT_LOG_CURSOR_ANNOTATION`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ingot_bmc::{Health, Inventory as Facts, LogEntry, Sensor, SensorKind, worst_health};
use serde_json::{Map, Value, json};

/// Seeder's Event reason on the Node.
pub const REASON: &str = "HarvesterHardwareDiscovery";
/// Seeder's Event source component.
pub const SOURCE_COMPONENT: &str = "boots";
/// Fingerprints of the readings last emitted as Events for this Node.
pub const READINGS_ANNOTATION: &str = "seeder.ingot.dev/health-readings";
/// Fingerprint of the newest event-log entry already emitted for this Node.
pub const EVENT_LOG_CURSOR_ANNOTATION: &str = "seeder.ingot.dev/event-log-cursor";
/// Hardware facts published on the Node.
pub const CPU_ANNOTATION: &str = "seeder.ingot.dev/cpu";
pub const MEMORY_ANNOTATION: &str = "seeder.ingot.dev/memory";
pub const BIOS_VERSION_ANNOTATION: &str = "seeder.ingot.dev/bios-version";
pub const BMC_FIRMWARE_ANNOTATION: &str = "seeder.ingot.dev/bmc-firmware-version";
pub const NIC_MACS_ANNOTATION: &str = "seeder.ingot.dev/nic-macs";
pub const DISKS_ANNOTATION: &str = "seeder.ingot.dev/disks";
pub const HEALTH_ANNOTATION: &str = "seeder.ingot.dev/health";
/// Every fact annotation ingot owns (one that is no longer reported is removed).
pub const FACT_ANNOTATIONS: [&str; 7] = [
    CPU_ANNOTATION,
    MEMORY_ANNOTATION,
    BIOS_VERSION_ANNOTATION,
    BMC_FIRMWARE_ANNOTATION,
    NIC_MACS_ANNOTATION,
    DISKS_ANNOTATION,
    HEALTH_ANNOTATION,
];
/// Seeder's default `events.pollingInterval`.
pub const DEFAULT_POLLING_INTERVAL: Duration = Duration::from_secs(3600);
/// At most this many event-log entries become Events in one cycle (the newest), so that the
/// first read of a long SEL, or of a log whose cursor entry was cleared, does not flood.
pub const MAX_LOG_EVENTS_PER_CYCLE: usize = 20;
/// events.k8s.io limits a note to 1 KiB; core Events are cut to the same size.
const MAX_MESSAGE: usize = 1024;
/// The longest value of a fact annotation on a Node. A BMC's strings (versions, models, one
/// MAC per NIC) go there: a longer fact is left out, with [`FactTooLong`], rather than
/// filling the Node's 256 KiB of annotations.
pub const MAX_FACT_BYTES: usize = 1024;

/// A fact whose value, from the BMC's strings, is longer than [`MAX_FACT_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "annotation {annotation} is left off the Node: {field} reported by the BMC would take more than {MAX_FACT_BYTES} bytes; check the BMC's inventory (its firmware may report garbage)"
)]
pub struct FactTooLong {
    pub annotation: &'static str,
    pub field: &'static str,
}

/// One thing to say about the hardware.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    /// What the reading is about (`fan:<name>`, `thermal`, `drives`...): a changed message of
    /// the same subject is a new reading.
    pub subject: String,
    pub message: String,
    /// `Warning` (non-OK health) rather than `Normal`.
    pub warning: bool,
}

impl Reading {
    /// A stable fingerprint of subject and message (FNV-1a, 32 bits, hex).
    pub fn fingerprint(&self) -> String {
        format!(
            "{:08x}",
            fnv1a(&[self.subject.as_bytes(), b"\0", self.message.as_bytes()]) as u32
        )
    }
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in *part {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Redfish's spelling of a health (Seeder prints the BMC's string).
pub fn health_word(h: Health) -> &'static str {
    match h {
        Health::Ok => "OK",
        Health::Warning => "Warning",
        Health::Critical => "Critical",
    }
}

fn unhealthy(h: Option<Health>) -> Option<Health> {
    h.filter(|h| *h != Health::Ok)
}

/// Go's `%v` of a float32: no trailing `.0`.
fn go_float(v: f64) -> String {
    let v = v as f32;
    if v.fract() == 0.0 && v.abs() < 1e21 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// A part's name and health.
type Part = (String, Option<Health>);

/// Seeder's messages, in Seeder's order, for these facts.
pub fn readings(facts: &Facts) -> Vec<Reading> {
    let mut out = fan_readings(facts);
    out.extend(thermal_reading(facts));
    for (subject, prefix, items) in part_groups(facts) {
        let bad: Vec<String> = items
            .iter()
            .filter_map(|(name, h)| Some(format!("{name} is {}", health_word(unhealthy(*h)?))))
            .collect();
        if !bad.is_empty() {
            out.push(Reading {
                subject: subject.into(),
                message: format!("{prefix}: {}", bad.join(",")),
                warning: true,
            });
        }
    }
    for r in &mut out {
        r.message = cut(&r.message);
    }
    out
}

/// One Warning per unhealthy fan.
fn fan_readings(facts: &Facts) -> Vec<Reading> {
    facts
        .fans
        .iter()
        .filter_map(|fan| {
            let h = unhealthy(fan.health)?;
            Some(Reading {
                subject: format!("fan:{}", fan.name),
                message: format!("fan {} is {}", fan.name, health_word(h)),
                warning: true,
            })
        })
        .collect()
}

/// Every temperature in one reading, a Warning when one of them is unhealthy.
fn thermal_reading(facts: &Facts) -> Option<Reading> {
    if facts.temperatures.is_empty() {
        return None;
    }
    let list: Vec<String> = facts
        .temperatures
        .iter()
        .map(|t| {
            format!(
                "{} reported temp: {}C",
                t.name,
                go_float(t.reading_celsius.unwrap_or(0.0))
            )
        })
        .collect();
    Some(Reading {
        subject: "thermal".into(),
        message: format!("ThermalHealth: {}", list.join(",")),
        warning: facts
            .temperatures
            .iter()
            .any(|t| unhealthy(t.health).is_some()),
    })
}

/// The parts reported by group (subject, Seeder's message prefix, parts), in Seeder's order.
fn part_groups(facts: &Facts) -> [(&'static str, &'static str, Vec<Part>); 7] {
    let named = |name: &Option<String>, id: &str| name.clone().unwrap_or_else(|| id.to_owned());
    [
        (
            "drives",
            "DriveHealth",
            facts
                .disks
                .iter()
                .map(|d| (named(&d.name, &d.id), d.health))
                .collect(),
        ),
        (
            "power-supplies",
            "PowerSupplyHealth",
            parts(&facts.power_supplies),
        ),
        (
            "network-adapters",
            "NetworkAdapterHealth",
            parts(&facts.network_adapters),
        ),
        (
            "storage",
            "StorageHealth",
            parts(&facts.storage_controllers),
        ),
        (
            "pcie-devices",
            "PCIDeviceHealth",
            parts(&facts.pcie_devices),
        ),
        (
            "cpus",
            "CPUHealth",
            facts
                .cpus
                .iter()
                .map(|c| (named(&c.name, &c.id), c.health))
                .collect(),
        ),
        (
            "memory",
            "MemoryHealth",
            facts
                .memory
                .iter()
                .map(|m| (named(&m.name, &m.id), m.health))
                .collect(),
        ),
    ]
}

/// The Node condition summarising the hardware's health.
pub const HARDWARE_HEALTHY: &str = "HardwareHealthy";

/// The component kinds the condition names, in the order the worst one is picked by (at the
/// same health): `(kind in messages, reason when it is the worst)`.
const CONDITION_KINDS: [(&str, &str); 6] = [
    ("fan", "FanUnhealthy"),
    ("temperature", "TemperatureUnhealthy"),
    ("power supply", "PowerSupplyUnhealthy"),
    ("drive", "DriveUnhealthy"),
    ("voltage", "VoltageUnhealthy"),
    ("current", "CurrentUnhealthy"),
];

/// `HardwareHealthy` as it should read: `(status, reason, message)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardwareCondition {
    pub healthy: bool,
    pub reason: String,
    pub message: String,
}

/// `HardwareHealthy` from the inventory's fans, temperatures, power supplies and drives and
/// from the sensors (fans, temperatures, power supplies and their power, drive bays, voltages,
/// currents; a part read both ways counts once, at its worse health): `False` with the reason
/// naming the kind of the worst part (`FanUnhealthy`, `TemperatureUnhealthy`,
/// `PowerSupplyUnhealthy`, `DriveUnhealthy`, `VoltageUnhealthy`, `CurrentUnhealthy`; critical
/// before warning, then in that order) and a message naming every unhealthy part, worst first
/// (cut at 1 KiB); else `True` (`Healthy`). Parts of unknown health count as healthy.
pub fn hardware_condition(facts: &Facts, sensors: &[Sensor]) -> HardwareCondition {
    // (kind index, name) -> worst health.
    let mut parts: BTreeMap<(usize, String), Option<Health>> = BTreeMap::new();
    let mut add = |kind: usize, name: &str, h: Option<Health>| {
        let e = parts.entry((kind, name.to_owned())).or_insert(None);
        *e = worst_health([*e, h]);
    };
    for f in &facts.fans {
        add(0, &f.name, f.health);
    }
    for t in &facts.temperatures {
        add(1, &t.name, t.health);
    }
    for p in &facts.power_supplies {
        add(2, &p.name, p.health);
    }
    for d in &facts.disks {
        add(3, d.name.as_deref().unwrap_or(&d.id), d.health);
    }
    for s in sensors {
        let kind = match s.kind {
            SensorKind::Fan => 0,
            SensorKind::Temperature => 1,
            SensorKind::PowerSupply | SensorKind::Power => 2,
            SensorKind::Drive => 3,
            SensorKind::Voltage => 4,
            SensorKind::Current => 5,
            SensorKind::Other => continue,
        };
        add(kind, &s.name, s.health);
    }
    let rank = |h: Health| match h {
        Health::Critical => 0,
        Health::Warning => 1,
        Health::Ok => 2,
    };
    let mut bad: Vec<(Health, usize, String)> = parts
        .into_iter()
        .filter_map(|((kind, name), h)| Some((unhealthy(h)?, kind, name)))
        .collect();
    bad.sort_by_key(|b| (rank(b.0), b.1));
    let Some((_, worst_kind, _)) = bad.first() else {
        return HardwareCondition {
            healthy: true,
            reason: "Healthy".into(),
            message:
                "no fan, temperature, power supply, drive, voltage or current reports a problem"
                    .into(),
        };
    };
    let message = bad
        .iter()
        .map(|(h, kind, name)| {
            format!("{} {name} is {}", CONDITION_KINDS[*kind].0, health_word(*h))
        })
        .collect::<Vec<_>>()
        .join("; ");
    HardwareCondition {
        healthy: false,
        reason: CONDITION_KINDS[*worst_kind].1.into(),
        message: cut(&message),
    }
}

/// The strategic merge patch of the Node's status that sets `HardwareHealthy` to `wanted`,
/// or `None` when the Node's condition already reads so (status, reason and message): the
/// condition is written only on change. `now` is an RFC 3339 time.
pub fn hardware_condition_patch(
    current: Option<&k8s_openapi::api::core::v1::NodeCondition>,
    wanted: &HardwareCondition,
    now: &str,
) -> Option<Value> {
    let status = if wanted.healthy { "True" } else { "False" };
    if let Some(c) = current
        && c.status == status
        && c.reason.as_deref() == Some(wanted.reason.as_str())
        && c.message.as_deref() == Some(wanted.message.as_str())
    {
        return None;
    }
    let transition = match current {
        Some(c) if c.status == status => c
            .last_transition_time
            .as_ref()
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| json!(now)),
        _ => json!(now),
    };
    Some(json!({"status": {"conditions": [{
        "type": HARDWARE_HEALTHY,
        "status": status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastTransitionTime": transition,
        "lastHeartbeatTime": now,
    }]}}))
}

fn parts(list: &[ingot_bmc::Component]) -> Vec<Part> {
    list.iter().map(|c| (c.name.clone(), c.health)).collect()
}

fn cut(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - 3;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &message[..end])
}

/// The fingerprints stored on the Node.
pub fn stored_fingerprints(annotations: &BTreeMap<String, String>) -> BTreeSet<String> {
    annotations
        .get(READINGS_ANNOTATION)
        .map(|v| {
            v.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The readings not emitted yet (their fingerprint is not stored), and the value to store now:
/// the fingerprints of all current readings (a reading that went away and comes back is new).
pub fn fresh_readings<'a>(
    readings: &'a [Reading],
    stored: &BTreeSet<String>,
) -> (Vec<&'a Reading>, String) {
    let fresh = readings
        .iter()
        .filter(|r| !stored.contains(&r.fingerprint()))
        .collect();
    let now: BTreeSet<String> = readings.iter().map(Reading::fingerprint).collect();
    (fresh, now.into_iter().collect::<Vec<_>>().join(","))
}

/// A stable fingerprint of an event-log entry (its id and time stamp).
pub fn entry_fingerprint(entry: &LogEntry) -> String {
    format!("{:016x}", fnv1a(&[entry.dedup_key().as_bytes()]))
}

/// The entries after the cursor (oldest first; at most [`MAX_LOG_EVENTS_PER_CYCLE`], the newest)
/// and the new cursor. A cursor not found in the log (never read, or the log was cleared) makes
/// every entry new. An empty log keeps the cursor.
pub fn new_log_entries<'a>(
    entries: &'a [LogEntry],
    cursor: Option<&str>,
) -> (&'a [LogEntry], Option<String>) {
    let Some(last) = entries.last() else {
        return (&[], cursor.map(str::to_owned));
    };
    let start = cursor
        .and_then(|c| entries.iter().rposition(|e| entry_fingerprint(e) == c))
        .map_or(0, |i| i + 1);
    let fresh = &entries[start..];
    let fresh = &fresh[fresh.len().saturating_sub(MAX_LOG_EVENTS_PER_CYCLE)..];
    (fresh, Some(entry_fingerprint(last)))
}

/// An event-log entry as an Event: (message, warning).
pub fn log_entry_event(entry: &LogEntry) -> (String, bool) {
    let severity = entry.severity.as_deref().unwrap_or("");
    let warning = matches!(severity, "Warning" | "Critical");
    let mut details = Vec::new();
    if !severity.is_empty() {
        details.push(format!("severity {severity}"));
    }
    if let Some(created) = &entry.created {
        details.push(format!("created {created}"));
    }
    details.push(format!("entry {}", entry.id));
    (
        cut(&format!(
            "EventLog: {} ({})",
            entry.message,
            details.join(", ")
        )),
        warning,
    )
}

/// `spec.events.pollingInterval` as a Go duration (`1h`, `30m`, `1h30m`, `2.5s`, `500ms`...),
/// at least one second.
pub fn polling_interval(value: &str) -> Result<Duration, String> {
    let invalid = |why: &str| format!("pollingInterval {value:?} {why}");
    let s = value.trim();
    if s.is_empty() {
        return Err(invalid("is empty"));
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(invalid("is not a Go duration such as 1h or 30m"));
        }
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| invalid("is not a Go duration such as 1h or 30m"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(invalid("lacks a unit (ns, us, ms, s, m, h)")),
            _ => return Err(invalid("has an unknown unit")),
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    if !total.is_finite() || total > 1e9 {
        return Err(invalid("is too long"));
    }
    if total < 1.0 {
        return Err(invalid("is shorter than 1s"));
    }
    Ok(Duration::from_secs_f64(total))
}

fn count_prefix(n: usize, what: String) -> String {
    format!("{n}x {what}")
}

/// Groups equal descriptions, in first-seen order: `2x A, 1x B`; `None` once the result would
/// be longer than [`MAX_FACT_BYTES`] (the groups stop growing there, however many items come).
fn grouped(items: impl IntoIterator<Item = String>) -> Option<String> {
    let mut order: Vec<(String, usize)> = Vec::new();
    // What the groups take at least: each description, and ", " between them.
    let mut length = 0usize;
    for item in items {
        match order.iter_mut().find(|(d, _)| *d == item) {
            Some((_, n)) => *n += 1,
            None => {
                length = length.saturating_add(item.len() + 2);
                if length > MAX_FACT_BYTES {
                    return None;
                }
                order.push((item, 1));
            }
        }
    }
    let joined = order
        .into_iter()
        .map(|(d, n)| count_prefix(n, d))
        .collect::<Vec<_>>()
        .join(", ");
    (joined.len() <= MAX_FACT_BYTES).then_some(joined)
}

/// Joins the items with `,`; `None` once the result would be longer than [`MAX_FACT_BYTES`].
fn joined_within_cap<'a>(items: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut out = String::new();
    for item in items {
        if out.len() + 1 + item.len() > MAX_FACT_BYTES {
            return None;
        }
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(item);
    }
    Some(out)
}

fn gib(mib: u64) -> String {
    let g = mib as f64 / 1024.0;
    format!("{}GiB", go_float((g * 10.0).round() / 10.0))
}

fn bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KB", "MB", "GB", "TB", "PB"];
    let (mut v, mut i) = (b as f64, 0);
    while v >= 1000.0 && i < UNITS.len() - 1 {
        v /= 1000.0;
        i += 1;
    }
    format!("{}{}", go_float((v * 10.0).round() / 10.0), UNITS[i])
}

/// The fact annotations these facts give (a fact the BMC does not report is absent), and the
/// facts left out because the BMC's strings make them longer than [`MAX_FACT_BYTES`].
pub fn fact_annotations(facts: &Facts) -> (BTreeMap<&'static str, String>, Vec<FactTooLong>) {
    let trimmed = |v: &Option<String>| {
        let v = v.as_deref().map(str::trim).filter(|v| !v.is_empty())?;
        Some((v.len() <= MAX_FACT_BYTES).then(|| v.to_owned()))
    };
    // Each fact: `None` when the BMC does not report it, `Some(None)` when it is too long.
    let reported: [(&'static str, &'static str, Option<Option<String>>); 6] = [
        (CPU_ANNOTATION, "the processors' models", cpu_fact(facts)),
        (MEMORY_ANNOTATION, "the memory modules", memory_fact(facts)),
        (
            BIOS_VERSION_ANNOTATION,
            "the BIOS version",
            trimmed(&facts.bios_version),
        ),
        (
            BMC_FIRMWARE_ANNOTATION,
            "the BMC firmware version",
            trimmed(&facts.bmc_firmware_version),
        ),
        (
            NIC_MACS_ANNOTATION,
            "the network interfaces' MAC addresses",
            macs_fact(facts),
        ),
        (
            DISKS_ANNOTATION,
            "the disks' models and sizes",
            disks_fact(facts),
        ),
    ];
    let mut out = BTreeMap::new();
    let mut too_long = Vec::new();
    for (annotation, field, value) in reported {
        match value {
            None => {}
            Some(Some(v)) => {
                out.insert(annotation, v);
            }
            Some(None) => too_long.push(FactTooLong { annotation, field }),
        }
    }
    if let Some(h) = overall_health(facts) {
        out.insert(HEALTH_ANNOTATION, health_word(h).to_owned());
    }
    (out, too_long)
}

/// The processors, grouped by model and cores/threads.
fn cpu_fact(facts: &Facts) -> Option<Option<String>> {
    if facts.cpus.is_empty() {
        return None;
    }
    Some(grouped(facts.cpus.iter().map(|c| {
        let model = c.model.as_deref().unwrap_or("CPU");
        let model = bounded(model);
        match (c.cores, c.threads) {
            (Some(cores), Some(threads)) => format!("{model} ({cores}C/{threads}T)"),
            (Some(cores), None) => format!("{model} ({cores}C)"),
            _ => model.to_owned(),
        }
    })))
}

/// The total memory (as reported, else the modules' sum) and the modules grouped by size.
fn memory_fact(facts: &Facts) -> Option<Option<String>> {
    let dimm_total: u64 = facts
        .memory
        .iter()
        .filter_map(|m| m.capacity_mib)
        .fold(0, u64::saturating_add);
    let total = facts
        .total_memory_gib
        .filter(|g| *g > 0.0)
        .map(|g| format!("{}GiB", go_float((g * 10.0).round() / 10.0)))
        .or_else(|| (dimm_total > 0).then(|| gib(dimm_total)))?;
    let memory =
        grouped(facts.memory.iter().filter_map(|m| m.capacity_mib.map(gib))).map(|dimms| {
            if dimms.is_empty() {
                total
            } else {
                format!("{total} ({dimms})")
            }
        });
    Some(memory.filter(|m| m.len() <= MAX_FACT_BYTES))
}

/// The network interfaces' MAC addresses.
fn macs_fact(facts: &Facts) -> Option<Option<String>> {
    let mut macs = facts
        .nics
        .iter()
        .filter_map(|n| n.mac_address.as_deref())
        .filter(|m| !m.is_empty())
        .peekable();
    macs.peek()?;
    Some(joined_within_cap(macs))
}

/// The disks (size, media type, model), grouped.
fn disks_fact(facts: &Facts) -> Option<Option<String>> {
    if facts.disks.is_empty() {
        return None;
    }
    let disks = grouped(facts.disks.iter().map(|d| {
        [
            d.capacity_bytes.map(bytes),
            d.media_type.as_deref().map(bounded).map(str::to_owned),
            d.model
                .as_deref()
                .or(d.name.as_deref())
                .map(bounded)
                .map(str::to_owned),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ")
    }));
    match disks {
        Some(d) if d.is_empty() => None,
        other => Some(other),
    }
}

/// A BMC string as long as a fact may be, plus a character: a longer one is not copied whole
/// (its fact will not fit either, and is left out).
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_FACT_BYTES {
        return s;
    }
    let mut end = MAX_FACT_BYTES + 1;
    while !s.is_char_boundary(end) {
        end += 1;
    }
    &s[..end]
}

/// The worst health the BMC reports anywhere.
pub fn overall_health(facts: &Facts) -> Option<Health> {
    let s = &facts.health;
    let summary = [
        s.system,
        s.chassis,
        s.processors,
        s.memory,
        s.storage,
        s.network,
    ];
    let parts = facts
        .fans
        .iter()
        .chain(&facts.power_supplies)
        .chain(&facts.network_adapters)
        .chain(&facts.storage_controllers)
        .chain(&facts.pcie_devices)
        .map(|c| c.health)
        .chain(facts.temperatures.iter().map(|t| t.health))
        .chain(facts.disks.iter().map(|d| d.health))
        .chain(facts.cpus.iter().map(|c| c.health))
        .chain(facts.memory.iter().map(|m| m.health));
    worst_health(summary.into_iter().chain(parts))
}

/// A merge patch of the annotations that differ (fact annotations ingot owns and no longer
/// wants are removed), or `None` when the Node already carries exactly these.
pub fn annotation_patch(
    current: &BTreeMap<String, String>,
    wanted: &BTreeMap<&'static str, String>,
    owned: &[&str],
) -> Option<Map<String, Value>> {
    let mut changed: Map<String, Value> = wanted
        .iter()
        .filter(|(k, v)| current.get(**k) != Some(*v))
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    for key in owned {
        if !wanted.contains_key(key) && current.contains_key(*key) {
            changed.insert((*key).to_owned(), Value::Null);
        }
    }
    (!changed.is_empty()).then_some(changed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use ingot_bmc::{Component, Cpu, Disk, MemoryModule, Nic, Temperature};

    fn temp(name: &str, c: f64) -> Temperature {
        Temperature {
            name: name.into(),
            reading_celsius: Some(c),
            health: Some(Health::Ok),
        }
    }

    fn part(name: &str, h: Health) -> Component {
        Component {
            name: name.into(),
            health: Some(h),
            reading: None,
        }
    }

    fn sensor(name: &str, kind: SensorKind, h: Option<Health>) -> Sensor {
        Sensor {
            name: name.into(),
            kind,
            reading: None,
            unit: None,
            thresholds: Default::default(),
            health: h,
            state: Default::default(),
            source: "x".into(),
        }
    }

    #[test]
    fn hardware_healthy_names_the_worst_kind_and_every_part() {
        let mut facts = Facts {
            fans: vec![part("Fan1", Health::Ok)],
            temperatures: vec![temp("Inlet", 20.0)],
            ..Facts::default()
        };
        let ok = hardware_condition(&facts, &[sensor("12V", SensorKind::Voltage, None)]);
        assert!(ok.healthy);
        assert_eq!(ok.reason, "Healthy");

        // A warning temperature from the sensors, a critical power supply from the inventory,
        // the same fan read both ways (critical once), a drive bay, an "other" sensor ignored.
        facts.power_supplies = vec![part("PSU 2", Health::Critical)];
        let sensors = [
            sensor("CPU1 Temp", SensorKind::Temperature, Some(Health::Warning)),
            sensor("Fan1", SensorKind::Fan, Some(Health::Critical)),
            sensor("Bay 3", SensorKind::Drive, Some(Health::Warning)),
            sensor("Watchdog", SensorKind::Other, Some(Health::Critical)),
        ];
        let c = hardware_condition(&facts, &sensors);
        assert!(!c.healthy);
        assert_eq!(
            c.reason, "FanUnhealthy",
            "critical first, fans before power supplies"
        );
        assert_eq!(
            c.message,
            "fan Fan1 is Critical; power supply PSU 2 is Critical; \
             temperature CPU1 Temp is Warning; drive Bay 3 is Warning"
        );
        let only_psu = hardware_condition(
            &Facts {
                power_supplies: vec![part("PSU 2", Health::Warning)],
                ..Facts::default()
            },
            &[],
        );
        assert_eq!(only_psu.reason, "PowerSupplyUnhealthy");

        // Written only on change; the transition time kept while the status stays.
        let patch = hardware_condition_patch(None, &c, "2026-01-01T00:00:00Z").unwrap();
        let cond = &patch["status"]["conditions"][0];
        assert_eq!(cond["type"], "HardwareHealthy");
        assert_eq!(cond["status"], "False");
        assert_eq!(cond["reason"], "FanUnhealthy");
        let current: k8s_openapi::api::core::v1::NodeCondition =
            serde_json::from_value(cond.clone()).unwrap();
        assert_eq!(
            hardware_condition_patch(Some(&current), &c, "2026-01-01T01:00:00Z"),
            None
        );
        let worse = HardwareCondition {
            message: "fan Fan1 is Critical".into(),
            ..c.clone()
        };
        let p = hardware_condition_patch(Some(&current), &worse, "2026-01-01T01:00:00Z").unwrap();
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
        let p = hardware_condition_patch(Some(&current), &ok, "2026-01-01T02:00:00Z").unwrap();
        assert_eq!(p["status"]["conditions"][0]["status"], "True");
        assert_eq!(
            p["status"]["conditions"][0]["lastTransitionTime"],
            "2026-01-01T02:00:00Z"
        );
    }

    #[test]
    fn seeders_messages_to_the_letter() {
        let facts = Facts {
            fans: vec![
                part("Fan1", Health::Ok),
                part("Fan2", Health::Critical),
                Component {
                    name: "Fan3".into(),
                    health: None,
                    reading: Some(3000.0),
                },
            ],
            temperatures: vec![temp("CPU1 Temp", 40.0), temp("Inlet Temp", 23.5)],
            disks: vec![
                Disk {
                    id: "0".into(),
                    name: Some("Physical Disk 0".into()),
                    health: Some(Health::Warning),
                    ..Disk::default()
                },
                Disk {
                    id: "1".into(),
                    health: Some(Health::Critical),
                    ..Disk::default()
                },
            ],
            power_supplies: vec![part("PS1", Health::Ok), part("PS2", Health::Warning)],
            network_adapters: vec![part("NIC.Slot.1", Health::Critical)],
            storage_controllers: vec![part("RAID", Health::Warning)],
            pcie_devices: vec![part("GPU", Health::Critical)],
            cpus: vec![Cpu {
                id: "CPU1".into(),
                health: Some(Health::Warning),
                ..Cpu::default()
            }],
            memory: vec![MemoryModule {
                id: "DIMM1".into(),
                name: Some("DIMM A1".into()),
                health: Some(Health::Critical),
                ..MemoryModule::default()
            }],
            ..Facts::default()
        };
        let r = readings(&facts);
        let messages: Vec<&str> = r.iter().map(|r| r.message.as_str()).collect();
        assert_eq!(
            messages,
            [
                "fan Fan2 is Critical",
                "ThermalHealth: CPU1 Temp reported temp: 40C,Inlet Temp reported temp: 23.5C",
                "DriveHealth: Physical Disk 0 is Warning,1 is Critical",
                "PowerSupplyHealth: PS2 is Warning",
                "NetworkAdapterHealth: NIC.Slot.1 is Critical",
                "StorageHealth: RAID is Warning",
                "PCIDeviceHealth: GPU is Critical",
                "CPUHealth: CPU1 is Warning",
                "MemoryHealth: DIMM A1 is Critical",
            ]
        );
        // Normal for the temperatures, Warning for non-OK health only.
        let warnings: Vec<bool> = r.iter().map(|r| r.warning).collect();
        assert_eq!(
            warnings,
            [true, false, true, true, true, true, true, true, true]
        );
    }

    #[test]
    fn a_healthy_machine_says_only_its_temperatures_and_normal() {
        let facts = Facts {
            fans: vec![part("Fan1", Health::Ok)],
            temperatures: vec![temp("Ambient", 21.0)],
            power_supplies: vec![part("PS1", Health::Ok)],
            ..Facts::default()
        };
        let r = readings(&facts);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].message, "ThermalHealth: Ambient reported temp: 21C");
        assert!(!r[0].warning);
        assert!(readings(&Facts::default()).is_empty());
        // A temperature whose own health is not OK makes the reading a Warning.
        let hot = Facts {
            temperatures: vec![Temperature {
                health: Some(Health::Critical),
                ..temp("Ambient", 91.0)
            }],
            ..Facts::default()
        };
        assert!(readings(&hot)[0].warning);
    }

    #[test]
    fn an_unchanged_reading_is_not_emitted_again() {
        let facts = |c: f64, fan: Health| Facts {
            fans: vec![part("Fan1", fan)],
            temperatures: vec![temp("Ambient", c)],
            ..Facts::default()
        };
        let first = readings(&facts(21.0, Health::Ok));
        let (fresh, stored) = fresh_readings(&first, &BTreeSet::new());
        assert_eq!(fresh.len(), 1);
        let annotations = BTreeMap::from([(READINGS_ANNOTATION.to_owned(), stored.clone())]);
        let stored_set = stored_fingerprints(&annotations);
        // The same reading again: nothing.
        let again = readings(&facts(21.0, Health::Ok));
        let (fresh, stored_again) = fresh_readings(&again, &stored_set);
        assert!(fresh.is_empty());
        assert_eq!(stored_again, stored);
        // The fan goes Critical: only that is new.
        let fan = readings(&facts(21.0, Health::Critical));
        let (fresh, stored_fan) = fresh_readings(&fan, &stored_set);
        assert_eq!(
            fresh.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
            ["fan Fan1 is Critical"]
        );
        assert!(fresh[0].warning);
        // A changed temperature is new; the fan, still Critical, is not.
        let set = stored_fingerprints(&BTreeMap::from([(
            READINGS_ANNOTATION.to_owned(),
            stored_fan,
        )]));
        let warmer = readings(&facts(22.0, Health::Critical));
        let (fresh, _) = fresh_readings(&warmer, &set);
        assert_eq!(
            fresh.iter().map(|r| r.message.as_str()).collect::<Vec<_>>(),
            ["ThermalHealth: Ambient reported temp: 22C"]
        );
    }

    fn entry(id: &str, created: &str, severity: &str) -> LogEntry {
        LogEntry {
            id: id.into(),
            log: "sel".into(),
            created: Some(created.into()),
            severity: Some(severity.into()),
            message: format!("message {id}"),
            message_id: None,
            entry_type: Some("SEL".into()),
        }
    }

    #[test]
    fn the_event_log_cursor_emits_each_entry_once() {
        let log = vec![
            entry("sel:0001", "2026-11-25T10:00:00Z", "OK"),
            entry("sel:0002", "2026-11-25T10:01:00Z", "Warning"),
        ];
        // Never read: everything is new.
        let (fresh, cursor) = new_log_entries(&log, None);
        assert_eq!(fresh.len(), 2);
        let cursor = cursor.unwrap();
        assert_eq!(cursor, entry_fingerprint(&log[1]));
        // Read again (or after a restart, the cursor being on the Node): nothing.
        let (fresh, again) = new_log_entries(&log, Some(&cursor));
        assert!(fresh.is_empty());
        assert_eq!(again.as_deref(), Some(cursor.as_str()));
        // One more entry: exactly that one.
        let mut grown = log.clone();
        grown.push(entry("sel:0003", "2026-11-25T10:02:00Z", "Critical"));
        let (fresh, next) = new_log_entries(&grown, Some(&cursor));
        assert_eq!(fresh, &grown[2..]);
        assert_eq!(next.unwrap(), entry_fingerprint(&grown[2]));
        // The log cleared and a record id reused with a new time: new.
        let cleared = vec![entry("sel:0001", "2026-11-25T11:00:00Z", "OK")];
        let (fresh, _) = new_log_entries(&cleared, Some(&cursor));
        assert_eq!(fresh.len(), 1);
        // An empty log keeps the cursor.
        assert_eq!(
            new_log_entries(&[], Some(&cursor)).1.as_deref(),
            Some(cursor.as_str())
        );
        // A long log read for the first time: only the newest entries.
        let long: Vec<LogEntry> = (0..50)
            .map(|i| entry(&format!("sel:{i:04x}"), "2026-11-25T10:00:00Z", "OK"))
            .collect();
        let (fresh, _) = new_log_entries(&long, None);
        assert_eq!(fresh.len(), MAX_LOG_EVENTS_PER_CYCLE);
        assert_eq!(fresh.last(), long.last());
    }

    #[test]
    fn log_entries_are_warning_only_when_severe() {
        let (message, warning) =
            log_entry_event(&entry("sel:0002", "2026-11-25T10:01:00Z", "Warning"));
        assert_eq!(
            message,
            "EventLog: message sel:0002 (severity Warning, created 2026-11-25T10:01:00Z, entry sel:0002)"
        );
        assert!(warning);
        assert!(log_entry_event(&entry("sel:0003", "t", "Critical")).1);
        assert!(!log_entry_event(&entry("sel:0001", "t", "OK")).1);
        let long = LogEntry {
            message: "x".repeat(5000),
            ..entry("a", "t", "OK")
        };
        assert!(log_entry_event(&long).0.len() <= 1024);
    }

    #[test]
    fn polling_intervals_are_go_durations() {
        let ok = |s: &str| polling_interval(s).unwrap();
        assert_eq!(ok("1h"), Duration::from_secs(3600));
        assert_eq!(ok("2s"), Duration::from_secs(2));
        assert_eq!(ok("1h30m"), Duration::from_secs(5400));
        assert_eq!(ok("1.5s"), Duration::from_millis(1500));
        assert_eq!(ok("1500ms"), Duration::from_millis(1500));
        for bad in ["", "1", "h", "1d", "abc", "-1h", "0s", "500ms", "1h x"] {
            let e = polling_interval(bad).unwrap_err();
            assert!(e.starts_with("pollingInterval"), "{bad}: {e}");
        }
    }

    #[test]
    fn fact_annotations_are_compact_and_patched_when_changed() {
        let facts = Facts {
            bios_version: Some(" 2.19.1 ".into()),
            bmc_firmware_version: Some("7.00.00".into()),
            cpus: vec![
                Cpu {
                    id: "CPU1".into(),
                    model: Some("Intel Xeon Gold 6230".into()),
                    cores: Some(20),
                    threads: Some(40),
                    ..Cpu::default()
                };
                2
            ],
            total_memory_gib: Some(384.0),
            memory: vec![
                MemoryModule {
                    id: "d".into(),
                    capacity_mib: Some(32768),
                    ..MemoryModule::default()
                };
                12
            ],
            nics: vec![
                Nic {
                    id: "1".into(),
                    mac_address: Some("52:54:00:aa:bb:01".into()),
                    ..Nic::default()
                },
                Nic {
                    id: "2".into(),
                    mac_address: Some("52:54:00:aa:bb:02".into()),
                    ..Nic::default()
                },
            ],
            disks: vec![
                Disk {
                    id: "0".into(),
                    model: Some("PM883".into()),
                    capacity_bytes: Some(960_197_124_096),
                    media_type: Some("SSD".into()),
                    ..Disk::default()
                },
                Disk {
                    id: "1".into(),
                    model: Some("PM883".into()),
                    capacity_bytes: Some(960_197_124_096),
                    media_type: Some("SSD".into()),
                    ..Disk::default()
                },
                Disk {
                    id: "2".into(),
                    capacity_bytes: Some(4_000_787_030_016),
                    media_type: Some("HDD".into()),
                    ..Disk::default()
                },
            ],
            fans: vec![part("Fan1", Health::Warning)],
            ..Facts::default()
        };
        let (wanted, too_long) = fact_annotations(&facts);
        assert_eq!(too_long, vec![]);
        let w = |k: &str| wanted.get(k).map(String::as_str);
        assert_eq!(w(CPU_ANNOTATION), Some("2x Intel Xeon Gold 6230 (20C/40T)"));
        assert_eq!(w(MEMORY_ANNOTATION), Some("384GiB (12x 32GiB)"));
        assert_eq!(w(BIOS_VERSION_ANNOTATION), Some("2.19.1"));
        assert_eq!(w(BMC_FIRMWARE_ANNOTATION), Some("7.00.00"));
        assert_eq!(
            w(NIC_MACS_ANNOTATION),
            Some("52:54:00:aa:bb:01,52:54:00:aa:bb:02")
        );
        assert_eq!(
            w(DISKS_ANNOTATION),
            Some("2x 960.2GB SSD PM883, 1x 4TB HDD")
        );
        assert_eq!(w(HEALTH_ANNOTATION), Some("Warning"));

        // Only what differs is patched; a fact no longer reported is removed; unrelated
        // annotations are left alone.
        let mut current: BTreeMap<String, String> = wanted
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        current.insert("other.io/x".into(), "y".into());
        assert_eq!(annotation_patch(&current, &wanted, &FACT_ANNOTATIONS), None);
        let mut upgraded = facts.clone();
        upgraded.bios_version = Some("2.20.0".into());
        upgraded.disks.clear();
        let patch =
            annotation_patch(&current, &fact_annotations(&upgraded).0, &FACT_ANNOTATIONS).unwrap();
        assert_eq!(
            Value::Object(patch),
            json!({BIOS_VERSION_ANNOTATION: "2.20.0", DISKS_ANNOTATION: null})
        );
        assert!(fact_annotations(&Facts::default()).0.is_empty());
    }

    #[test]
    fn a_fact_longer_than_the_cap_is_left_out_with_an_error_naming_it() {
        let nic = |i: usize| Nic {
            id: i.to_string(),
            mac_address: Some(format!("52:54:00:00:{:02x}:{:02x}", i / 256, i % 256)),
            ..Nic::default()
        };
        let facts = Facts {
            // A firmware that answers a megabyte where a version belongs.
            bios_version: Some("x".repeat(1 << 20)),
            bmc_firmware_version: Some("7.00.00".into()),
            // 10,000 NICs: 18 bytes each joined would be 180 KB.
            nics: (0..10_000).map(nic).collect(),
            disks: (0..5_000)
                .map(|i| Disk {
                    id: i.to_string(),
                    model: Some(format!("model-{i}")),
                    ..Disk::default()
                })
                .collect(),
            cpus: vec![Cpu {
                id: "CPU1".into(),
                model: Some("y".repeat(MAX_FACT_BYTES + 1)),
                ..Cpu::default()
            }],
            ..Facts::default()
        };
        let (wanted, too_long) = fact_annotations(&facts);
        let left_out: Vec<&str> = too_long.iter().map(|t| t.annotation).collect();
        assert_eq!(
            left_out,
            vec![
                CPU_ANNOTATION,
                BIOS_VERSION_ANNOTATION,
                NIC_MACS_ANNOTATION,
                DISKS_ANNOTATION
            ]
        );
        assert_eq!(
            wanted.get(BMC_FIRMWARE_ANNOTATION).map(String::as_str),
            Some("7.00.00")
        );
        assert!(wanted.values().all(|v| v.len() <= MAX_FACT_BYTES));
        for t in &too_long {
            assert!(!wanted.contains_key(t.annotation));
        }
        assert_eq!(
            too_long[1].to_string(),
            "annotation seeder.ingot.dev/bios-version is left off the Node: the BIOS version reported by the BMC would take more than 1024 bytes; check the BMC's inventory (its firmware may report garbage)"
        );
        // Right at the cap a fact is still written.
        let at_cap = Facts {
            bios_version: Some("v".repeat(MAX_FACT_BYTES)),
            ..Facts::default()
        };
        let (wanted, too_long) = fact_annotations(&at_cap);
        assert!(too_long.is_empty());
        assert_eq!(wanted[BIOS_VERSION_ANNOTATION].len(), MAX_FACT_BYTES);
    }
}
