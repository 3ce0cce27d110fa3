//! The chassis collection, the chassis, its `Sensors`, and its fans, temperatures and power
//! supplies: in `Thermal` (the older schema, the default) or in `ThermalSubsystem` and
//! `PowerSubsystem` (with [`crate::Quirks::new_thermal_schema`]).

use super::{Req, chassis_path, collection, manager_path, ok, power_state_name, system_path};
use crate::BmcState;
use axum::response::Response;
use serde_json::{Value, json};

/// The temperatures every profile serves: `(id, name, °C, upper caution, upper critical)`.
const TEMPERATURES: [(&str, &str, f64, f64, f64); 2] = [
    ("InletTemp", "Inlet Temp", 24.0, 42.0, 47.0),
    ("CPU1Temp", "CPU1 Temp", 47.5, 90.0, 100.0),
];
/// The power supplies: `(id, name, input watts)`.
const POWER_SUPPLIES: [(&str, &str, f64); 2] = [("PSU1", "PSU 1", 182.0), ("PSU2", "PSU 2", 176.0)];
/// A fan under this many RPM is critical (its `Sensor` threshold).
const FAN_LOWER_CRITICAL: f64 = 1000.0;

pub(super) fn route(r: &Req) -> Option<Response> {
    let chs = chassis_path(r.b);
    let (new, sensors) = {
        let q = &r.b.lock().quirks;
        (q.new_thermal_schema, !q.no_sensors)
    };
    let sub = r.path.strip_prefix(chs.as_str());
    Some(match sub {
        _ if r.path == "/redfish/v1/Chassis" => ok(collection(
            r.path,
            "ChassisCollection",
            "Chassis Collection",
            vec![chs],
        )),
        Some("") => ok(chassis(r.b, new, sensors)),
        Some("/Thermal") if !new => ok(thermal(r.b)),
        Some("/Sensors") if sensors => ok(collection(
            r.path,
            "SensorCollection",
            "Sensors",
            sensor_docs(r.b)
                .iter()
                .filter_map(|s| s["@odata.id"].as_str().map(str::to_owned))
                .collect(),
        )),
        Some(p) if sensors && p.starts_with("/Sensors/") => {
            return sensor_docs(r.b)
                .into_iter()
                .find(|s| s["@odata.id"] == r.path)
                .map(ok);
        }
        Some("/ThermalSubsystem") if new => ok(json!({
            "@odata.id": r.path,
            "@odata.type": "#ThermalSubsystem.v1_3_0.ThermalSubsystem",
            "Id": "ThermalSubsystem",
            "Name": "Thermal Subsystem",
            "Fans": {"@odata.id": format!("{}/Fans", r.path)},
            "ThermalMetrics": {"@odata.id": format!("{}/ThermalMetrics", r.path)},
            "Status": {"State": "Enabled", "Health": "OK"},
        })),
        Some("/ThermalSubsystem/Fans") if new => ok(collection(
            r.path,
            "FanCollection",
            "Fans",
            (0..fans(r.b).len())
                .map(|i| format!("{}/Fan{}", r.path, i + 1))
                .collect(),
        )),
        Some(p) if new && p.starts_with("/ThermalSubsystem/Fans/Fan") => {
            let i: usize = p
                .trim_start_matches("/ThermalSubsystem/Fans/Fan")
                .parse()
                .ok()?;
            let (name, health) = fans(r.b).get(i.checked_sub(1)?)?.clone();
            ok(json!({
                "@odata.id": r.path,
                "@odata.type": "#Fan.v1_5_0.Fan",
                "Id": format!("Fan{i}"),
                "Name": name,
                "SpeedPercent": {"Reading": if health == "Critical" { 0 } else { 45 },
                    "SpeedRPM": fan_rpm(&health)},
                "Status": {"State": "Enabled", "Health": health},
            }))
        }
        Some("/ThermalSubsystem/ThermalMetrics") if new => ok(json!({
            "@odata.id": r.path,
            "@odata.type": "#ThermalMetrics.v1_3_0.ThermalMetrics",
            "Id": "ThermalMetrics",
            "Name": "Thermal Metrics",
            "TemperatureReadingsCelsius": TEMPERATURES.iter().map(|(id, name, c, ..)| json!({
                "DataSourceUri": format!("{chs}/Sensors/{id}"),
                "DeviceName": name,
                "Reading": c,
            })).collect::<Vec<_>>(),
        })),
        Some("/PowerSubsystem") if new => ok(json!({
            "@odata.id": r.path,
            "@odata.type": "#PowerSubsystem.v1_1_0.PowerSubsystem",
            "Id": "PowerSubsystem",
            "Name": "Power Subsystem",
            "PowerSupplies": {"@odata.id": format!("{}/PowerSupplies", r.path)},
            "Status": {"State": "Enabled", "Health": "OK"},
        })),
        Some("/PowerSubsystem/PowerSupplies") if new => ok(collection(
            r.path,
            "PowerSupplyCollection",
            "Power Supplies",
            POWER_SUPPLIES
                .iter()
                .map(|(id, ..)| format!("{}/{id}", r.path))
                .collect(),
        )),
        Some(p) if new && p.starts_with("/PowerSubsystem/PowerSupplies/") => {
            let id = p.trim_start_matches("/PowerSubsystem/PowerSupplies/");
            let (id, name, _) = POWER_SUPPLIES.iter().find(|(i, ..)| *i == id)?;
            ok(json!({
                "@odata.id": r.path,
                "@odata.type": "#PowerSupply.v1_5_0.PowerSupply",
                "Id": id,
                "Name": name,
                "PowerCapacityWatts": 800,
                "Status": {"State": "Enabled", "Health": "OK"},
            }))
        }
        _ => return None,
    })
}

fn fans(b: &BmcState) -> Vec<(String, String)> {
    b.lock().fans.clone()
}

fn fan_rpm(health: &str) -> u32 {
    if health == "Critical" { 0 } else { 5600 }
}

fn chassis(b: &BmcState, new: bool, sensors: bool) -> Value {
    let p = &b.profile;
    let path = chassis_path(b);
    let mut c = json!({
        "@odata.id": path,
        "@odata.type": "#Chassis.v1_22_0.Chassis",
        "Id": p.chassis_id,
        "Name": "Computer System Chassis",
        "ChassisType": "RackMount",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SerialNumber": b.serial_number(),
        "PowerState": power_state_name(&b.lock()),
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        "Links": {
            "ComputerSystems": [{"@odata.id": system_path(b)}],
            "ManagedBy": [{"@odata.id": manager_path(b)}],
        },
    });
    let links: &[&str] = match (new, sensors) {
        (false, false) => &["Thermal"],
        (false, true) => &["Thermal", "Sensors"],
        (true, false) => &["ThermalSubsystem", "PowerSubsystem"],
        (true, true) => &["ThermalSubsystem", "PowerSubsystem", "Sensors"],
    };
    if let Some(o) = c.as_object_mut() {
        for l in links {
            o.insert((*l).into(), json!({"@odata.id": format!("{path}/{l}")}));
        }
    }
    c
}

/// Every `Sensor` of the chassis: one per fan (RPM, critical under 1000), the two
/// temperatures (with caution and critical thresholds) and each power supply's input power.
fn sensor_docs(b: &BmcState) -> Vec<Value> {
    let base = format!("{}/Sensors", chassis_path(b));
    let mut out = Vec::new();
    for (i, (name, health)) in fans(b).iter().enumerate() {
        out.push(json!({
            "@odata.id": format!("{base}/Fan{}", i + 1),
            "@odata.type": "#Sensor.v1_7_0.Sensor",
            "Id": format!("Fan{}", i + 1),
            "Name": name,
            "ReadingType": "Rotational",
            "ReadingUnits": "RPM",
            "Reading": fan_rpm(health),
            "PhysicalContext": "Fan",
            "Thresholds": {"LowerCritical": {"Reading": FAN_LOWER_CRITICAL}},
            "Status": {"State": "Enabled", "Health": health},
        }));
    }
    for (id, name, c, caution, critical) in TEMPERATURES {
        out.push(json!({
            "@odata.id": format!("{base}/{id}"),
            "@odata.type": "#Sensor.v1_7_0.Sensor",
            "Id": id,
            "Name": name,
            "ReadingType": "Temperature",
            "ReadingUnits": "Cel",
            "Reading": c,
            "Thresholds": {
                "UpperCaution": {"Reading": caution},
                "UpperCritical": {"Reading": critical},
            },
            "Status": {"State": "Enabled", "Health": "OK"},
        }));
    }
    for (id, name, watts) in POWER_SUPPLIES {
        out.push(json!({
            "@odata.id": format!("{base}/{id}InputPower"),
            "@odata.type": "#Sensor.v1_7_0.Sensor",
            "Id": format!("{id}InputPower"),
            "Name": format!("{name} Input Power"),
            "ReadingType": "Power",
            "ReadingUnits": "W",
            "Reading": watts,
            "PhysicalContext": "PowerSupply",
            "Status": {"State": "Enabled", "Health": "OK"},
        }));
    }
    out
}

/// The chassis' fans (health as set by [`BmcState::set_fan_health`]) and two temperatures.
fn thermal(b: &BmcState) -> Value {
    let path = format!("{}/Thermal", chassis_path(b));
    let fans: Vec<Value> = fans(b)
        .iter()
        .enumerate()
        .map(|(i, (name, health))| {
            json!({
                "@odata.id": format!("{path}#/Fans/{i}"),
                "MemberId": i.to_string(),
                "Name": name,
                "Reading": fan_rpm(health),
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
