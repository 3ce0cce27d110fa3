//! Sensors over Redfish on every vendor profile of the emulator, in each of the schemas a BMC
//! may serve: `Sensors` with the older `Thermal`, `Thermal` alone, `Sensors` with
//! `ThermalSubsystem`/`PowerSubsystem`, and `ThermalSubsystem`/`PowerSubsystem` alone; the
//! inventory's fans, temperatures and power supplies read from the newer schema too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ingot_bmc::manager::{BmcConfig, ManagerOptions, SessionManager};
use ingot_bmc::*;
use ingot_bmc_sim::{BmcSpec, Fleet, FleetOptions, Quirks, Vendor};

#[derive(Clone, Copy, Debug)]
struct Schema {
    new_thermal: bool,
    sensors: bool,
}

const SCHEMAS: [Schema; 4] = [
    Schema {
        new_thermal: false,
        sensors: true,
    },
    Schema {
        new_thermal: false,
        sensors: false,
    },
    Schema {
        new_thermal: true,
        sensors: true,
    },
    Schema {
        new_thermal: true,
        sensors: false,
    },
];

fn config(url: &str) -> BmcConfig {
    BmcConfig {
        endpoint: Endpoint::parse(url, None).unwrap(),
        username: "admin".into(),
        password: Password::new("password"),
        protocol: Some(Protocol::Redfish),
        insecure_tls: false,
        ca_bundle_pem: None,
        pinned_sha256: None,
        system_name: None,
        basic_auth: false,
    }
}

fn find<'a>(s: &'a [Sensor], name: &str) -> &'a Sensor {
    s.iter()
        .find(|x| x.name == name)
        .unwrap_or_else(|| panic!("no sensor {name:?} in {s:#?}"))
}

#[tokio::test]
async fn every_profile_serves_sensors_in_each_schema() {
    let specs: Vec<BmcSpec> = Vendor::ALL
        .iter()
        .flat_map(|v| {
            SCHEMAS.iter().map(|_| BmcSpec {
                vendor: *v,
                ..BmcSpec::default()
            })
        })
        .collect();
    let fleet = Fleet::start(FleetOptions::default(), specs).await.unwrap();
    let manager = SessionManager::new(ManagerOptions::default());
    for (i, b) in fleet.bmcs.iter().enumerate() {
        let schema = SCHEMAS[i % SCHEMAS.len()];
        let what = format!("{:?} {schema:?}", b.state.profile.vendor);
        b.state.set_quirks(Quirks {
            new_thermal_schema: schema.new_thermal,
            no_sensors: !schema.sensors,
            ..Quirks::default()
        });
        b.state.set_fan_health("System Fan 2", "Critical");
        let bmc = manager.bmc(config(&b.url()));
        let s = bmc.sensors().await.unwrap();

        // The fans: the second one failed, whatever the schema.
        let fan1 = find(&s, "System Fan 1");
        let fan2 = find(&s, "System Fan 2");
        assert_eq!((fan1.kind, fan2.kind), (SensorKind::Fan, SensorKind::Fan));
        assert_eq!(fan1.reading, Some(5600.0), "{what}");
        assert_eq!(fan1.unit.as_deref(), Some("RPM"), "{what}");
        assert_eq!(fan1.health, Some(Health::Ok), "{what}");
        assert_eq!(fan2.reading, Some(0.0), "{what}");
        assert_eq!(fan2.health, Some(Health::Critical), "{what}");
        // The temperatures.
        let cpu = find(&s, "CPU1 Temp");
        assert_eq!(cpu.kind, SensorKind::Temperature);
        assert_eq!(cpu.reading, Some(47.5), "{what}");
        assert_eq!(cpu.unit.as_deref(), Some("Cel"), "{what}");
        let psus = s
            .iter()
            .filter(|x| x.kind == SensorKind::PowerSupply)
            .count();
        if schema.sensors {
            // `Sensor` resources: thresholds, and where each was read.
            assert_eq!(fan2.thresholds.lower_critical, Some(1000.0), "{what}");
            assert_eq!(cpu.thresholds.upper_non_critical, Some(90.0), "{what}");
            assert_eq!(cpu.thresholds.upper_critical, Some(100.0), "{what}");
            assert!(cpu.source.ends_with("/Sensors/CPU1Temp"), "{what}: {cpu:?}");
            let power = find(&s, "PSU 1 Input Power");
            assert_eq!(
                (power.kind, power.reading, power.unit.as_deref()),
                (SensorKind::Power, Some(182.0), Some("W")),
                "{what}"
            );
        } else if schema.new_thermal {
            assert!(
                fan1.source.contains("/ThermalSubsystem/Fans/"),
                "{what}: {fan1:?}"
            );
            assert!(cpu.thresholds.is_empty(), "{what}");
        } else {
            assert!(fan1.source.contains("/Thermal#/Fans/"), "{what}: {fan1:?}");
        }
        // Power supplies come from `PowerSubsystem` (the old schema has no `Power` here).
        assert_eq!(psus, if schema.new_thermal { 2 } else { 0 }, "{what}");
        let expected = 4 + if schema.sensors { 2 } else { 0 } + psus;
        assert_eq!(s.len(), expected, "{what}: {s:#?}");
        // Nothing read twice: `Sensors` replaces the fans and temperatures of the rest.
        let mut names: Vec<&str> = s.iter().map(|x| x.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), s.len(), "{what}: {names:?}");

        // The inventory's fans, temperatures and power supplies, from either schema.
        let inv = bmc.inventory().await.unwrap();
        assert_eq!(inv.fans.len(), 2, "{what}");
        assert_eq!(inv.fans[1].health, Some(Health::Critical), "{what}");
        assert_eq!(inv.temperatures.len(), 2, "{what}");
        assert_eq!(inv.temperatures[1].reading_celsius, Some(47.5), "{what}");
        assert_eq!(inv.power_supplies.len(), psus, "{what}");
    }
    manager.shutdown().await;
}
