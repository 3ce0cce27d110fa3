//! Sensors (see [`crate::Bmc::sensors`]): per chassis, the `Sensors` collection when the
//! chassis has one, else the fans and temperatures of `Thermal` (older schema) or of
//! `ThermalSubsystem` (`Fans`, `ThermalMetrics.TemperatureReadingsCelsius`); and the power
//! supplies and voltages of `Power`, else the power supplies of `PowerSubsystem`. The reads
//! are [`SensorDocs`]; [`map`] turns them into sensors without I/O.

use super::RedfishClient;
use super::json::{health, link, string};
use crate::error::BmcError;
use crate::types::*;
use serde_json::Value;

/// Chassis whose sensors are read.
const MAX_CHASSIS: usize = 32;

/// What one chassis served for its sensors.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct SensorDocs {
    /// Members of `Sensors` (empty when the chassis has none).
    pub sensors: Vec<Value>,
    pub thermal: Option<Value>,
    pub power: Option<Value>,
    /// `ThermalSubsystem/Fans` members (read only without `Thermal`).
    pub fans: Vec<Value>,
    /// `ThermalSubsystem/ThermalMetrics` (read only without `Thermal`).
    pub thermal_metrics: Option<Value>,
    /// `PowerSubsystem/PowerSupplies` members (read only without `Power`).
    pub power_supplies: Vec<Value>,
}

impl RedfishClient {
    pub(super) async fn read_sensors(&self) -> Result<Vec<Sensor>, BmcError> {
        let root = self.root().await?;
        let Some(chassis) = &root.chassis else {
            return Ok(Vec::new());
        };
        let links = self.member_links(chassis).await?;
        let mut docs = Vec::new();
        let mut budget = MAX_SENSORS;
        for l in links.iter().take(MAX_CHASSIS) {
            let ch = match self.get(l).await {
                Ok(c) => c,
                Err(e) if e.is_auth() => return Err(e),
                Err(e) => {
                    tracing::debug!(bmc = %self.base, chassis = %l, error = %e, "skipping chassis");
                    continue;
                }
            };
            let d = self.sensor_docs(&ch, budget).await?;
            budget = budget.saturating_sub(d.sensors.len() + d.fans.len());
            docs.push(d);
        }
        Ok(map(&docs))
    }

    /// A resource that may be missing or unreadable (skipped), unless the session is refused.
    async fn optional(&self, resource: &Value, key: &str) -> Result<Option<Value>, BmcError> {
        let Some(l) = link(resource, key) else {
            return Ok(None);
        };
        match self.get(&l).await {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_auth() => Err(e),
            Err(e) => {
                tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping sensor resource");
                Ok(None)
            }
        }
    }

    async fn bounded_members(
        &self,
        resource: &Value,
        key: &str,
        limit: usize,
    ) -> Result<Vec<Value>, BmcError> {
        let Some(l) = link(resource, key) else {
            return Ok(Vec::new());
        };
        match self.members_up_to(&l, limit).await {
            Ok(m) => Ok(m),
            Err(e) if e.is_auth() => Err(e),
            Err(e) => {
                tracing::debug!(bmc = %self.base, resource = %l, error = %e, "skipping sensor collection");
                Ok(Vec::new())
            }
        }
    }

    async fn sensor_docs(&self, ch: &Value, budget: usize) -> Result<SensorDocs, BmcError> {
        let mut d = SensorDocs {
            sensors: self.bounded_members(ch, "Sensors", budget).await?,
            thermal: self.optional(ch, "Thermal").await?,
            power: self.optional(ch, "Power").await?,
            ..SensorDocs::default()
        };
        let left = budget.saturating_sub(d.sensors.len());
        if d.thermal.is_none()
            && let Some(ts) = self.optional(ch, "ThermalSubsystem").await?
        {
            // With `Sensors` the fans and temperatures are among them.
            if d.sensors.is_empty() {
                d.fans = self.bounded_members(&ts, "Fans", left).await?;
                d.thermal_metrics = self.optional(&ts, "ThermalMetrics").await?;
            }
        }
        if d.power.is_none()
            && let Some(ps) = self.optional(ch, "PowerSubsystem").await?
        {
            d.power_supplies = self.bounded_members(&ps, "PowerSupplies", left).await?;
        }
        Ok(d)
    }
}

/// The sensors the documents describe, at most [`MAX_SENSORS`].
pub(crate) fn map(docs: &[SensorDocs]) -> Vec<Sensor> {
    let mut out = Vec::new();
    for d in docs {
        out.extend(d.sensors.iter().map(sensor));
        if d.sensors.is_empty() {
            if let Some(t) = &d.thermal {
                out.extend(thermal(t));
            }
            out.extend(d.fans.iter().map(subsystem_fan));
            if let Some(m) = &d.thermal_metrics {
                out.extend(thermal_metrics(m));
            }
        }
        if let Some(p) = &d.power {
            out.extend(power(p));
        }
        out.extend(d.power_supplies.iter().map(power_supply));
        if out.len() >= MAX_SENSORS {
            break;
        }
    }
    out.truncate(MAX_SENSORS);
    out
}

fn number(v: &Value, key: &str) -> Option<f64> {
    v.get(key).and_then(Value::as_f64).filter(|f| f.is_finite())
}

fn array<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = &'a Value> {
    v.get(key).and_then(Value::as_array).into_iter().flatten()
}

fn state(v: &Value) -> SensorState {
    match v.pointer("/Status/State").and_then(Value::as_str) {
        Some("Absent") => SensorState::Absent,
        Some("Disabled" | "StandbyOffline") => SensorState::Disabled,
        Some("UnavailableOffline") => SensorState::Unavailable,
        _ => SensorState::Enabled,
    }
}

fn name(v: &Value, fallback: &str) -> String {
    string(v, "Name")
        .or_else(|| string(v, "FanName"))
        .or_else(|| string(v, "MemberId"))
        .or_else(|| string(v, "Id"))
        .unwrap_or_else(|| fallback.to_owned())
}

fn source(v: &Value, fallback: String) -> String {
    string(v, "@odata.id").unwrap_or(fallback)
}

/// A sensor with its health: the BMC's `Status.Health` and what the thresholds (if any) say
/// of the reading, the worse of them; nothing for an absent part.
fn finish(mut s: Sensor, status: Option<Health>) -> Sensor {
    if s.state == SensorState::Absent {
        s.health = None;
        s.reading = None;
        return s;
    }
    // Without thresholds a reading says nothing of its health.
    let ours = s
        .reading
        .filter(|_| !s.thresholds.is_empty())
        .map(|r| s.thresholds.health_of(r));
    s.health = worst_health([status, ours]);
    s
}

fn unit(u: Option<String>) -> Option<String> {
    u.map(|u| if u == "Percent" { "%".into() } else { u })
}

/// A `Sensor` resource.
fn sensor(v: &Value) -> Sensor {
    let t = |k: &str| {
        v.pointer(&format!("/Thresholds/{k}/Reading"))
            .and_then(Value::as_f64)
    };
    let reading_type = string(v, "ReadingType").unwrap_or_default();
    let context = string(v, "PhysicalContext").unwrap_or_default();
    let kind = match reading_type.as_str() {
        "Temperature" => SensorKind::Temperature,
        "Rotational" => SensorKind::Fan,
        "Percent" if context == "Fan" => SensorKind::Fan,
        "Voltage" => SensorKind::Voltage,
        "Current" => SensorKind::Current,
        "Power" => SensorKind::Power,
        _ => SensorKind::Other,
    };
    let s = Sensor {
        name: name(v, "sensor"),
        kind,
        reading: number(v, "Reading"),
        unit: unit(string(v, "ReadingUnits")),
        thresholds: Thresholds {
            lower_non_critical: t("LowerCaution"),
            lower_critical: t("LowerCritical"),
            lower_fatal: t("LowerFatal"),
            upper_non_critical: t("UpperCaution"),
            upper_critical: t("UpperCritical"),
            upper_fatal: t("UpperFatal"),
        },
        health: None,
        state: state(v),
        source: source(v, "Sensors".into()),
    };
    finish(s, health(v, false))
}

/// Thresholds as `Thermal` and `Power` name them.
fn old_thresholds(v: &Value) -> Thresholds {
    Thresholds {
        lower_non_critical: number(v, "LowerThresholdNonCritical"),
        lower_critical: number(v, "LowerThresholdCritical"),
        lower_fatal: number(v, "LowerThresholdFatal"),
        upper_non_critical: number(v, "UpperThresholdNonCritical"),
        upper_critical: number(v, "UpperThresholdCritical"),
        upper_fatal: number(v, "UpperThresholdFatal"),
    }
}

fn thermal(t: &Value) -> Vec<Sensor> {
    let path = string(t, "@odata.id").unwrap_or_else(|| "Thermal".into());
    let mut out = Vec::new();
    for (i, f) in array(t, "Fans").enumerate() {
        let s = Sensor {
            name: name(f, "fan"),
            kind: SensorKind::Fan,
            reading: number(f, "Reading"),
            unit: unit(string(f, "ReadingUnits")),
            thresholds: old_thresholds(f),
            health: None,
            state: state(f),
            source: source(f, format!("{path}#/Fans/{i}")),
        };
        out.push(finish(s, health(f, false)));
    }
    for (i, c) in array(t, "Temperatures").enumerate() {
        let s = Sensor {
            name: name(c, "temperature"),
            kind: SensorKind::Temperature,
            reading: number(c, "ReadingCelsius"),
            unit: Some("Cel".into()),
            thresholds: old_thresholds(c),
            health: None,
            state: state(c),
            source: source(c, format!("{path}#/Temperatures/{i}")),
        };
        out.push(finish(s, health(c, false)));
    }
    out
}

fn power(p: &Value) -> Vec<Sensor> {
    let path = string(p, "@odata.id").unwrap_or_else(|| "Power".into());
    let mut out = Vec::new();
    for (i, ps) in array(p, "PowerSupplies").enumerate() {
        let watts = number(ps, "PowerOutputWatts").or_else(|| number(ps, "LastPowerOutputWatts"));
        let s = Sensor {
            name: name(ps, "power supply"),
            kind: SensorKind::PowerSupply,
            reading: watts,
            unit: watts.map(|_| "W".into()),
            thresholds: Thresholds::default(),
            health: None,
            state: state(ps),
            source: source(ps, format!("{path}#/PowerSupplies/{i}")),
        };
        out.push(finish(s, health(ps, false)));
    }
    for (i, v) in array(p, "Voltages").enumerate() {
        let s = Sensor {
            name: name(v, "voltage"),
            kind: SensorKind::Voltage,
            reading: number(v, "ReadingVolts"),
            unit: Some("V".into()),
            thresholds: old_thresholds(v),
            health: None,
            state: state(v),
            source: source(v, format!("{path}#/Voltages/{i}")),
        };
        out.push(finish(s, health(v, false)));
    }
    out
}

/// A `ThermalSubsystem/Fans` member (`Fan` resource).
fn subsystem_fan(f: &Value) -> Sensor {
    let rpm = f.pointer("/SpeedPercent/SpeedRPM").and_then(Value::as_f64);
    let percent = f.pointer("/SpeedPercent/Reading").and_then(Value::as_f64);
    let (reading, unit) = match (rpm, percent) {
        (Some(r), _) => (Some(r), Some("RPM".to_owned())),
        (None, Some(p)) => (Some(p), Some("%".to_owned())),
        (None, None) => (None, None),
    };
    let s = Sensor {
        name: name(f, "fan"),
        kind: SensorKind::Fan,
        reading: reading.filter(|r| r.is_finite()),
        unit,
        thresholds: Thresholds::default(),
        health: None,
        state: state(f),
        source: source(f, "ThermalSubsystem/Fans".into()),
    };
    finish(s, health(f, false))
}

/// `ThermalMetrics.TemperatureReadingsCelsius`: readings only (their `Sensor` has the rest).
fn thermal_metrics(m: &Value) -> Vec<Sensor> {
    let path = string(m, "@odata.id").unwrap_or_else(|| "ThermalMetrics".into());
    array(m, "TemperatureReadingsCelsius")
        .enumerate()
        .map(|(i, t)| {
            let uri = string(t, "DataSourceUri");
            let name = string(t, "DeviceName")
                .or_else(|| {
                    uri.as_deref()
                        .and_then(|u| u.rsplit('/').next())
                        .map(str::to_owned)
                })
                .unwrap_or_else(|| format!("temperature {i}"));
            let s = Sensor {
                name,
                kind: SensorKind::Temperature,
                reading: number(t, "Reading"),
                unit: Some("Cel".into()),
                thresholds: Thresholds::default(),
                health: None,
                state: SensorState::Enabled,
                source: uri.unwrap_or_else(|| format!("{path}#/TemperatureReadingsCelsius/{i}")),
            };
            finish(s, None)
        })
        .collect()
}

/// A `PowerSubsystem/PowerSupplies` member (`PowerSupply` resource).
fn power_supply(ps: &Value) -> Sensor {
    let s = Sensor {
        name: name(ps, "power supply"),
        kind: SensorKind::PowerSupply,
        reading: None,
        unit: None,
        thresholds: Thresholds::default(),
        health: None,
        state: state(ps),
        source: source(ps, "PowerSubsystem/PowerSupplies".into()),
    };
    finish(s, health(ps, false))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn sensor_resources_take_thresholds_and_the_worse_health() {
        let docs = vec![SensorDocs {
            sensors: vec![
                json!({"@odata.id": "/redfish/v1/Chassis/1/Sensors/CPU1Temp", "Id": "CPU1Temp",
                    "Name": "CPU1 Temp", "ReadingType": "Temperature", "Reading": 91.0,
                    "ReadingUnits": "Cel", "Status": {"State": "Enabled", "Health": "OK"},
                    "Thresholds": {"UpperCaution": {"Reading": 85}, "UpperCritical": {"Reading": 95}}}),
                json!({"Id": "Fan1", "Name": "Fan 1", "ReadingType": "Rotational", "Reading": 300,
                    "ReadingUnits": "RPM", "Status": {"Health": "Critical"},
                    "Thresholds": {"LowerCritical": {"Reading": 500}}}),
                json!({"Id": "PS2", "Name": "PS2 Input Power", "ReadingType": "Power",
                    "Status": {"State": "Absent", "Health": "Critical"}}),
            ],
            // Ignored: the chassis has `Sensors`.
            thermal: Some(json!({"Fans": [{"Name": "dup"}]})),
            ..SensorDocs::default()
        }];
        let s = map(&docs);
        assert_eq!(s.len(), 3, "{s:?}");
        assert_eq!(s[0].kind, SensorKind::Temperature);
        assert_eq!(s[0].thresholds.upper_critical, Some(95.0));
        assert_eq!(s[0].health, Some(Health::Warning), "91 ≥ UpperCaution 85");
        assert_eq!(s[0].source, "/redfish/v1/Chassis/1/Sensors/CPU1Temp");
        assert_eq!(s[1].kind, SensorKind::Fan);
        assert_eq!(s[1].health, Some(Health::Critical));
        assert_eq!(s[2].state, SensorState::Absent);
        assert_eq!(s[2].health, None, "an absent part has no health");
    }

    #[test]
    fn old_and_new_schemas() {
        let old = SensorDocs {
            thermal: Some(
                json!({"@odata.id": "/T", "Fans": [{"Name": "Fan1", "Reading": 40,
                "ReadingUnits": "Percent", "Status": {"Health": "OK"}}],
                "Temperatures": [{"Name": "Inlet", "ReadingCelsius": 44,
                "UpperThresholdNonCritical": 42, "UpperThresholdCritical": 47}]}),
            ),
            power: Some(
                json!({"PowerSupplies": [{"Name": "PSU1", "LastPowerOutputWatts": 180,
                "Status": {"Health": "Warning"}}],
                "Voltages": [{"Name": "12V", "ReadingVolts": 12.1, "LowerThresholdCritical": 11}]}),
            ),
            ..SensorDocs::default()
        };
        let s = map(&[old]);
        let names: Vec<_> = s.iter().map(|s| (s.name.as_str(), s.kind)).collect();
        assert_eq!(
            names,
            [
                ("Fan1", SensorKind::Fan),
                ("Inlet", SensorKind::Temperature),
                ("PSU1", SensorKind::PowerSupply),
                ("12V", SensorKind::Voltage)
            ]
        );
        assert_eq!(s[0].unit.as_deref(), Some("%"));
        assert_eq!(s[0].source, "/T#/Fans/0");
        assert_eq!(s[1].health, Some(Health::Warning));
        assert_eq!(s[2].reading, Some(180.0));
        assert_eq!(s[2].health, Some(Health::Warning));
        assert_eq!(s[3].health, Some(Health::Ok));

        let new = SensorDocs {
            fans: vec![json!({"@odata.id": "/F/1", "Name": "Fan 1",
                "SpeedPercent": {"Reading": 45, "SpeedRPM": 5400}, "Status": {"Health": "OK"}})],
            thermal_metrics: Some(json!({"TemperatureReadingsCelsius": [
                {"DataSourceUri": "/redfish/v1/Chassis/1/Sensors/Inlet", "Reading": 24}]})),
            power_supplies: vec![json!({"@odata.id": "/P/1", "Name": "PSU 1",
                "Status": {"State": "Enabled", "Health": "Critical"}})],
            ..SensorDocs::default()
        };
        let s = map(&[new]);
        assert_eq!(s.len(), 3);
        assert_eq!(
            (s[0].reading, s[0].unit.as_deref()),
            (Some(5400.0), Some("RPM"))
        );
        assert_eq!(s[1].name, "Inlet");
        assert_eq!(s[1].health, None, "no status, no thresholds: unknown");
        assert_eq!(s[2].health, Some(Health::Critical));
    }

    #[test]
    fn at_most_max_sensors() {
        let many = SensorDocs {
            sensors: (0..MAX_SENSORS + 10)
                .map(|i| json!({"Id": i.to_string(), "Reading": 1}))
                .collect(),
            ..SensorDocs::default()
        };
        assert_eq!(map(&[many.clone(), many]).len(), MAX_SENSORS);
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<f64>().prop_map(|f| json!(f)),
            any::<i64>().prop_map(Value::from),
            "[A-Za-z]{0,8}".prop_map(Value::from),
            prop_oneof![
                Just("Reading"),
                Just("Status"),
                Just("Absent"),
                Just("Thresholds")
            ]
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("Reading".to_owned()),
                        Just("ReadingType".to_owned()),
                        Just("Status".to_owned()),
                        Just("State".to_owned()),
                        Just("Health".to_owned()),
                        Just("Thresholds".to_owned()),
                        Just("UpperCritical".to_owned()),
                        Just("Fans".to_owned()),
                        Just("Temperatures".to_owned()),
                        Just("PowerSupplies".to_owned()),
                        Just("SpeedPercent".to_owned()),
                        Just("TemperatureReadingsCelsius".to_owned()),
                        "[A-Za-z]{1,6}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]
        #[test]
        fn hostile_json_never_panics(a in arb_json(), b in arb_json(), c in arb_json()) {
            let d = SensorDocs {
                sensors: vec![a.clone(), b.clone()],
                ..SensorDocs::default()
            };
            let e = SensorDocs {
                thermal: Some(a.clone()),
                power: Some(b.clone()),
                fans: vec![c.clone()],
                thermal_metrics: Some(c.clone()),
                power_supplies: vec![a],
                ..SensorDocs::default()
            };
            for s in map(&[d, e]) {
                if let Some(r) = s.reading {
                    prop_assert!(r.is_finite());
                }
            }
        }
    }
}
