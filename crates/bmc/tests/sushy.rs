//! The Redfish client against a real peer: sushy-tools' `sushy-emulator` with its fake driver,
//! over real HTTP with HTTP Basic authentication (sushy has no SessionService, so this also
//! covers the Basic fallback). Power changes land after a random delay: the test polls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{poll_until, require_tool, spawn};
use ingot_bmc::cli::{BmcArgs, execute_with};
use ingot_bmc::redfish::{RedfishClient, RedfishOptions};
use ingot_bmc::*;
use std::process::{Command, Stdio};
use std::time::Duration;

const USER: &str = "operator";
const PASS: &str = "s3cret-pw";

struct Sushy {
    _child: common::ChildGuard,
    url: String,
    _dir: std::path::PathBuf,
}

fn start_sushy() -> Sushy {
    start_sushy_in("UEFI")
}

/// sushy-emulator whose one fake system boots in `boot_mode` (`UEFI` or `Legacy`).
fn start_sushy_in(boot_mode: &str) -> Sushy {
    let sushy = require_tool("sushy-emulator");
    let python = sushy
        .parent()
        .map(|d| d.join("python3"))
        .filter(|p| p.is_file());
    let python = python.unwrap_or_else(|| "python3".into());
    let dir = common::temp_dir("sushy");
    // bcrypt digest with the interpreter that runs sushy (bcrypt is one of its dependencies).
    let out = Command::new(&python)
        .args([
            "-c",
            "import bcrypt,sys; print(bcrypt.hashpw(sys.argv[1].encode(), bcrypt.gensalt(rounds=4)).decode())",
            PASS,
        ])
        .output()
        .expect("run python for bcrypt");
    assert!(
        out.status.success(),
        "bcrypt: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let digest = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    std::fs::write(dir.join("htpasswd"), format!("{USER}:{digest}\n")).unwrap();
    let port = common::free_port();
    let conf = format!(
        r#"
SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'
SUSHY_EMULATOR_LISTEN_PORT = {port}
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '{state}'
SUSHY_EMULATOR_AUTH_FILE = '{auth}'
SUSHY_EMULATOR_FAKE_SYSTEMS = [{{
    'uuid': '27946b59-9e44-4fa7-8e91-f3527a1ef094',
    'name': 'fake',
    'power_state': 'Off',
    'boot_mode': '{boot_mode}',
    'external_notifier': False,
    'nics': [{{'mac': '00:5c:52:31:3a:9c', 'ip': '127.0.0.2'}}],
}}]
"#,
        state = dir.join("state").display(),
        auth = dir.join("htpasswd").display(),
    );
    std::fs::create_dir_all(dir.join("state")).unwrap();
    std::fs::write(dir.join("conf.py"), conf).unwrap();
    let log = std::fs::File::create(dir.join("sushy.log")).unwrap();
    let child = spawn(
        Command::new(&sushy)
            // sushy fetches virtual media images itself: from loopback, never through a proxy.
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("no_proxy", "127.0.0.1,localhost")
            .arg("--config")
            .arg(dir.join("conf.py"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log),
    );
    Sushy {
        _child: child,
        url: format!("http://127.0.0.1:{port}"),
        _dir: dir,
    }
}

async fn wait_ready(url: &str) {
    let http = reqwest::Client::new();
    poll_until(
        "sushy-emulator to listen",
        Duration::from_secs(30),
        || async {
            http.get(format!("{url}/redfish/v1/"))
                .send()
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
}

fn client(url: &str, password: &str) -> RedfishClient {
    RedfishClient::new(
        &Endpoint::parse(url, None).unwrap(),
        USER,
        Password::new(password),
        RedfishOptions {
            timeout: Duration::from_secs(10),
            transition_timeout: Duration::from_secs(30),
            ..RedfishOptions::default()
        },
    )
    .unwrap()
}

async fn wait_power(c: &RedfishClient, want: PowerState) {
    // sushy's fake driver applies a power change 1-11 s later.
    poll_until(
        &format!("sushy power {want}"),
        Duration::from_secs(40),
        || async { (c.power_state().await.ok() == Some(want)).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn against_sushy_emulator() {
    let sushy = start_sushy();
    wait_ready(&sushy.url).await;
    let c = client(&sushy.url, PASS);

    // Basic fallback: no SessionService on sushy.
    assert_eq!(c.power_state().await.unwrap(), PowerState::Off);
    assert!(!c.has_session().await);

    // Wrong password: typed error.
    let bad = client(&sushy.url, "wrong");
    assert!(matches!(
        bad.power_state().await,
        Err(BmcError::Unauthorized)
    ));

    // Power on, poll; on again sends nothing; soft off; cycle via ForceOff + On.
    let o = c.power(PowerAction::On).await.unwrap();
    assert_eq!(o.sent, vec!["On"]);
    wait_power(&c, PowerState::On).await;
    assert!(c.power(PowerAction::On).await.unwrap().already_in_state);
    let o = c.power(PowerAction::Reset).await.unwrap();
    assert_eq!(o.sent, vec!["ForceRestart"]);
    wait_power(&c, PowerState::On).await;
    // sushy offers no PowerCycle: ForceOff, wait for Off, On.
    let o = c.power(PowerAction::Cycle).await.unwrap();
    assert_eq!(o.sent, vec!["ForceOff", "On"]);
    wait_power(&c, PowerState::On).await;
    let o = c.power(PowerAction::Off).await.unwrap();
    assert_eq!(o.sent, vec!["ForceOff"]);
    wait_power(&c, PowerState::Off).await;

    // Boot override: PXE once, mode kept; then persistent disk.
    let before = c.boot_override().await.unwrap();
    let b = c
        .set_boot_override(BootRequest {
            device: BootDevice::Pxe,
            persistent: false,
            mode: None,
        })
        .await
        .unwrap();
    assert_eq!(b.device, BootDevice::Pxe);
    // sushy models the target and mode, and always reports `Continuous`.
    assert!(b.enabled);
    assert_eq!(b.mode, before.mode, "boot mode never flipped");
    let b = c
        .set_boot_override(BootRequest {
            device: BootDevice::Disk,
            persistent: true,
            mode: None,
        })
        .await
        .unwrap();
    assert_eq!(b.device, BootDevice::Disk);
    assert!(b.persistent);
    assert_eq!(b.mode, before.mode);

    // Inventory: the fake driver models the identity and the NICs.
    let inv = c.inventory().await.unwrap();
    assert_eq!(inv.power_state, PowerState::Off);
    assert!(
        inv.nics
            .iter()
            .any(|n| n.mac_address.as_deref() == Some("00:5c:52:31:3a:9c")),
        "{inv:?}"
    );
    assert_eq!(
        inv.uuid.as_deref(),
        Some("27946b59-9e44-4fa7-8e91-f3527a1ef094")
    );
    assert_eq!(inv.vendor, "generic");

    // Sensors: the fake driver serves the older `Thermal` (no `Sensors`, no `Power`): its two
    // fans and two temperatures with their thresholds.
    let s = c.sensors().await.unwrap();
    let kinds: Vec<SensorKind> = s.iter().map(|x| x.kind).collect();
    assert_eq!(
        kinds,
        [
            SensorKind::Fan,
            SensorKind::Fan,
            SensorKind::Temperature,
            SensorKind::Temperature
        ],
        "{s:#?}"
    );
    assert!(s[0].source.contains("/Thermal#/Fans/0"), "{:?}", s[0]);
    assert_eq!(s[0].unit.as_deref(), Some("RPM"));
    let cpu = s.iter().find(|x| x.name == "CPU Temp").unwrap();
    assert_eq!(cpu.reading, Some(41.0));
    assert_eq!(cpu.unit.as_deref(), Some("Cel"));
    assert_eq!(
        (
            cpu.thresholds.upper_non_critical,
            cpu.thresholds.upper_critical,
            cpu.thresholds.upper_fatal
        ),
        (Some(42.0), Some(45.0), Some(48.0))
    );
    assert_eq!(cpu.health, Some(Health::Ok));
    let intake = s.iter().find(|x| x.name == "Chassis Intake Temp").unwrap();
    assert_eq!(intake.thresholds.lower_non_critical, Some(10.0));
    assert_eq!(intake.thresholds.lower_critical, Some(5.0));

    // The CLI end to end, --json (the password comes from the named variable).
    let args = BmcArgs {
        host: sushy.url.clone(),
        port: None,
        user: USER.into(),
        password_env: "INGOT_TEST_SUSHY_PW".into(),
        protocol: Some(Protocol::Redfish),
        insecure: false,
        ca_bundle: None,
        auth: ingot_bmc::cli::AuthArg::Auto,
        timeout: 10,
        cipher_suite: None,
        json: true,
        command: ingot_bmc::cli::BmcCommand::Power {
            op: ingot_bmc::cli::PowerOp::Status,
            wait: None,
        },
    };
    let out = execute_with(args.clone(), Vec::new(), |name| {
        (name == "INGOT_TEST_SUSHY_PW").then(|| PASS.to_owned())
    })
    .await;
    assert_eq!(out.code, 0, "{:?}", out.json);
    assert_eq!(out.json["ok"], true);
    assert_eq!(out.json["protocol"], "redfish");
    assert_eq!(out.json["result"]["powerState"], "off");

    // `ingot bmc sensors --json` on the same BMC.
    let out = execute_with(
        BmcArgs {
            command: ingot_bmc::cli::BmcCommand::Sensors,
            ..args
        },
        Vec::new(),
        |name| (name == "INGOT_TEST_SUSHY_PW").then(|| PASS.to_owned()),
    )
    .await;
    assert_eq!(out.code, 0, "{:?}", out.json);
    assert_eq!(out.json["command"], "sensors");
    let sensors = out.json["result"]["sensors"].as_array().unwrap();
    assert_eq!(sensors.len(), 4, "{}", out.json);
    assert_eq!(sensors[2]["name"], "CPU Temp");
    assert_eq!(sensors[2]["thresholds"]["upperCritical"], 45.0);
    assert_eq!(sensors[2]["health"], "ok");
}

/// sushy's own view of its CD device (its API read directly, not through ingot's client).
async fn sushy_cd(url: &str) -> serde_json::Value {
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = &http;
        async move {
            http.get(format!("{url}{path}"))
                .basic_auth(USER, Some(PASS))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let systems = get("/redfish/v1/Systems".into()).await;
    let system = systems["Members"][0]["@odata.id"]
        .as_str()
        .unwrap()
        .to_owned();
    get(format!("{system}/VirtualMedia/Cd")).await
}

#[tokio::test]
async fn virtual_media_on_sushy_emulator() {
    let sushy = start_sushy();
    wait_ready(&sushy.url).await;
    let image = ingot_bmc_sim::ImageServer::start("boot.iso", b"not really an ISO".to_vec())
        .await
        .unwrap();
    let c = client(&sushy.url, PASS);

    // sushy fetches the image when it is inserted, and reports it attached.
    c.set_virtual_media(MediaKind::Cd, Some(image.url.clone()))
        .await
        .unwrap();
    let cd = sushy_cd(&sushy.url).await;
    assert_eq!(cd["Image"], image.url.as_str(), "{cd}");
    assert_eq!(cd["Inserted"], true, "{cd}");
    assert_eq!(image.fetches(), 1, "sushy fetched the image once");
    let slots = c.virtual_media().await.unwrap();
    assert!(
        slots.iter().any(|s| s.takes(MediaKind::Cd)
            && s.inserted
            && s.image.as_deref() == Some(&image.url)),
        "{slots:?}"
    );

    // The same image again: already attached, not sent (sushy would fetch it again).
    c.set_virtual_media(MediaKind::Dvd, Some(image.url.clone()))
        .await
        .unwrap();
    assert_eq!(image.fetches(), 1);

    // Another image: the device is emptied and the new one attached.
    let other = format!("{}?build=2", image.url);
    c.set_virtual_media(MediaKind::Cd, Some(other.clone()))
        .await
        .unwrap();
    let cd = sushy_cd(&sushy.url).await;
    assert_eq!(cd["Image"], other.as_str(), "{cd}");
    assert_eq!(cd["Inserted"], true, "{cd}");
    assert_eq!(image.fetches(), 2);

    // An image the BMC cannot fetch: sushy's refusal, with its reason.
    let missing = image.url.replace("boot.iso", "missing.iso");
    let e = c
        .set_virtual_media(MediaKind::Cd, Some(missing))
        .await
        .unwrap_err();
    assert!(
        matches!(e, BmcError::Http { status: 400, .. }) && e.to_string().contains("404"),
        "{e}"
    );

    c.set_virtual_media(MediaKind::Cd, None).await.unwrap();
    let cd = sushy_cd(&sushy.url).await;
    assert_eq!(cd["Inserted"], false, "{cd}");
}

/// The boot mode sushy's system reports, read from sushy itself (not through ingot's client).
async fn sushy_boot_mode(url: &str) -> String {
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        async move {
            http.get(format!("{url}{path}"))
                .basic_auth(USER, Some(PASS))
                .send()
                .await
                .unwrap()
                .json::<serde_json::Value>()
                .await
                .unwrap()
        }
    };
    let systems = get("/redfish/v1/Systems".into()).await;
    let system = systems["Members"][0]["@odata.id"]
        .as_str()
        .unwrap()
        .to_owned();
    let system = get(system).await;
    system["Boot"]["BootSourceOverrideMode"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A one-time network boot keeps the mode a real peer reports: a UEFI system stays UEFI, a
/// Legacy one stays Legacy; only a mode asked for explicitly changes it.
#[tokio::test]
async fn a_one_time_network_boot_never_switches_the_mode_on_sushy() {
    for (mode, kept) in [("UEFI", BootMode::Uefi), ("Legacy", BootMode::Legacy)] {
        let sushy = start_sushy_in(mode);
        wait_ready(&sushy.url).await;
        assert_eq!(sushy_boot_mode(&sushy.url).await, mode);
        let c = client(&sushy.url, PASS);
        let o = c
            .set_boot_override(BootRequest {
                device: BootDevice::Pxe,
                persistent: false,
                mode: None,
            })
            .await
            .unwrap();
        assert_eq!((o.device, o.mode), (BootDevice::Pxe, Some(kept)), "{mode}");
        assert_eq!(
            sushy_boot_mode(&sushy.url).await,
            mode,
            "sushy still in {mode}"
        );
        // Asked for explicitly, the other mode is taken.
        let other = match kept {
            BootMode::Uefi => BootMode::Legacy,
            BootMode::Legacy => BootMode::Uefi,
        };
        let o = c
            .set_boot_override(BootRequest {
                device: BootDevice::Pxe,
                persistent: false,
                mode: Some(other),
            })
            .await
            .unwrap();
        assert_eq!(o.mode, Some(other));
        assert_eq!(sushy_boot_mode(&sushy.url).await, other.redfish());
    }
}
