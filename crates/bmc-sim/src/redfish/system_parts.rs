//! The system's parts: processors, memory, Ethernet interfaces, storage and its drives.

use super::{Req, collection, not_found, ok, status_ok, system_path};
use crate::BmcState;
use axum::response::Response;
use serde_json::json;

pub(super) fn route(r: &Req) -> Option<Response> {
    let (b, path) = (r.b, r.path);
    let sys = system_path(b);
    let rest = path.strip_prefix(sys.as_str())?.strip_prefix('/')?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["Processors", id @ ..] => processors(b, path, id),
        ["Memory", id @ ..] => memory(b, path, id),
        ["EthernetInterfaces", id @ ..] => ethernet_interfaces(b, path, id),
        ["Storage", rest @ ..] => storage(b, &sys, path, rest),
        _ => None,
    }
}

fn processors(b: &BmcState, path: &str, id: &[&str]) -> Option<Response> {
    let p = &b.profile;
    Some(match id {
        [] => ok(collection(
            path,
            "ProcessorCollection",
            "Processors Collection",
            (0..p.sockets)
                .map(|i| format!("{path}/{}", cpu_id(b, i)))
                .collect(),
        )),
        [id] => match (0..p.sockets).find(|i| cpu_id(b, *i) == *id) {
            Some(_) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#Processor.v1_18_0.Processor",
                "Id": id,
                "Name": format!("Processor {id}"),
                "ProcessorType": "CPU",
                "ProcessorArchitecture": "x86",
                "InstructionSet": "x86-64",
                "Manufacturer": p.cpu_manufacturer,
                "Model": p.cpu_model,
                "MaxSpeedMHz": 3400,
                "TotalCores": p.cores,
                "TotalThreads": p.cores * 2,
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        _ => return None,
    })
}

fn memory(b: &BmcState, path: &str, id: &[&str]) -> Option<Response> {
    let p = &b.profile;
    Some(match id {
        [] => ok(collection(
            path,
            "MemoryCollection",
            "Memory Collection",
            (0..p.dimms)
                .map(|i| format!("{path}/{}", dimm_id(b, i)))
                .collect(),
        )),
        [id] => match (0..p.dimms).find(|i| dimm_id(b, *i) == *id) {
            Some(i) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#Memory.v1_17_0.Memory",
                "Id": id,
                "Name": format!("DIMM {id}"),
                "MemoryDeviceType": "DDR4",
                "CapacityMiB": p.dimm_mib,
                "OperatingSpeedMhz": 3200,
                "Manufacturer": "Micron Technology",
                "PartNumber": "36ASF4G72PZ-3G2E1",
                "SerialNumber": format!("{:08X}", b.index as u64 * 64 + i as u64),
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        _ => return None,
    })
}

fn ethernet_interfaces(b: &BmcState, path: &str, id: &[&str]) -> Option<Response> {
    let p = &b.profile;
    Some(match id {
        [] => ok(collection(
            path,
            "EthernetInterfaceCollection",
            "Ethernet Interface Collection",
            (0..p.nics)
                .map(|i| format!("{path}/{}", nic_id(b, i)))
                .collect(),
        )),
        [id] => match (0..p.nics).find(|i| nic_id(b, *i) == *id) {
            Some(i) => ok(json!({
                "@odata.id": path,
                "@odata.type": "#EthernetInterface.v1_9_0.EthernetInterface",
                "Id": id,
                "Name": format!("NIC {id}"),
                "MACAddress": b.mac(i).to_uppercase(),
                "PermanentMACAddress": b.mac(i).to_uppercase(),
                "SpeedMbps": 25000,
                "LinkStatus": if i == 0 { "LinkUp" } else { "LinkDown" },
                "Status": status_ok(),
            })),
            None => not_found(),
        },
        _ => return None,
    })
}

/// The storage collection, its one controller and the controller's drives.
fn storage(b: &BmcState, sys: &str, path: &str, rest: &[&str]) -> Option<Response> {
    let p = &b.profile;
    let storage = format!("{sys}/Storage/{}", storage_id(b));
    Some(match rest {
        [] => ok(collection(
            path,
            "StorageCollection",
            "Storage Collection",
            vec![storage.clone()],
        )),
        [id] if *id == storage_id(b) => ok(json!({
            "@odata.id": path,
            "@odata.type": "#Storage.v1_13_0.Storage",
            "Id": id,
            "Name": "Storage Controller",
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
            "Drives@odata.count": p.drives,
            "Drives": (0..p.drives).map(|i| json!({"@odata.id": format!("{storage}/Drives/{}", drive_id(i))})).collect::<Vec<_>>(),
        })),
        [id, "Drives", d] if *id == storage_id(b) => {
            match (0..p.drives).find(|i| drive_id(*i) == *d) {
                Some(i) => ok(json!({
                    "@odata.id": path,
                    "@odata.type": "#Drive.v1_16_0.Drive",
                    "Id": d,
                    "Name": format!("Drive {i}"),
                    "Model": "MZ7L3960HCJR-00A07",
                    "Manufacturer": "Samsung",
                    "SerialNumber": format!("S6KNNE0{:06}{}", b.index, i),
                    "CapacityBytes": 960_197_124_096u64,
                    "MediaType": "SSD",
                    "Protocol": "SATA",
                    "Status": status_ok(),
                })),
                None => not_found(),
            }
        }
        _ => return None,
    })
}

fn cpu_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("CPU.Socket.{}", i + 1),
        _ => format!("{}", i + 1),
    }
}

fn dimm_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("DIMM.Socket.A{}", i + 1),
        _ => format!("DIMM{}", i + 1),
    }
}

fn nic_id(b: &BmcState, i: u32) -> String {
    match b.profile.vendor {
        crate::Vendor::Dell => format!("NIC.Integrated.1-{}-1", i + 1),
        _ => format!("{}", i + 1),
    }
}

fn storage_id(b: &BmcState) -> &'static str {
    match b.profile.vendor {
        crate::Vendor::Dell => "RAID.Integrated.1-1",
        _ => "1",
    }
}

fn drive_id(i: u32) -> String {
    format!("Disk.Bay.{i}")
}
