//! The manager collection and the manager (the BMC itself).

use super::{Req, chassis_path, collection, manager_path, ok, status_ok, system_path};
use crate::{BmcState, media};
use axum::response::Response;
use serde_json::{Value, json};

pub(super) fn route(r: &Req) -> Option<Response> {
    let mgr = manager_path(r.b);
    Some(if r.path == "/redfish/v1/Managers" {
        ok(collection(
            r.path,
            "ManagerCollection",
            "Manager Collection",
            vec![mgr],
        ))
    } else if r.path == mgr {
        ok(manager(r.b))
    } else {
        return None;
    })
}

fn manager(b: &BmcState) -> Value {
    let p = &b.profile;
    let mgr = manager_path(b);
    let mut v = json!({
        "@odata.id": mgr,
        "@odata.type": "#Manager.v1_17_0.Manager",
        "Id": p.manager_id,
        "Name": "Manager",
        "ManagerType": "BMC",
        "Model": p.bmc_model,
        "FirmwareVersion": p.bmc_firmware,
        "UUID": b.uuid(),
        "PowerState": "On",
        "Status": status_ok(),
        "LogServices": {"@odata.id": format!("{mgr}/LogServices")},
        "Links": {
            "ManagerForServers": [{"@odata.id": system_path(b)}],
            "ManagerForChassis": [{"@odata.id": chassis_path(b)}],
        },
    });
    if p.media.owner == "Managers" {
        v["VirtualMedia"] = json!({"@odata.id": media::collection_path(b)});
    }
    v
}
