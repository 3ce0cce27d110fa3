//! What the Redfish client maps from a BMC's answers: the first two bytes are the HTTP status,
//! the rest the body. The body goes through the error mapping and the login answer; parsed as
//! JSON, it and every object inside it go through the service root, boot override, virtual
//! media, component and health mappings and the field accessors.
#![no_main]

use ingot_bmc::redfish::fuzzing as redfish;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Some(([hi, lo], body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let status = u16::from_be_bytes([*hi, *lo]) % 600;
    if let Some(Err(e)) = redfish::answer_error(status, body) {
        let _ = e.to_string();
    }
    let Ok(doc) = serde_json::from_slice::<Value>(body) else {
        let _ = redfish::login(status, &[("X-Auth-Token", "t")], body);
        return;
    };
    let location = doc
        .get("Location")
        .and_then(Value::as_str)
        .unwrap_or("/s/1");
    let _ = redfish::login(
        status,
        &[("X-Auth-Token", "t"), ("Location", location)],
        body,
    );
    let mut budget = 256;
    visit(&doc, &mut budget);
});

fn visit(v: &Value, budget: &mut u32) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    let _ = redfish::service_root(v);
    let _ = redfish::boot_override(v);
    let slot = redfish::media(v);
    if v.get("Inserted").is_none() {
        assert_eq!(slot.inserted, slot.image.is_some());
    }
    let _ = redfish::named_component(v);
    let _ = redfish::health(v, true);
    let _ = redfish::health(v, false);
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let _ = redfish::field(v, k);
                if let Some(s) = child.as_str() {
                    let _ = redfish::mac(s);
                }
                visit(child, budget);
            }
        }
        Value::Array(items) => items.iter().for_each(|i| visit(i, budget)),
        _ => {}
    }
}
