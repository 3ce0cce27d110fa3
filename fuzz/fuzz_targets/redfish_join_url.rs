//! Every request URL is the BMC's base URL joined with a link the BMC sent: whatever the link,
//! the URL goes to the BMC's host and port (a link never sends the session token elsewhere).
#![no_main]

use ingot_bmc::Endpoint;
use ingot_bmc::redfish::fuzzing::{join_url, same_path};
use libfuzzer_sys::fuzz_target;

const BMCS: [&str; 4] = [
    "bmc-1.example",
    "https://10.0.0.5:8443",
    "http://[fe80::1]:8000",
    "[::1]",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, link)) = data.split_first() else {
        return;
    };
    let Ok(link) = std::str::from_utf8(link) else {
        return;
    };
    let base = Endpoint::parse(BMCS[usize::from(pick) % BMCS.len()], None)
        .expect("a valid address")
        .base_url();
    let want = url::Url::parse(&base).expect("a valid base URL");
    let joined = join_url(&base, link);
    let got = url::Url::parse(&joined).expect("a joined URL parses");
    assert_eq!(
        (got.scheme(), got.host(), got.port_or_known_default()),
        (want.scheme(), want.host(), want.port_or_known_default()),
        "{link:?} -> {joined}"
    );
    let _ = same_path(link, link);
});
