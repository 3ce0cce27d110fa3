//! Properties of the Redfish client's URL building, checked over generated inputs (proptest):
//! whatever link a BMC sends (a path, a query, an absolute URL naming another host, `//host`,
//! backslashes, `@`, encoded characters), the request URL built from it goes to the BMC's own
//! scheme, host and port, so the session token never leaves for another host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_bmc::Endpoint;
use ingot_bmc::redfish::fuzzing::join_url;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// A BMC address as `--host` or a Machine takes it.
fn endpoint() -> impl Strategy<Value = Endpoint> {
    let host = prop_oneof![
        "[a-z][a-z0-9-]{0,10}(\\.[a-z][a-z0-9-]{0,10}){0,3}",
        any::<[u8; 4]>().prop_map(|o| Ipv4Addr::from(o).to_string()),
        any::<[u16; 8]>().prop_map(|s| format!("[{}]", Ipv6Addr::from(s))),
    ];
    (
        prop_oneof![Just(""), Just("https://"), Just("http://")],
        host,
        prop::option::of(1u16..),
    )
        .prop_map(|(scheme, host, port)| {
            let text = match port {
                Some(p) => format!("{scheme}{host}:{p}"),
                None => format!("{scheme}{host}"),
            };
            Endpoint::parse(&text, None).unwrap()
        })
}

/// Links as a BMC may write them, well-formed or hostile.
fn link() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just("/".to_owned()),
        Just("//".to_owned()),
        Just("\\".to_owned()),
        Just("@".to_owned()),
        Just(":".to_owned()),
        Just("?".to_owned()),
        Just("#".to_owned()),
        Just("%2F".to_owned()),
        Just("..".to_owned()),
        Just("http://".to_owned()),
        Just("https://".to_owned()),
        Just("HTTPS://".to_owned()),
        Just("evil.example".to_owned()),
        Just("[::1]".to_owned()),
        Just("redfish/v1".to_owned()),
        "[ -~]{0,6}",
        any::<char>().prop_map(String::from),
    ];
    prop_oneof![
        prop::collection::vec(piece, 0..8).prop_map(|p| p.concat()),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn join_url_never_changes_the_host(bmc in endpoint(), link in link()) {
        let base = bmc.base_url();
        let want = url::Url::parse(&base).unwrap();
        let joined = join_url(&base, &link);
        let got = url::Url::parse(&joined);
        prop_assert!(got.is_ok(), "{:?} -> {:?}: {:?}", link, joined, got);
        let got = got.unwrap();
        prop_assert_eq!(
            (got.scheme(), got.host(), got.port_or_known_default()),
            (want.scheme(), want.host(), want.port_or_known_default()),
            "{:?} -> {:?}", link, joined
        );
    }
}
