//! The seed inputs of this crate's fuzz targets (`fuzz/`): Redfish answers in the shapes BMCs
//! send (a service root, a system, virtual media, an error and a login answer), an event stream,
//! BMC addresses and links. Each seed is checked to map as its target needs it to; with
//! `INGOT_FUZZ_SEEDS=DIR` they are also written to `DIR/<target>/<name>`, which is how
//! `scripts/fuzz.sh` makes its corpora.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_bmc::redfish::fuzzing as redfish;
use ingot_bmc::{BmcError, BootDevice, Endpoint};
use serde_json::{Value, json};

/// `redfish_json` input: the HTTP status (2 bytes, big-endian), then the body.
fn answer(status: u16, body: &Value) -> Vec<u8> {
    let mut out = status.to_be_bytes().to_vec();
    out.extend_from_slice(body.to_string().as_bytes());
    out
}

fn service_root() -> Value {
    json!({
        "@odata.id": "/redfish/v1",
        "RedfishVersion": "1.11.0",
        "Vendor": "Dell",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "Managers": {"@odata.id": "/redfish/v1/Managers"},
        "SessionService": {"@odata.id": "/redfish/v1/SessionService"},
        "EventService": {"@odata.id": "/redfish/v1/EventService"},
        "Links": {"Sessions": {"@odata.id": "/redfish/v1/SessionService/Sessions"}},
        "ProtocolFeaturesSupported": {"TopSkipQuery": true}
    })
}

fn system() -> Value {
    json!({
        "@odata.id": "/redfish/v1/Systems/1",
        "Id": "1",
        "Name": "System",
        "Manufacturer": "Supermicro",
        "PowerState": "On",
        "Status": {"State": "Enabled", "Health": "OK", "HealthRollup": "Warning"},
        "MemorySummary": {"TotalSystemMemoryGiB": 256.0, "Status": {"HealthRollup": "OK"}},
        "Boot": {
            "BootSourceOverrideEnabled": "Once",
            "BootSourceOverrideTarget": "Pxe",
            "BootSourceOverrideMode": "UEFI",
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd"]
        },
        "EthernetInterfaces": [{"Id": "NIC.1", "MACAddress": "AA-BB-CC-00-11-22", "SpeedMbps": 25000}],
        "Links": {"Chassis": [{"@odata.id": "/redfish/v1/Chassis/1"}]}
    })
}

fn virtual_media() -> Value {
    json!({
        "@odata.id": "/redfish/v1/Managers/1/VirtualMedia/CD",
        "MediaTypes": ["CD", "DVD"],
        "Image": "http://images.example/ipxe.iso",
        "ConnectedVia": "URI"
    })
}

fn error() -> Value {
    json!({"error": {
        "code": "Base.1.8.GeneralError",
        "message": "A general error has occurred.",
        "@Message.ExtendedInfo": [{"MessageId": "IDRAC.2.8.RAC0218", "Message": "The maximum number of user sessions is reached."}]
    }})
}

fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let mut stream = String::new();
    stream.push_str(": keep-alive\n\n");
    stream.push_str("id: 1\r\ndata: {\"@odata.type\": \"#Event.v1_7_0.Event\",\r\ndata: \"Events\": [{\"EventType\": \"Alert\", \"Message\": \"Fan 2 at 95 °C\"}]}\r\n\r\n");
    stream.push_str("event: message\ndata: not json\n\n");
    stream.push_str("data: {\"Id\": \"2\"}\n\n");
    let mut sse = vec![3u8];
    sse.extend_from_slice(stream.as_bytes());

    let link = |pick: u8, link: &str| {
        let mut v = vec![pick];
        v.extend_from_slice(link.as_bytes());
        v
    };
    vec![
        ("redfish_json", "service_root", answer(200, &service_root())),
        ("redfish_json", "system", answer(200, &system())),
        (
            "redfish_json",
            "virtual_media",
            answer(200, &virtual_media()),
        ),
        ("redfish_json", "session_limit", answer(503, &error())),
        (
            "redfish_json",
            "login",
            answer(
                201,
                &json!({"@odata.id": "/redfish/v1/SessionService/Sessions/7", "Location": "/redfish/v1/SessionService/Sessions/7"}),
            ),
        ),
        ("redfish_sse", "event_stream", sse),
        ("bmc_endpoint", "host_port", b"bmc-1.example:8443".to_vec()),
        (
            "bmc_endpoint",
            "url",
            b"https://10.0.0.5/redfish/v1/".to_vec(),
        ),
        ("bmc_endpoint", "ipv6", b"[fe80::1]:623".to_vec()),
        ("redfish_join_url", "path", link(0, "/redfish/v1/Systems/1")),
        (
            "redfish_join_url",
            "absolute",
            link(
                1,
                "https://other.example:443/redfish/v1/SessionService/Sessions/7?x=1",
            ),
        ),
        (
            "redfish_join_url",
            "relative",
            link(2, "redfish/v1//Managers/1"),
        ),
    ]
}

fn body(seed: &[u8]) -> Value {
    serde_json::from_slice(&seed[2..]).unwrap()
}

#[test]
fn seeds_map_as_their_targets_need() {
    let seeds = seeds();
    for (target, name, bytes) in &seeds {
        match (*target, *name) {
            ("redfish_json", "service_root") => {
                let root = redfish::service_root(&body(bytes));
                assert!(root.contains("/redfish/v1/EventService"), "{root}");
                assert!(root.contains("Dell"), "{root}");
            }
            ("redfish_json", "system") => {
                let system = body(bytes);
                let boot = redfish::boot_override(&system);
                assert_eq!((boot.device, boot.enabled), (BootDevice::Pxe, true));
                let nic = &system["EthernetInterfaces"][0]["MACAddress"];
                assert_eq!(redfish::mac(nic.as_str().unwrap()), "aa:bb:cc:00:11:22");
            }
            ("redfish_json", "virtual_media") => {
                let slot = redfish::media(&body(bytes));
                assert!(slot.inserted);
                assert_eq!(slot.media_types, ["CD", "DVD"]);
            }
            ("redfish_json", "session_limit") => {
                let e = redfish::answer_error(503, &bytes[2..]).unwrap();
                assert!(matches!(e, Err(BmcError::SessionLimit)), "{e:?}");
            }
            ("redfish_json", "login") => {
                let headers = [
                    ("X-Auth-Token", "t"),
                    ("Location", "/redfish/v1/SessionService/Sessions/7"),
                ];
                let location = redfish::login(201, &headers, &bytes[2..]).unwrap().unwrap();
                assert_eq!(
                    location.as_deref(),
                    Some("/redfish/v1/SessionService/Sessions/7")
                );
            }
            ("redfish_sse", _) => {
                let mut framer = redfish::EventFramer::default();
                framer.push(&bytes[1..]);
                let messages: Vec<_> = std::iter::from_fn(|| framer.next_message()).collect();
                assert_eq!(messages.len(), 3, "{messages:?}");
                assert!(messages[1].is_err());
                assert_eq!(messages[2].as_ref().unwrap()["Id"], "2");
            }
            ("bmc_endpoint", _) => {
                let text = std::str::from_utf8(bytes).unwrap();
                Endpoint::parse(text, None).unwrap();
            }
            ("redfish_join_url", _) => {
                let link = std::str::from_utf8(&bytes[1..]).unwrap();
                let joined = redfish::join_url("https://bmc-1.example", link);
                assert!(joined.starts_with("https://bmc-1.example/"), "{joined}");
            }
            other => panic!("no check for seed {other:?}"),
        }
    }
    if let Some(dir) = std::env::var_os("INGOT_FUZZ_SEEDS") {
        let dir = std::path::PathBuf::from(dir);
        for (target, name, bytes) in &seeds {
            std::fs::create_dir_all(dir.join(target)).unwrap();
            std::fs::write(dir.join(target).join(name), bytes).unwrap();
        }
    }
}
