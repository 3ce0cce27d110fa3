//! The service root, the version document, `$metadata` and the OData service document.

use super::{Req, method_not_allowed, ok, sessions::sessions_uri};
use crate::BmcState;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) fn route(r: &Req) -> Option<Response> {
    Some(match r.path {
        "/redfish" => ok(json!({"v1": "/redfish/v1/"})),
        "/redfish/v1" if r.reads() => ok(service_root(r.b)),
        "/redfish/v1" => method_not_allowed(),
        "/redfish/v1/$metadata" => metadata_response(),
        "/redfish/v1/odata" => ok(odata_document()),
        _ => return None,
    })
}

fn service_root(b: &BmcState) -> Value {
    let mut root = json!({
        "@odata.id": "/redfish/v1/",
        "@odata.type": "#ServiceRoot.v1_15_0.ServiceRoot",
        "Id": "RootService",
        "Name": "Root Service",
        "RedfishVersion": "1.17.0",
        "UUID": b.uuid(),
        "Vendor": b.profile.vendor_name,
        "Product": b.profile.bmc_model,
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "Managers": {"@odata.id": "/redfish/v1/Managers"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "EventService": {"@odata.id": "/redfish/v1/EventService"},
        "Links": {"Sessions": {"@odata.id": sessions_uri(b)}},
    });
    if b.lock().quirks.log_page_size.is_some() {
        root["ProtocolFeaturesSupported"] = json!({"TopSkipQuery": true});
    }
    root
}

fn metadata_response() -> Response {
    let mut r = (StatusCode::OK, metadata()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/xml"),
    );
    r
}

fn odata_document() -> Value {
    let sets = [
        ("Systems", "/redfish/v1/Systems"),
        ("Chassis", "/redfish/v1/Chassis"),
        ("Managers", "/redfish/v1/Managers"),
        ("SessionService", "/redfish/v1/SessionService"),
        ("EventService", "/redfish/v1/EventService"),
    ];
    json!({
        "@odata.context": "/redfish/v1/$metadata",
        "value": sets.iter().map(|(n, u)| json!({"name": n, "kind": "Singleton", "url": u})).collect::<Vec<_>>(),
    })
}

/// The schemas this service uses, by reference (the CSDL files themselves are the DMTF's).
const SCHEMAS: &[(&str, &[&str])] = &[
    ("ServiceRoot", &["ServiceRoot", "ServiceRoot.v1_15_0"]),
    ("ComputerSystemCollection", &["ComputerSystemCollection"]),
    (
        "ComputerSystem",
        &["ComputerSystem", "ComputerSystem.v1_20_0"],
    ),
    ("ProcessorCollection", &["ProcessorCollection"]),
    ("Processor", &["Processor", "Processor.v1_18_0"]),
    ("MemoryCollection", &["MemoryCollection"]),
    ("Memory", &["Memory", "Memory.v1_17_0"]),
    (
        "EthernetInterfaceCollection",
        &["EthernetInterfaceCollection"],
    ),
    (
        "EthernetInterface",
        &["EthernetInterface", "EthernetInterface.v1_9_0"],
    ),
    ("StorageCollection", &["StorageCollection"]),
    ("Storage", &["Storage", "Storage.v1_13_0"]),
    ("Drive", &["Drive", "Drive.v1_16_0"]),
    ("LogServiceCollection", &["LogServiceCollection"]),
    ("LogService", &["LogService", "LogService.v1_4_0"]),
    ("LogEntryCollection", &["LogEntryCollection"]),
    ("LogEntry", &["LogEntry", "LogEntry.v1_15_0"]),
    ("ChassisCollection", &["ChassisCollection"]),
    ("Chassis", &["Chassis", "Chassis.v1_22_0"]),
    ("Thermal", &["Thermal", "Thermal.v1_7_0"]),
    ("SensorCollection", &["SensorCollection"]),
    ("Sensor", &["Sensor", "Sensor.v1_7_0"]),
    (
        "ThermalSubsystem",
        &["ThermalSubsystem", "ThermalSubsystem.v1_3_0"],
    ),
    (
        "ThermalMetrics",
        &["ThermalMetrics", "ThermalMetrics.v1_3_0"],
    ),
    ("FanCollection", &["FanCollection"]),
    ("Fan", &["Fan", "Fan.v1_5_0"]),
    (
        "PowerSubsystem",
        &["PowerSubsystem", "PowerSubsystem.v1_1_0"],
    ),
    ("PowerSupplyCollection", &["PowerSupplyCollection"]),
    ("PowerSupply", &["PowerSupply", "PowerSupply.v1_5_0"]),
    ("ManagerCollection", &["ManagerCollection"]),
    ("Manager", &["Manager", "Manager.v1_17_0"]),
    (
        "SessionService",
        &["SessionService", "SessionService.v1_1_8"],
    ),
    ("SessionCollection", &["SessionCollection"]),
    ("Session", &["Session", "Session.v1_6_0"]),
    ("EventService", &["EventService", "EventService.v1_10_0"]),
    (
        "EventDestinationCollection",
        &["EventDestinationCollection"],
    ),
    ("Event", &["Event", "Event.v1_7_0"]),
    ("Message", &["Message", "Message.v1_1_1"]),
    ("Resource", &["Resource", "Resource.v1_14_0"]),
];

fn metadata() -> String {
    let mut x = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<edmx:Edmx xmlns:edmx=\"http://docs.oasis-open.org/odata/ns/edmx\" Version=\"4.0\">\n",
    );
    for (file, namespaces) in SCHEMAS {
        x.push_str(&format!(
            "  <edmx:Reference Uri=\"http://redfish.dmtf.org/schemas/v1/{file}_v1.xml\">\n"
        ));
        for ns in *namespaces {
            x.push_str(&format!("    <edmx:Include Namespace=\"{ns}\"/>\n"));
        }
        x.push_str("  </edmx:Reference>\n");
    }
    x.push_str(
        "  <edmx:DataServices>\n    <Schema xmlns=\"http://docs.oasis-open.org/odata/ns/edm\" Namespace=\"Service\">\n      <EntityContainer Name=\"Service\" Extends=\"ServiceRoot.v1_15_0.ServiceContainer\"/>\n    </Schema>\n  </edmx:DataServices>\n</edmx:Edmx>\n",
    );
    x
}
