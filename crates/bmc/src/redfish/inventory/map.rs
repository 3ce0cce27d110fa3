//! The pure half of the inventory: the documents a BMC served, mapped to ingot's inventory
//! types. No I/O here; the tests below run it on documents recorded from the emulator's vendor
//! profiles and from sushy-tools (`testdata/`).

use crate::redfish::Vendor;
use crate::redfish::json::{self, health, string, uint};
use crate::types::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The documents an inventory is made of, as the BMC served them (members expanded).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct Documents {
    pub system: Value,
    pub processors: Vec<Value>,
    pub memory: Vec<Value>,
    pub ethernet_interfaces: Vec<Value>,
    pub storage: Vec<StorageParts>,
    #[serde(rename = "PCIeDevices")]
    pub pcie_devices: Vec<Value>,
    pub chassis_sensors: Vec<ChassisParts>,
    /// Read only when no drive of `Storage` was.
    pub simple_storage: Vec<Value>,
    /// The system's first chassis.
    pub chassis: Option<Value>,
    /// The system's first manager.
    pub manager: Option<Value>,
}

/// A storage controller and its drives.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct StorageParts {
    pub controller: Value,
    pub drives: Vec<Value>,
}

/// A chassis' `Thermal` and `Power` resources and its network adapters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub(crate) struct ChassisParts {
    pub thermal: Option<Value>,
    pub power: Option<Value>,
    pub network_adapters: Vec<Value>,
}

/// The inventory the documents describe.
pub(crate) fn inventory(docs: &Documents, vendor: Vendor) -> Inventory {
    let mut inv = identity(&docs.system, vendor);
    inv.cpus = docs.processors.iter().filter_map(cpu).collect();
    inv.memory = docs.memory.iter().filter_map(memory_module).collect();
    if inv.health.memory.is_none() {
        inv.health.memory = worst_health(inv.memory.iter().map(|m| m.health));
    }
    if inv.health.processors.is_none() {
        inv.health.processors = worst_health(inv.cpus.iter().map(|m| m.health));
    }
    inv.nics = docs.ethernet_interfaces.iter().map(nic).collect();
    inv.health.network = worst_health(inv.nics.iter().map(|n| n.health));
    for s in &docs.storage {
        inv.disks.extend(s.drives.iter().map(drive));
        inv.health.storage = worst_health([inv.health.storage, health(&s.controller, true)]);
        inv.storage_controllers.push(component(&s.controller));
    }
    inv.pcie_devices = docs.pcie_devices.iter().map(component).collect();
    for parts in &docs.chassis_sensors {
        sensors(parts, &mut inv);
    }
    if inv.disks.is_empty() {
        inv.disks = docs.simple_storage.iter().flat_map(simple_disks).collect();
    }
    if inv.health.storage.is_none() {
        inv.health.storage = worst_health(inv.disks.iter().map(|d| d.health));
    }
    if let Some(ch) = &docs.chassis {
        chassis_identity(ch, &mut inv);
    }
    if let Some(m) = &docs.manager {
        inv.bmc_firmware_version = string(m, "FirmwareVersion");
        inv.bmc_model = string(m, "Model");
        inv.health.bmc = health(m, false);
    }
    inv
}

/// Identity, power state and the summaries' health from the computer system.
fn identity(system: &Value, vendor: Vendor) -> Inventory {
    let mut inv = Inventory {
        manufacturer: string(system, "Manufacturer"),
        model: string(system, "Model"),
        serial_number: string(system, "SerialNumber"),
        sku: string(system, "SKU"),
        uuid: string(system, "UUID"),
        bios_version: string(system, "BiosVersion"),
        vendor: vendor.to_string(),
        power_state: string(system, "PowerState")
            .map(|s| PowerState::from_redfish(&s))
            .unwrap_or(PowerState::Unknown),
        ..Default::default()
    };
    inv.health.system = health(system, true);
    inv.health.processors = system
        .pointer("/ProcessorSummary/Status")
        .and_then(|s| json::status_health(s, true));
    inv.health.memory = system
        .pointer("/MemorySummary/Status")
        .and_then(|s| json::status_health(s, true));
    inv.total_memory_gib = system
        .pointer("/MemorySummary/TotalSystemMemoryGiB")
        .and_then(Value::as_f64);
    inv
}

/// A processor, if it is a CPU (GPUs, FPGAs and accelerators are listed as processors too).
fn cpu(p: &Value) -> Option<Cpu> {
    if string(p, "ProcessorType").is_some_and(|t| t != "CPU") {
        return None;
    }
    Some(Cpu {
        id: string(p, "Id").unwrap_or_default(),
        name: string(p, "Name"),
        manufacturer: string(p, "Manufacturer"),
        model: string(p, "Model"),
        cores: uint(p, "TotalCores").map(|v| v as u32),
        threads: uint(p, "TotalThreads").map(|v| v as u32),
        max_speed_mhz: uint(p, "MaxSpeedMHz").map(|v| v as u32),
        health: health(p, false),
    })
}

/// A memory module, if its slot is not empty (`Status.State` `Absent`).
fn memory_module(m: &Value) -> Option<MemoryModule> {
    if m.pointer("/Status/State").and_then(Value::as_str) == Some("Absent") {
        return None;
    }
    Some(MemoryModule {
        id: string(m, "Id").unwrap_or_default(),
        name: string(m, "Name"),
        capacity_mib: uint(m, "CapacityMiB"),
        manufacturer: string(m, "Manufacturer"),
        part_number: string(m, "PartNumber").map(|s| s.trim().to_owned()),
        serial_number: string(m, "SerialNumber"),
        speed_mhz: uint(m, "OperatingSpeedMhz").map(|v| v as u32),
        health: health(m, false),
    })
}

/// An Ethernet interface: its MAC (else the permanent one), normalized.
fn nic(n: &Value) -> Nic {
    let mac = string(n, "MACAddress").or_else(|| string(n, "PermanentMACAddress"));
    Nic {
        id: string(n, "Id").unwrap_or_default(),
        mac_address: mac.map(|m| normalize_mac(&m)),
        speed_mbps: uint(n, "SpeedMbps"),
        link_up: string(n, "LinkStatus").map(|s| s == "LinkUp"),
        health: health(n, false),
    }
}

/// A drive of a storage controller.
fn drive(d: &Value) -> Disk {
    Disk {
        id: string(d, "Id").unwrap_or_default(),
        name: string(d, "Name"),
        model: string(d, "Model"),
        serial_number: string(d, "SerialNumber"),
        capacity_bytes: uint(d, "CapacityBytes"),
        media_type: string(d, "MediaType"),
        protocol: string(d, "Protocol"),
        health: health(d, false),
    }
}

/// The devices of a SimpleStorage controller, numbered within it.
fn simple_disks(s: &Value) -> Vec<Disk> {
    let controller = string(s, "Id").unwrap_or_default();
    s.get("Devices")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, d)| Disk {
            id: format!("{controller}/{i}"),
            name: string(d, "Name"),
            model: string(d, "Model").or_else(|| string(d, "Name")),
            serial_number: None,
            capacity_bytes: uint(d, "CapacityBytes"),
            media_type: None,
            protocol: None,
            health: health(d, false),
        })
        .collect()
}

/// Fans, temperatures, power supplies and network adapters of one chassis.
fn sensors(parts: &ChassisParts, inv: &mut Inventory) {
    if let Some(t) = &parts.thermal {
        inv.fans.extend(array(t, "Fans").map(|f| {
            Component {
                name: string(f, "Name")
                    .or_else(|| string(f, "FanName"))
                    .or_else(|| string(f, "MemberId"))
                    .unwrap_or_default(),
                health: health(f, false),
                reading: f.get("Reading").and_then(Value::as_f64),
            }
        }));
        inv.temperatures.extend(array(t, "Temperatures").map(|s| {
            Temperature {
                name: string(s, "Name")
                    .or_else(|| string(s, "MemberId"))
                    .unwrap_or_default(),
                reading_celsius: s.get("ReadingCelsius").and_then(Value::as_f64),
                health: health(s, false),
            }
        }));
    }
    if let Some(p) = &parts.power {
        inv.power_supplies
            .extend(array(p, "PowerSupplies").map(component));
    }
    inv.network_adapters
        .extend(parts.network_adapters.iter().map(component));
}

/// `ThermalSubsystem`'s fans (`Fan` resources) and `ThermalMetrics` in the shape of the
/// older `Thermal`: fans with their `Reading` (RPM, else percent) and temperatures with
/// their `ReadingCelsius` (named by `DeviceName`, else the sensor the reading comes from).
pub(crate) fn thermal_from_subsystem(fans: &[Value], metrics: Option<&Value>) -> Value {
    let fans: Vec<Value> = fans
        .iter()
        .map(|f| {
            let rpm = f.pointer("/SpeedPercent/SpeedRPM").and_then(Value::as_f64);
            let percent = f.pointer("/SpeedPercent/Reading").and_then(Value::as_f64);
            serde_json::json!({
                "Name": string(f, "Name").or_else(|| string(f, "Id")),
                "Reading": rpm.or(percent),
                "ReadingUnits": if rpm.is_some() { "RPM" } else { "Percent" },
                "Status": f.get("Status").cloned().unwrap_or(Value::Null),
            })
        })
        .collect();
    let temperatures: Vec<Value> = metrics
        .into_iter()
        .flat_map(|m| array(m, "TemperatureReadingsCelsius"))
        .map(|t| {
            let name = string(t, "DeviceName").or_else(|| {
                string(t, "DataSourceUri").and_then(|u| u.rsplit('/').next().map(str::to_owned))
            });
            serde_json::json!({"Name": name, "ReadingCelsius": t.get("Reading").cloned().unwrap_or(Value::Null)})
        })
        .collect();
    serde_json::json!({"Fans": fans, "Temperatures": temperatures})
}

/// The elements of an array property (none when it is missing or not an array).
fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

/// The chassis' health, and the identity fields the system left out.
fn chassis_identity(ch: &Value, inv: &mut Inventory) {
    inv.health.chassis = health(ch, true);
    inv.manufacturer = inv
        .manufacturer
        .take()
        .or_else(|| string(ch, "Manufacturer"));
    inv.model = inv.model.take().or_else(|| string(ch, "Model"));
    inv.serial_number = inv
        .serial_number
        .take()
        .or_else(|| string(ch, "SerialNumber"));
    inv.sku = inv.sku.take().or_else(|| string(ch, "SKU"));
}

/// A resource's `Name` (else `Id`) and health.
pub(crate) fn component(resource: &Value) -> Component {
    Component {
        name: string(resource, "Name")
            .or_else(|| string(resource, "Id"))
            .unwrap_or_default(),
        health: health(resource, false),
        reading: None,
    }
}

/// A MAC address in lower case with colons.
pub(crate) fn normalize_mac(mac: &str) -> String {
    mac.trim().to_ascii_lowercase().replace('-', ":")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::redfish::discovery::ServiceRoot;
    use serde_json::json;

    /// The inventory of a recording (`testdata/*.json`: the documents the client read, and the
    /// service root), with the vendor detected as the client detects it.
    fn recorded(text: &str) -> Inventory {
        let mut v: Value = serde_json::from_str(text).unwrap();
        let root = v.as_object_mut().unwrap().remove("ServiceRoot").unwrap();
        let docs: Documents = serde_json::from_value(v).unwrap();
        let manufacturer = string(&docs.system, "Manufacturer");
        let vendor = ServiceRoot::of(&root).vendor_with(manufacturer.as_deref());
        inventory(&docs, vendor)
    }

    /// What a recording of one of the emulator's vendor profiles holds.
    struct Profile {
        vendor: &'static str,
        manufacturer: &'static str,
        model: &'static str,
        serial: &'static str,
        sku: &'static str,
        bios: &'static str,
        cpu_ids: [&'static str; 2],
        cpu_model: &'static str,
        cores: u32,
        dimms: usize,
        dimm_mib: u64,
        total_gib: f64,
        nic_ids: &'static [&'static str],
        drives: usize,
        bmc_model: &'static str,
        bmc_firmware: &'static str,
    }

    fn check(inv: &Inventory, p: &Profile) {
        assert_eq!(inv.vendor, p.vendor);
        assert_eq!(inv.manufacturer.as_deref(), Some(p.manufacturer));
        assert_eq!(inv.model.as_deref(), Some(p.model));
        assert_eq!(inv.serial_number.as_deref(), Some(p.serial));
        assert_eq!(inv.sku.as_deref(), Some(p.sku));
        assert_eq!(inv.bios_version.as_deref(), Some(p.bios));
        assert_eq!(
            inv.uuid.as_deref(),
            Some("4c4c4544-0000-4000-8000-000000000000")
        );
        assert_eq!(inv.power_state, PowerState::On);
        let cpus: Vec<_> = inv.cpus.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(cpus, p.cpu_ids);
        for c in &inv.cpus {
            assert_eq!(c.model.as_deref(), Some(p.cpu_model));
            assert_eq!((c.cores, c.threads), (Some(p.cores), Some(p.cores * 2)));
            assert_eq!(c.max_speed_mhz, Some(3400));
            assert_eq!(c.health, Some(Health::Ok));
        }
        assert_eq!(inv.memory.len(), p.dimms);
        assert!(
            inv.memory
                .iter()
                .all(|m| m.capacity_mib == Some(p.dimm_mib))
        );
        assert_eq!(inv.memory[1].serial_number.as_deref(), Some("00000001"));
        assert_eq!(
            inv.memory[0].part_number.as_deref(),
            Some("36ASF4G72PZ-3G2E1")
        );
        assert_eq!(inv.total_memory_gib, Some(p.total_gib));
        let nics: Vec<_> = inv.nics.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(nics, p.nic_ids);
        for (i, n) in inv.nics.iter().enumerate() {
            let mac = format!("02:00:00:00:00:{i:02x}");
            assert_eq!(n.mac_address.as_deref(), Some(mac.as_str()));
            assert_eq!(n.link_up, Some(i == 0));
            assert_eq!(n.speed_mbps, Some(25000));
        }
        assert_eq!(inv.disks.len(), p.drives);
        for (i, d) in inv.disks.iter().enumerate() {
            assert_eq!(d.id, format!("Disk.Bay.{i}"));
            assert_eq!(d.model.as_deref(), Some("MZ7L3960HCJR-00A07"));
            assert_eq!(d.capacity_bytes, Some(960_197_124_096));
            assert_eq!(d.media_type.as_deref(), Some("SSD"));
            assert_eq!(d.protocol.as_deref(), Some("SATA"));
        }
        assert_eq!(inv.storage_controllers.len(), 1);
        assert_eq!(inv.storage_controllers[0].name, "Storage Controller");
        let fans: Vec<_> = inv
            .fans
            .iter()
            .map(|f| (f.name.as_str(), f.reading))
            .collect();
        assert_eq!(
            fans,
            [
                ("System Fan 1", Some(5600.0)),
                ("System Fan 2", Some(5600.0))
            ]
        );
        let temps: Vec<_> = inv
            .temperatures
            .iter()
            .map(|t| (t.name.as_str(), t.reading_celsius))
            .collect();
        assert_eq!(
            temps,
            [("Inlet Temp", Some(24.0)), ("CPU1 Temp", Some(47.5))]
        );
        assert_eq!(inv.bmc_model.as_deref(), Some(p.bmc_model));
        assert_eq!(inv.bmc_firmware_version.as_deref(), Some(p.bmc_firmware));
        let ok = Some(Health::Ok);
        let h = &inv.health;
        assert_eq!(
            [
                h.system,
                h.chassis,
                h.bmc,
                h.processors,
                h.memory,
                h.storage,
                h.network
            ],
            [ok; 7]
        );
    }

    #[test]
    fn a_dell_idrac_recording_maps_to_its_inventory() {
        let inv = recorded(include_str!("testdata/dell.json"));
        check(
            &inv,
            &Profile {
                vendor: "dell",
                manufacturer: "Dell Inc.",
                model: "PowerEdge R650",
                serial: "DL0000000",
                sku: "DL-00000",
                bios: "1.13.2",
                cpu_ids: ["CPU.Socket.1", "CPU.Socket.2"],
                cpu_model: "Intel(R) Xeon(R) Gold 6330 CPU @ 2.00GHz",
                cores: 28,
                dimms: 8,
                dimm_mib: 32768,
                total_gib: 256.0,
                nic_ids: &["NIC.Integrated.1-1-1", "NIC.Integrated.1-2-1"],
                drives: 2,
                bmc_model: "14G Monolithic",
                bmc_firmware: "7.00.00.172",
            },
        );
        assert_eq!(inv.memory[0].id, "DIMM.Socket.A1");
    }

    #[test]
    fn an_hpe_ilo_recording_maps_to_its_inventory() {
        let inv = recorded(include_str!("testdata/hpe.json"));
        check(
            &inv,
            &Profile {
                vendor: "hpe",
                manufacturer: "HPE",
                model: "ProLiant DL360 Gen10 Plus",
                serial: "P0000000",
                sku: "P-00000",
                bios: "U46 v1.82 (10/19/2023)",
                cpu_ids: ["1", "2"],
                cpu_model: "Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz",
                cores: 16,
                dimms: 8,
                dimm_mib: 16384,
                total_gib: 128.0,
                nic_ids: &["1", "2", "3", "4"],
                drives: 2,
                bmc_model: "iLO 5",
                bmc_firmware: "iLO 5 v3.00",
            },
        );
    }

    #[test]
    fn a_lenovo_xcc_recording_maps_to_its_inventory() {
        let inv = recorded(include_str!("testdata/lenovo.json"));
        check(
            &inv,
            &Profile {
                vendor: "lenovo",
                manufacturer: "Lenovo",
                model: "ThinkSystem SR650 V2",
                serial: "7Z730000000",
                sku: "7Z73-00000",
                bios: "AFE124H-3.10",
                cpu_ids: ["1", "2"],
                cpu_model: "Intel(R) Xeon(R) Gold 5318Y CPU @ 2.10GHz",
                cores: 24,
                dimms: 4,
                dimm_mib: 32768,
                total_gib: 128.0,
                nic_ids: &["1", "2"],
                drives: 2,
                bmc_model: "Lenovo XClarity Controller",
                bmc_firmware: "AFBT58J 6.60",
            },
        );
    }

    #[test]
    fn a_supermicro_recording_maps_to_its_inventory() {
        let inv = recorded(include_str!("testdata/supermicro.json"));
        check(
            &inv,
            &Profile {
                vendor: "supermicro",
                manufacturer: "Supermicro",
                model: "SYS-620U-TNR",
                serial: "SYS0000000",
                sku: "SYS-00000",
                bios: "1.4b",
                cpu_ids: ["1", "2"],
                cpu_model: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                cores: 32,
                dimms: 4,
                dimm_mib: 65536,
                total_gib: 256.0,
                nic_ids: &["1", "2"],
                drives: 1,
                bmc_model: "ASPEED",
                bmc_firmware: "01.01.06",
            },
        );
    }

    /// sushy-tools' fake driver: a system without model, serial or SKU (the chassis gives
    /// them), no processors, memory or storage, one NIC, the chassis' fans and temperatures.
    #[test]
    fn a_sushy_tools_recording_takes_its_identity_from_the_chassis() {
        let inv = recorded(include_str!("testdata/sushy-tools.json"));
        assert_eq!(inv.vendor, "generic");
        assert_eq!(inv.manufacturer.as_deref(), Some("Sushy Emulator"));
        assert_eq!(inv.model.as_deref(), Some("3500RX"));
        assert_eq!(inv.serial_number.as_deref(), Some("437XR1138R2"));
        assert_eq!(inv.sku.as_deref(), Some("8675309"));
        assert_eq!(
            inv.uuid.as_deref(),
            Some("27946b59-9e44-4fa7-8e91-f3527a1ef094")
        );
        assert_eq!(inv.power_state, PowerState::Off);
        assert!(inv.cpus.is_empty() && inv.memory.is_empty() && inv.disks.is_empty());
        assert_eq!(inv.total_memory_gib, None);
        assert_eq!(inv.nics.len(), 1);
        assert_eq!(
            inv.nics[0].mac_address.as_deref(),
            Some("00:5c:52:31:3a:9c")
        );
        assert_eq!((inv.nics[0].link_up, inv.nics[0].speed_mbps), (None, None));
        let fans: Vec<_> = inv
            .fans
            .iter()
            .map(|f| (f.name.as_str(), f.reading))
            .collect();
        assert_eq!(
            fans,
            [
                ("BaseBoard System Fan", Some(2100.0)),
                ("BaseBoard System Fan Backup", Some(2050.0))
            ]
        );
        let temps: Vec<_> = inv
            .temperatures
            .iter()
            .map(|t| (t.name.as_str(), t.reading_celsius))
            .collect();
        assert_eq!(
            temps,
            [
                ("CPU Temp", Some(41.0)),
                ("Chassis Intake Temp", Some(25.0))
            ]
        );
        assert_eq!(inv.bmc_firmware_version.as_deref(), Some("1.00"));
        assert_eq!(inv.bmc_model.as_deref(), Some("Joo Janta 200"));
        // `HealthRollUp` (sic) is not the schema's `HealthRollup`: the own health counts.
        assert_eq!(inv.health.system, Some(Health::Ok));
        assert_eq!(
            (inv.health.storage, inv.health.network),
            (None, Some(Health::Ok))
        );
    }

    /// The branches the recordings do not reach: processors that are not CPUs, empty DIMM
    /// slots, MACs written with dashes, roll-ups from the parts, SimpleStorage devices, PCIe
    /// devices, power supplies and network adapters.
    #[test]
    fn parts_are_filtered_normalized_and_rolled_up() {
        let status = |h: &str| json!({"State": "Enabled", "Health": h});
        let docs = Documents {
            system: json!({"Model": "M", "Status": status("OK")}),
            processors: vec![
                json!({"Id": "CPU1", "ProcessorType": "CPU", "Status": status("Warning")}),
                json!({"Id": "GPU1", "ProcessorType": "GPU"}),
                json!({"Id": "P2"}),
            ],
            memory: vec![
                json!({"Id": "A1", "CapacityMiB": 16384, "PartNumber": " HMA82GR7 ", "Status": status("Critical")}),
                json!({"Id": "A2", "Status": {"State": "Absent"}}),
            ],
            ethernet_interfaces: vec![
                json!({"Id": "1", "PermanentMACAddress": " AA-BB-CC-DD-EE-0F "}),
            ],
            storage: vec![StorageParts {
                controller: json!({"Id": "RAID", "Status": {"Health": "OK", "HealthRollup": "Warning"}}),
                drives: vec![],
            }],
            pcie_devices: vec![json!({"Id": "pcie-1", "Status": status("OK")})],
            chassis_sensors: vec![ChassisParts {
                thermal: Some(json!({"Fans": [{"FanName": "Fan A", "Reading": 40}]})),
                power: Some(
                    json!({"PowerSupplies": [{"Name": "PSU 1", "Status": status("Critical")}]}),
                ),
                network_adapters: vec![json!({"Name": "Adapter 1"})],
            }],
            simple_storage: vec![
                json!({"Id": "SATA", "Devices": [{"Name": "Disk 0", "CapacityBytes": 1000}, {"Name": "Disk 1", "Model": "X"}]}),
            ],
            chassis: Some(json!({"Model": "chassis model", "SerialNumber": "CS1"})),
            manager: None,
        };
        let inv = inventory(&docs, Vendor::Generic);
        let cpus: Vec<_> = inv.cpus.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(cpus, ["CPU1", "P2"]);
        assert_eq!(inv.memory.len(), 1);
        assert_eq!(inv.memory[0].part_number.as_deref(), Some("HMA82GR7"));
        assert_eq!(inv.health.processors, Some(Health::Warning));
        assert_eq!(inv.health.memory, Some(Health::Critical));
        assert_eq!(
            inv.nics[0].mac_address.as_deref(),
            Some("aa:bb:cc:dd:ee:0f")
        );
        assert_eq!(inv.health.network, None);
        // No drive under Storage: SimpleStorage's devices, numbered per controller.
        let disks: Vec<_> = inv
            .disks
            .iter()
            .map(|d| (d.id.as_str(), d.model.as_deref(), d.capacity_bytes))
            .collect();
        assert_eq!(
            disks,
            [
                ("SATA/0", Some("Disk 0"), Some(1000)),
                ("SATA/1", Some("X"), None)
            ]
        );
        assert_eq!(inv.health.storage, Some(Health::Warning));
        assert_eq!(inv.storage_controllers[0].name, "RAID");
        assert_eq!(inv.pcie_devices[0].name, "pcie-1");
        assert_eq!(inv.fans[0].name, "Fan A");
        assert_eq!(inv.fans[0].reading, Some(40.0));
        assert_eq!(inv.power_supplies[0].health, Some(Health::Critical));
        assert_eq!(inv.network_adapters[0].name, "Adapter 1");
        // The system's own identity wins over the chassis'; gaps are filled from it.
        assert_eq!(inv.model.as_deref(), Some("M"));
        assert_eq!(inv.serial_number.as_deref(), Some("CS1"));
        assert_eq!((inv.bmc_model.as_deref(), inv.health.bmc), (None, None));
    }

    #[test]
    fn drives_under_storage_leave_simple_storage_unread() {
        let docs = Documents {
            storage: vec![StorageParts {
                controller: json!({"Id": "1"}),
                drives: vec![json!({"Id": "d0", "Status": {"Health": "Critical"}})],
            }],
            simple_storage: vec![json!({"Id": "SATA", "Devices": [{"Name": "Disk 0"}]})],
            ..Documents::default()
        };
        let inv = inventory(&docs, Vendor::Generic);
        let disks: Vec<_> = inv.disks.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(disks, ["d0"]);
        // No roll-up from the controller: the drives' health.
        assert_eq!(inv.health.storage, Some(Health::Critical));
    }
}
