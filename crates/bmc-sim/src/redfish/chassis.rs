//! The chassis collection, the chassis and its thermal readings.

use super::{Req, chassis_path, collection, manager_path, ok, power_state_name, system_path};
use crate::BmcState;
use axum::response::Response;
use serde_json::{Value, json};

pub(super) fn route(r: &Req) -> Option<Response> {
    let chs = chassis_path(r.b);
    Some(if r.path == "/redfish/v1/Chassis" {
        ok(collection(
            r.path,
            "ChassisCollection",
            "Chassis Collection",
            vec![chs],
        ))
    } else if r.path == chs {
        ok(chassis(r.b))
    } else if r.path == format!("{chs}/Thermal") {
        ok(thermal(r.b))
    } else {
        return None;
    })
}

fn chassis(b: &BmcState) -> Value {
    let p = &b.profile;
    json!({
        "@odata.id": chassis_path(b),
        "@odata.type": "#Chassis.v1_22_0.Chassis",
        "Id": p.chassis_id,
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SerialNumber": b.serial_number(),
        "PowerState": power_state_name(&b.lock()),
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        "Thermal": {"@odata.id": format!("{}/Thermal", chassis_path(b))},
        "Links": {
            "ComputerSystems": [{"@odata.id": system_path(b)}],
            "ManagedBy": [{"@odata.id": manager_path(b)}],
        },
    })
}

/// The chassis' fans (health as set by [`BmcState::set_fan_health`]) and two temperatures.
fn thermal(b: &BmcState) -> Value {
    let path = format!("{}/Thermal", chassis_path(b));
    let fans: Vec<Value> = b
        .lock()
        .fans
        .iter()
        .enumerate()
        .map(|(i, (name, health))| {
            json!({
                "@odata.id": format!("{path}#/Fans/{i}"),
                "MemberId": i.to_string(),
                "Name": name,
                "Reading": if health == "Critical" { 0 } else { 5600 },
                "ReadingUnits": "RPM",
                "Status": {"State": "Enabled", "Health": health},
            })
        })
        .collect();
    json!({
        "@odata.id": path,
        "@odata.type": "#Thermal.v1_7_0.Thermal",
        "Id": "Thermal",
        "Name": "Thermal",
        "Fans": fans,
        "Temperatures": [
            {"@odata.id": format!("{path}#/Temperatures/0"), "MemberId": "0",
             "Name": "Inlet Temp", "ReadingCelsius": 24,
             "Status": {"State": "Enabled", "Health": "OK"}},
            {"@odata.id": format!("{path}#/Temperatures/1"), "MemberId": "1",
             "Name": "CPU1 Temp", "ReadingCelsius": 47.5,
             "Status": {"State": "Enabled", "Health": "OK"}},
        ],
    })
}
