//! The computer systems collection, the system (read, and its boot override patched) and its
//! reset action with the power transitions it starts.

use super::{
    Bmc, Req, chassis_path, collection, error, manager_path, method_not_allowed, ok,
    power_state_name, system_path,
};
use crate::{BmcState, Inner, media};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

pub(super) fn route(r: &Req) -> Option<Response> {
    let b = r.b;
    let sys = system_path(b);
    if r.path == "/redfish/v1/Systems" {
        return Some(ok(collection(
            r.path,
            "ComputerSystemCollection",
            "Computer System Collection",
            vec![sys],
        )));
    }
    if r.path == sys {
        return Some(match *r.method {
            Method::GET | Method::HEAD => {
                let (v, etag) = system(b);
                let mut r = ok(v);
                if let Ok(h) = HeaderValue::from_str(&etag) {
                    r.headers_mut().insert(header::ETAG, h);
                }
                r
            }
            Method::PATCH => patch_system(b, r.headers, r.body),
            _ => method_not_allowed(),
        });
    }
    if r.path == format!("{sys}/Actions/ComputerSystem.Reset") {
        return Some(if *r.method == Method::POST {
            reset(b, r.body)
        } else {
            method_not_allowed()
        });
    }
    None
}

fn system(b: &BmcState) -> (Value, String) {
    let p = &b.profile;
    let sys = system_path(b);
    let g = b.lock();
    let etag = format!("W/\"{}\"", g.etag);
    let mut v = json!({
        "@odata.id": sys,
        "@odata.type": "#ComputerSystem.v1_20_0.ComputerSystem",
        "@odata.etag": etag,
        "Id": p.system_id,
        "Name": "System",
        "SystemType": "Physical",
        "Manufacturer": p.manufacturer,
        "Model": p.model,
        "SKU": format!("{}-{:05}", p.sku_prefix, b.index % 100_000),
        "SerialNumber": b.serial_number(),
        "UUID": b.uuid(),
        "BiosVersion": p.bios_version,
        "PowerState": power_state_name(&g),
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        "Boot": {
            "BootSourceOverrideTarget": g.boot.target,
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd", "BiosSetup", "Usb"],
            "BootSourceOverrideEnabled": g.boot.enabled,
            "BootSourceOverrideMode": g.boot.mode,
        },
        "ProcessorSummary": {
            "Count": p.sockets,
            "Model": p.cpu_model,
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        },
        "MemorySummary": {
            "TotalSystemMemoryGiB": (p.dimm_mib * p.dimms as u64) as f64 / 1024.0,
            "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "OK"},
        },
        "Processors": {"@odata.id": format!("{sys}/Processors")},
        "Memory": {"@odata.id": format!("{sys}/Memory")},
        "EthernetInterfaces": {"@odata.id": format!("{sys}/EthernetInterfaces")},
        "Storage": {"@odata.id": format!("{sys}/Storage")},
        "LogServices": {"@odata.id": format!("{sys}/LogServices")},
        "Links": {
            "Chassis": [{"@odata.id": chassis_path(b)}],
            "ManagedBy": [{"@odata.id": manager_path(b)}],
        },
        "Actions": {
            "#ComputerSystem.Reset": {
                "target": format!("{sys}/Actions/ComputerSystem.Reset"),
                "ResetType@Redfish.AllowableValues": p.reset_types,
            }
        },
    });
    if p.media.owner == "Systems" {
        v["VirtualMedia"] = json!({"@odata.id": media::collection_path(b)});
    }
    (v, etag)
}

/// The `If-Match` check of a PATCH: 428 without one where the vendor requires it (Lenovo),
/// 412 when it names another ETag (`*` matches any; quirk `strong_etag_compare`: a weak ETag
/// never matches, its bare tag does).
fn precondition(b: &BmcState, g: &Inner, headers: &HeaderMap) -> Option<Response> {
    let if_match = headers.get(header::IF_MATCH).and_then(|v| v.to_str().ok());
    let etag = format!("W/\"{}\"", g.etag);
    match if_match {
        None if b.profile.requires_if_match => Some(error(
            StatusCode::PRECONDITION_REQUIRED,
            "Base.1.8.PreconditionRequired",
            "A precondition header or annotation is required to change this resource.",
        )),
        Some(m)
            if m != "*"
                && (m != etag || g.quirks.strong_etag_compare)
                && !(g.quirks.strong_etag_compare && m == etag.trim_start_matches("W/")) =>
        {
            Some(error(
                StatusCode::PRECONDITION_FAILED,
                "Base.1.8.PreconditionFailed",
                "The ETag supplied did not match the ETag required to change this resource.",
            ))
        }
        _ => None,
    }
}

fn patch_system(b: &Bmc, headers: &HeaderMap, body: Option<&Value>) -> Response {
    let mut g = b.lock();
    g.system_patches
        .push(body.cloned().unwrap_or(serde_json::Value::Null));
    if let Some(refused) = precondition(b, &g, headers) {
        return refused;
    }
    let Some(boot) = body.and_then(|v| v.get("Boot")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyNotWritable",
            "Only Boot properties can be changed.",
        );
    };
    let target = boot.get("BootSourceOverrideTarget").and_then(Value::as_str);
    let enabled = boot
        .get("BootSourceOverrideEnabled")
        .and_then(Value::as_str);
    let mode = boot.get("BootSourceOverrideMode").and_then(Value::as_str);
    if let Some(t) = target
        && !["None", "Pxe", "Hdd", "Cd", "BiosSetup", "Usb"].contains(&t)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideTarget is not in the list of acceptable values.",
        );
    }
    if let Some(e) = enabled
        && !["Once", "Continuous", "Disabled"].contains(&e)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideEnabled is not in the list of acceptable values.",
        );
    }
    if let Some(m) = mode
        && !["UEFI", "Legacy"].contains(&m)
    {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.PropertyValueNotInList",
            "The value for BootSourceOverrideMode is not in the list of acceptable values.",
        );
    }
    if let Some(t) = target {
        g.boot.target = t.into();
    }
    if let Some(e) = enabled {
        g.boot.enabled = e.into();
    }
    match mode {
        _ if g.quirks.boot_mode_always_legacy && target.is_some() => g.boot.mode = "Legacy".into(),
        Some(m) => g.boot.mode = m.into(),
        // The Supermicro behaviour: an override that does not restate the mode sets Legacy.
        None if b.profile.boot_mode_reset_to_legacy && target.is_some() => {
            g.boot.mode = "Legacy".into()
        }
        None => {}
    }
    g.etag += 1;
    StatusCode::NO_CONTENT.into_response()
}

fn reset(b: &Bmc, body: Option<&Value>) -> Response {
    let Some(kind) = body
        .and_then(|v| v.get("ResetType"))
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterMissing",
            "The action requires the parameter ResetType.",
        );
    };
    if !b.profile.reset_types.contains(&kind.as_str()) {
        return error(
            StatusCode::BAD_REQUEST,
            "Base.1.8.ActionParameterValueNotInList",
            "The value for the parameter ResetType is not in the list of acceptable values.",
        );
    }
    b.lock().reset_log.push(kind.clone());
    // Decide on where the system is heading: a ForceOff during a cycle still powers off.
    let on = b.lock().final_on;
    match kind.as_str() {
        "On" | "ForceOn" if !on => {
            transition(b, &[true]);
        }
        "ForceOff" | "GracefulShutdown" if on => {
            transition(b, &[false]);
        }
        "PushPowerButton" => transition(b, &[!on]),
        "ForceRestart" | "GracefulRestart" | "PowerCycle" => {
            if on {
                transition(b, &[false, true]);
            } else if kind == "PowerCycle" {
                transition(b, &[true]);
            } else {
                return error(
                    StatusCode::CONFLICT,
                    "Base.1.8.ResourceInStandby",
                    "The request could not be performed because the resource is in standby.",
                );
            }
            b.lock().resets += 1;
        }
        "Nmi" => {}
        _ => {}
    }
    StatusCode::NO_CONTENT.into_response()
}

/// Moves the power state through `steps`, each landing after the profile's delay.
pub(crate) fn transition(b: &Bmc, steps: &[bool]) {
    let generation = {
        let mut g = b.lock();
        g.generation += 1;
        g.pending = steps.first().map(|t| (*t, g.generation));
        if let Some(last) = steps.last() {
            g.final_on = *last;
        }
        g.generation
    };
    let b2 = b.clone();
    let steps = steps.to_vec();
    let delay = b.spec.power_delay;
    let apply = move |b: &BmcState, target: bool, last: bool| {
        let mut g = b.lock();
        if g.generation != generation {
            return false;
        }
        match (g.power_on, target) {
            // A one-time override is consumed by the boot it applied to.
            (false, true) => g.power_on_boot(),
            (true, false) => g.power_off_stop(),
            _ => {}
        }
        g.power_on = target;
        g.pending = if last {
            None
        } else {
            Some((!target, generation))
        };
        drop(g);
        b.emit(
            "StatusChange",
            "ResourceEvent.1.0.ResourceStatusChanged",
            if target {
                "The system powered on."
            } else {
                "The system powered off."
            },
            &system_path(b),
        );
        true
    };
    if delay.is_zero() {
        let n = steps.len();
        for (i, t) in steps.iter().enumerate() {
            apply(&b2, *t, i + 1 == n);
        }
        return;
    }
    tokio::spawn(async move {
        let n = steps.len();
        for (i, t) in steps.iter().enumerate() {
            tokio::time::sleep(delay).await;
            if !apply(&b2, *t, i + 1 == n) {
                return;
            }
        }
    });
}
