//! The log services (under the system or the manager, per vendor), the log and its entries,
//! whole or in pages.

use super::{
    Bmc, Req, collection, log_entry_path, log_service_path, manager_path, not_found, ok, status_ok,
    system_path,
};
use crate::BmcState;
use axum::http::Method;
use axum::response::Response;
use serde_json::{Value, json};

pub(super) fn route(r: &Req) -> Option<Response> {
    let (b, path) = (r.b, r.path);
    let sys = system_path(b);
    let mgr = manager_path(b);
    let logsvc = log_service_path(b);
    let (owner, other) = if b.profile.log.0 == "Systems" {
        (&sys, &mgr)
    } else {
        (&mgr, &sys)
    };
    if path == format!("{owner}/LogServices") {
        return Some(ok(collection(
            path,
            "LogServiceCollection",
            "Log Service Collection",
            vec![logsvc.clone()],
        )));
    }
    // The other resource has no logs.
    if path == format!("{other}/LogServices") {
        return Some(ok(collection(
            path,
            "LogServiceCollection",
            "Log Service Collection",
            vec![],
        )));
    }
    if path == logsvc {
        return Some(log_service(b, &logsvc));
    }
    if path == format!("{logsvc}/Entries") {
        let entries: Vec<Value> = b.lock().logs.iter().map(|l| log_entry(b, l)).collect();
        return Some(ok(json!({
            "@odata.id": path,
            "@odata.type": "#LogEntryCollection.LogEntryCollection",
            "Name": "Log Entry Collection",
            "Members@odata.count": entries.len(),
            "Members": entries,
        })));
    }
    let id = path.strip_prefix(&format!("{logsvc}/Entries/"))?;
    let g = b.lock();
    Some(
        match id
            .parse::<u64>()
            .ok()
            .and_then(|id| g.logs.iter().find(|l| l.id == id))
        {
            Some(l) => ok(log_entry(b, l)),
            None => not_found(),
        },
    )
}

fn log_service(b: &Bmc, logsvc: &str) -> Response {
    let n = b.lock().logs.len();
    ok(json!({
        "@odata.id": logsvc,
        "@odata.type": "#LogService.v1_4_0.LogService",
        "Id": b.profile.log.1,
        "Name": "System Event Log",
        "ServiceEnabled": true,
        "MaxNumberOfRecords": 1024,
        "OverWritePolicy": "WrapsWhenFull",
        "LogEntryType": "Event",
        "DateTime": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "Status": status_ok(),
        "Description": format!("{n} entries"),
        "Entries": {"@odata.id": format!("{logsvc}/Entries")},
    }))
}

/// The log entries in pages (quirk `log_page_size`): `$skip` / `$top`, and a nextLink.
pub(super) fn log_page(b: &Bmc, method: &Method, path: &str, query: &str) -> Option<Response> {
    let size = b.lock().quirks.log_page_size?;
    let entries_path = format!("{}/Entries", log_service_path(b));
    if *method != Method::GET || path != entries_path {
        return None;
    }
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name || k.replace("%24", "$") == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let skip = param("$skip").unwrap_or(0);
    let top = param("$top").unwrap_or(size);
    let g = b.lock();
    let total = g.logs.len();
    let members: Vec<Value> = g
        .logs
        .iter()
        .skip(skip)
        .take(top)
        .map(|l| log_entry(b, l))
        .collect();
    drop(g);
    let mut v = json!({
        "@odata.id": entries_path,
        "@odata.type": "#LogEntryCollection.LogEntryCollection",
        "Name": "Log Entry Collection",
        "Members@odata.count": total,
        "Members": members,
    });
    if skip + top < total {
        v["Members@odata.nextLink"] =
            json!(format!("{entries_path}?$skip={}&$top={top}", skip + top));
    }
    Some(ok(v))
}

fn log_entry(b: &BmcState, l: &crate::LogRecord) -> Value {
    json!({
        "@odata.id": log_entry_path(b, l.id),
        "@odata.type": "#LogEntry.v1_15_0.LogEntry",
        "Id": l.id.to_string(),
        "Name": "Log Entry",
        "EntryType": "Event",
        "Created": l.created,
        "Severity": l.severity,
        "Message": l.message,
        "MessageId": l.message_id,
    })
}
