//! `ingot bmc` end to end against the emulator: argument parsing, the `--json` document and
//! exit codes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use clap::Parser;
use ingot_bmc::cli::{BmcArgs, execute_with};
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Vendor};
use serde_json::Value;
use std::time::Duration;

#[derive(Parser)]
struct Top {
    #[command(flatten)]
    bmc: BmcArgs,
}

fn parse(args: &[&str]) -> BmcArgs {
    Top::try_parse_from(std::iter::once("bmc").chain(args.iter().copied()))
        .unwrap()
        .bmc
}

async fn run(args: &[&str]) -> (Value, String, u8) {
    let out = execute_with(parse(args), Vec::new(), |name| {
        (name == "BMC_PW").then(|| "password".to_owned())
    })
    .await;
    (out.json, out.text, out.code)
}

/// `--host URL --user admin --password-env BMC_PW --json <command>`.
fn json_command(url: &str, command: &[&str]) -> Vec<String> {
    [
        "--host",
        url,
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--json",
    ]
    .iter()
    .chain(command)
    .map(|s| s.to_string())
    .collect()
}

#[tokio::test]
async fn json_documents_and_exit_codes() {
    let fleet = Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor: Vendor::Supermicro,
            power_delay: Duration::from_millis(100),
            ..BmcSpec::default()
        }],
    )
    .await
    .unwrap();
    let url = fleet.bmcs[0].url();
    let with = |extra: &[&str]| json_command(&url, extra);
    fn args(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    let v = with(&["power", "status"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0);
    assert_eq!(json["schemaVersion"], 1);
    assert_eq!(json["ok"], true);
    assert_eq!(json["command"], "power status");
    assert_eq!(json["protocol"], "redfish");
    assert_eq!(json["result"]["powerState"], "on");

    let v = with(&["power", "cycle"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["result"]["sent"][0], "PowerCycle");
    assert_eq!(json["result"]["alreadyInState"], false);

    let v = with(&["power", "off", "--wait", "20"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["result"]["powerState"], "off");
    let v = with(&["power", "on", "--wait", "20"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["result"]["sent"][0], "On");
    assert_eq!(json["result"]["powerState"], "on");

    let v = with(&["boot", "pxe", "--once"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["result"]["device"], "pxe");
    assert_eq!(json["result"]["persistent"], false);
    assert_eq!(json["result"]["mode"], "uefi", "Supermicro keeps UEFI");

    let v = with(&["inventory"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0);
    assert_eq!(json["result"]["manufacturer"], "Supermicro");
    assert_eq!(json["result"]["vendor"], "supermicro");
    assert!(
        json["result"]["nics"][0]["macAddress"]
            .as_str()
            .unwrap()
            .starts_with("02:00:")
    );

    let v = with(&["sel"]);
    let (json, _, code) = run(&args(&v)).await;
    assert_eq!(code, 0);
    assert_eq!(json["result"]["entries"].as_array().unwrap().len(), 2);

    // Text mode.
    let (_, text, code) = run(&[
        "--host",
        &url,
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "power",
        "status",
    ])
    .await;
    assert_eq!(code, 0);
    assert!(text.starts_with("Power is "), "{text}");

    // Errors: a missing variable is a usage error; a wrong password a BMC error.
    let (json, _, code) = run(&[
        "--host",
        &url,
        "--user",
        "admin",
        "--password-env",
        "NOPE",
        "--json",
        "sel",
    ])
    .await;
    assert_eq!(code, 2);
    assert_eq!(json["error"]["kind"], "usage");
    let out = execute_with(
        parse(&[
            "--host",
            &url,
            "--user",
            "admin",
            "--password-env",
            "X",
            "--json",
            "power",
            "status",
        ]),
        Vec::new(),
        |_| Some("wrong".into()),
    )
    .await;
    assert_eq!(out.code, 1);
    assert_eq!(out.json["ok"], false);
    assert_eq!(out.json["error"]["kind"], "unauthorized");
    assert!(
        !out.json.to_string().contains("wrong"),
        "no secret in the output"
    );

    let port = common::free_port();
    let dead = format!("http://127.0.0.1:{port}");
    let (json, _, code) = run(&[
        "--host",
        &dead,
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--json",
        "--timeout",
        "2",
        "power",
        "status",
    ])
    .await;
    assert_eq!(code, 1);
    assert_eq!(json["error"]["kind"], "unreachable");

    let (json, _, code) = run(&[
        "--host",
        "ftp://x",
        "--user",
        "a",
        "--password-env",
        "BMC_PW",
        "--json",
        "sel",
    ])
    .await;
    assert_eq!(code, 2);
    assert_eq!(json["error"]["kind"], "usage");

    // IPMI forced where only Redfish listens: nothing answers on UDP, a typed timeout.
    let (json, _, code) = run(&[
        "--host",
        &url,
        "--user",
        "admin",
        "--password-env",
        "BMC_PW",
        "--protocol",
        "ipmi",
        "--json",
        "power",
        "status",
    ])
    .await;
    assert_eq!(code, 1);
    assert_eq!(json["error"]["kind"], "timeout");
}

#[tokio::test]
async fn media_insert_show_and_eject() {
    let fleet = Fleet::start(
        FleetOptions::default(),
        vec![BmcSpec {
            vendor: Vendor::Hpe,
            ..BmcSpec::default()
        }],
    )
    .await
    .unwrap();
    let url = fleet.bmcs[0].url();
    let image = "http://127.0.0.1:9/boot.iso";
    let run_media = |extra: Vec<&'static str>| {
        let args = json_command(&url, &[&["media"], extra.as_slice()].concat());
        async move { run(&args.iter().map(String::as_str).collect::<Vec<_>>()).await }
    };
    let cd = |json: &Value| -> Value {
        json["result"]["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| {
                d["mediaTypes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t == "CD")
            })
            .cloned()
            .unwrap()
    };

    let (json, _, code) = run_media(vec!["insert", image]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["command"], "media insert");
    assert_eq!(cd(&json)["image"], image);
    assert_eq!(cd(&json)["inserted"], true);
    // HPE keeps a floppy/USB device beside the CD: both are listed.
    assert_eq!(json["result"]["devices"].as_array().unwrap().len(), 2);

    let (json, _, code) = run_media(vec!["show"]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(cd(&json)["image"], image);

    let (json, _, code) = run_media(vec!["eject", "--kind", "DVD"]).await;
    assert_eq!(code, 0, "{json}");
    assert_eq!(cd(&json)["inserted"], false);
    assert_eq!(
        fleet.bmcs[0].state.media_log(),
        vec![format!("insert 2 {image}"), "eject 2".to_owned()]
    );

    // Usage: insert needs a URL, eject takes none.
    let insert_without_url = Top::try_parse_from([
        "bmc",
        "--host",
        "h",
        "--user",
        "u",
        "--password-env",
        "P",
        "media",
        "insert",
    ]);
    assert!(insert_without_url.is_err());
    let (json, text, code) = run_media(vec!["eject", image]).await;
    assert_eq!(code, 2, "{json}");
    assert!(text.contains("media eject takes no URL"), "{text}");
}
