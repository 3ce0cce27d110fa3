//! DMTF Redfish-Service-Validator against the emulator, one run per vendor profile and one on
//! a profile serving the newer `ThermalSubsystem`/`PowerSubsystem` instead of `Thermal`, with
//! the DMTF CSDL schemas read offline (bundled by the `nv-redfish-schema` crate). No failures
//! allowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Quirks, Vendor};
use std::path::PathBuf;
use std::process::Command;

fn require_tool(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{tool}` is not on PATH. It is a test peer listed in scripts/deps/requirements.txt; \
                 install it with `source scripts/lib.sh && install_python_packages` (the README's \
                 test command does this), then run the tests again"
            )
        })
}

/// `(pass, warn, fail)` from the validator's summary table.
fn summary(out: &str) -> Option<(u64, u64, u64)> {
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.contains("PASS") && l.contains("FAIL"))?;
    let row = lines[header + 1..]
        .iter()
        .find(|l| l.chars().any(|c| c.is_ascii_digit()))?;
    let nums: Vec<u64> = row
        .split('|')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    Some((*nums.first()?, *nums.get(1)?, *nums.get(2)?))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_validator_finds_no_failure() {
    let validator = require_tool("rf_service_validator");
    let schemas = nv_redfish_schema::REDFISH_CSDL_DIR;
    assert!(
        std::path::Path::new(schemas)
            .join("ServiceRoot_v1.xml")
            .is_file(),
        "offline CSDL schemas missing at {schemas}"
    );
    let fleet = Fleet::start(
        FleetOptions::default(),
        Vendor::ALL
            .iter()
            .chain([&Vendor::Dell])
            .map(|v| BmcSpec {
                vendor: *v,
                ..BmcSpec::default()
            })
            .collect(),
    )
    .await
    .expect("fleet");
    if let Some(last) = fleet.bmcs.last() {
        last.state.set_quirks(Quirks {
            new_thermal_schema: true,
            ..Quirks::default()
        });
    }
    for (i, bmc) in fleet.bmcs.iter().enumerate() {
        let logdir = std::env::temp_dir().join(format!(
            "ingot-rfv-{}-{}-{i}",
            std::process::id(),
            bmc.state.profile.vendor
        ));
        let url = bmc.url();
        let validator = validator.clone();
        let logdir2 = logdir.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(validator)
                .args(["--rhost", &url, "-u", "admin", "-p", "password"])
                .args(["--authtype", "Session", "--skipschema", "--timeout", "15"])
                .arg("--schema_directory")
                .arg(schemas)
                .arg("--logdir")
                .arg(&logdir2)
                .output()
        })
        .await
        .expect("join")
        .expect("run rf_service_validator");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        let (pass, warn, fail) =
            summary(&stdout).unwrap_or_else(|| panic!("no summary from the validator:\n{stdout}"));
        eprintln!(
            "{}: validator pass {pass}, warn {warn}, fail {fail}",
            bmc.state.profile.vendor
        );
        assert_eq!(
            fail, 0,
            "{}: validator failures:\n{stdout}",
            bmc.state.profile.vendor
        );
        assert!(
            pass > 300,
            "{}: too little was validated:\n{stdout}",
            bmc.state.profile.vendor
        );
        assert!(
            out.status.success(),
            "validator exit status {:?}",
            out.status
        );
        let _ = std::fs::remove_dir_all(logdir);
        // The validator logged in with a session and out again.
        assert_eq!(bmc.state.snapshot().sessions_created, 1);
    }
}
