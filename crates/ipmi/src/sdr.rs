//! Sensors: the SDR repository (IPMI v2.0 §33: Get SDR Repository Info, Reserve SDR
//! Repository, Get SDR with partial reads), Full (0x01) and Compact (0x02) sensor records
//! (§43), Get Sensor Reading and Get Sensor Thresholds (§35), and the reading conversion of
//! §36: `y = L[(M*x + B*10^Bexp) * 10^Rexp]`.
//!
//! Every parser here takes any bytes: a short or hostile record is skipped or refused with
//! an error, never a panic. The repository walk is bounded: at most [`MAX_SDR_RECORDS`]
//! records are read and at most [`MAX_SENSORS`] sensors kept, record ids that loop are an
//! error, and a reservation cancelled mid-read restarts the walk at most
//! [`MAX_SDR_RESTARTS`] times.

use crate::client::{Client, check};
use crate::error::{Error, Result};

const NETFN_SENSOR: u8 = 0x04;
const NETFN_STORAGE: u8 = 0x0A;

/// Sensors kept from one repository; records past this are not read.
pub const MAX_SENSORS: usize = 1024;
/// Records (of any type) read from one repository before the walk stops.
pub const MAX_SDR_RECORDS: usize = 4096;
/// Restarts of the walk after the BMC cancelled the reservation (its SDRs changed).
pub const MAX_SDR_RESTARTS: u32 = 5;
/// Bytes asked for per Get SDR partial read (many BMCs cannot return more in one response).
pub const SDR_CHUNK: u8 = 16;
/// The length of the record header (record id, version, type, length).
const HEADER: usize = 5;

/// The sensor's reading conversion (Full records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conversion {
    /// Analog data format (units 1, bits 7:6): 0 unsigned, 1 one's complement, 2 two's
    /// complement, 3 no analog reading.
    pub format: u8,
    /// Linearization (0 linear, 1 ln, 2 log10, 3 log2, 4 e^x, 5 10^x, 6 2^x, 7 1/x, 8 x²,
    /// 9 x³, 10 √x, 11 ∛x; 0x70-0x7F non-linear, converted as linear).
    pub linearization: u8,
    /// M, 10-bit two's complement.
    pub m: i16,
    /// B, 10-bit two's complement.
    pub b: i16,
    /// R (result) exponent, 4-bit two's complement.
    pub r_exp: i8,
    /// B exponent, 4-bit two's complement.
    pub b_exp: i8,
}

fn sign_extend(v: u16, bits: u32) -> i16 {
    let shift = 16 - bits;
    ((v << shift) as i16) >> shift
}

impl Conversion {
    /// The reading a raw byte stands for; `None` when the sensor has no analog reading or
    /// the result is not a finite number.
    pub fn convert(&self, raw: u8) -> Option<f64> {
        let x = match self.format {
            0 => f64::from(raw),
            // One's complement: a negative value is the inverted bits.
            1 if raw & 0x80 != 0 => -f64::from(!raw & 0x7F),
            1 => f64::from(raw),
            2 => f64::from(raw as i8),
            _ => return None,
        };
        let y = (f64::from(self.m) * x + f64::from(self.b) * 10f64.powi(i32::from(self.b_exp)))
            * 10f64.powi(i32::from(self.r_exp));
        let y = match self.linearization {
            0 | 0x70..=0x7F => y,
            1 => y.ln(),
            2 => y.log10(),
            3 => y.log2(),
            4 => y.exp(),
            5 => 10f64.powf(y),
            6 => 2f64.powf(y),
            7 => 1.0 / y,
            8 => y * y,
            9 => y * y * y,
            10 => y.sqrt(),
            11 => y.cbrt(),
            _ => return None,
        };
        // Rounded to what the exponents can express, so 0.1 steps print as such.
        let y = round_to(y, i32::from(self.r_exp).min(0));
        y.is_finite().then_some(y)
    }
}

/// `v` rounded to `10^exp` (exp ≤ 0), and to at most 6 decimals.
fn round_to(v: f64, exp: i32) -> f64 {
    let decimals = (-exp).clamp(0, 6);
    let f = 10f64.powi(decimals);
    (v * f).round() / f
}

/// A Full or Compact sensor record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SensorRecord {
    pub record_id: u16,
    /// 0x01 Full, 0x02 Compact.
    pub record_type: u8,
    /// Sensor owner id (an IPMB slave address when bit 0 is clear).
    pub owner_id: u8,
    /// Sensor owner LUN (bits 1:0).
    pub owner_lun: u8,
    pub number: u8,
    pub entity_id: u8,
    pub entity_instance: u8,
    /// Sensor capabilities byte; bits 3:2 are the threshold access support.
    pub capabilities: u8,
    /// Sensor type (0x01 temperature, 0x02 voltage, 0x03 current, 0x04 fan, 0x08 power
    /// supply, 0x0D drive slot, ...).
    pub sensor_type: u8,
    /// Event/reading type code (0x01 threshold, 0x6F sensor-specific, ...).
    pub event_reading_type: u8,
    /// Thresholds the SDR says are readable (bit 0 LNC, 1 LC, 2 LNR, 3 UNC, 4 UC, 5 UNR).
    pub readable_thresholds: u8,
    /// Units 1 (bit 0: percentage).
    pub units1: u8,
    /// Base unit type code (1 °C, 4 V, 5 A, 6 W, 18 RPM, ...).
    pub base_unit: u8,
    /// Full records only.
    pub conversion: Option<Conversion>,
    /// Full records only: the SDR's own threshold bytes (LNC, LC, LNR, UNC, UC, UNR).
    pub sdr_thresholds: Option<[u8; 6]>,
    /// The ID string, printable ASCII (other bytes as `?`), at most 16 characters.
    pub name: String,
}

impl SensorRecord {
    /// Whether this is a threshold-based sensor (event/reading type 0x01).
    pub fn is_threshold(&self) -> bool {
        self.event_reading_type == 0x01
    }

    /// Threshold access support: 0 none, 1 readable, 2 readable and settable, 3 fixed.
    pub fn threshold_access(&self) -> u8 {
        (self.capabilities >> 2) & 0x03
    }

    /// Parses one whole record (header included). `Ok(None)` for record types other than
    /// Full and Compact sensor records.
    pub fn parse(r: &[u8]) -> Result<Option<SensorRecord>> {
        let h = r
            .get(..HEADER)
            .ok_or_else(|| Error::Protocol(format!("SDR record of {} bytes", r.len())))?;
        let record_id = u16::from_le_bytes([h[0], h[1]]);
        let record_type = h[3];
        let (id_at, min) = match record_type {
            0x01 => (47, 48),
            0x02 => (31, 32),
            _ => return Ok(None),
        };
        if r.len() < min {
            return Err(Error::Protocol(format!(
                "SDR record {record_id:#06x} (type {record_type:#04x}) is {} bytes, shorter than {min}",
                r.len()
            )));
        }
        let byte = |i: usize| r.get(i).copied().unwrap_or(0);
        let (conversion, sdr_thresholds) = if record_type == 0x01 {
            let conversion = Conversion {
                format: byte(20) >> 6,
                linearization: byte(23) & 0x7F,
                m: sign_extend(u16::from(byte(24)) | (u16::from(byte(25) & 0xC0) << 2), 10),
                b: sign_extend(u16::from(byte(26)) | (u16::from(byte(27) & 0xC0) << 2), 10),
                r_exp: sign_extend(u16::from(byte(29) >> 4), 4) as i8,
                b_exp: sign_extend(u16::from(byte(29) & 0x0F), 4) as i8,
            };
            // UNR, UC, UNC, LNR, LC, LNC in the record; kept as LNC..UNR.
            let t = [byte(41), byte(40), byte(39), byte(38), byte(37), byte(36)];
            (Some(conversion), Some(t))
        } else {
            (None, None)
        };
        let tl = byte(id_at);
        let len = usize::from(tl & 0x1F).min(16);
        let id = r.get(id_at + 1..).unwrap_or(&[]);
        let id = &id[..len.min(id.len())];
        let name: String = match tl >> 6 {
            // 8-bit ASCII (and, leniently, unspecified): printable characters only.
            3 | 0 => id
                .iter()
                .take_while(|b| **b != 0)
                .map(|b| {
                    if b.is_ascii_graphic() || *b == b' ' {
                        char::from(*b)
                    } else {
                        '?'
                    }
                })
                .collect(),
            _ => id.iter().map(|b| format!("{b:02x}")).collect(),
        };
        Ok(Some(SensorRecord {
            record_id,
            record_type,
            owner_id: byte(5),
            owner_lun: byte(6) & 0x03,
            number: byte(7),
            entity_id: byte(8),
            entity_instance: byte(9),
            capabilities: byte(11),
            sensor_type: byte(12),
            event_reading_type: byte(13),
            readable_thresholds: byte(18) & 0x3F,
            units1: byte(20),
            base_unit: byte(21),
            conversion,
            sdr_thresholds,
            name: name.trim().to_owned(),
        }))
    }
}

/// Get Sensor Reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SensorReading {
    /// The raw reading byte (meaningful for threshold sensors).
    pub raw: u8,
    /// Sensor scanning enabled (bit 6 of the second byte; 0 means disabled).
    pub scanning: bool,
    /// Reading/state unavailable (bit 5).
    pub unavailable: bool,
    /// Threshold comparison status (threshold sensors: bit 0 at or below LNC, 1 LC, 2 LNR,
    /// 3 at or above UNC, 4 UC, 5 UNR) or discrete states 7:0, and discrete states 14:8 in
    /// the high byte when the BMC sends them.
    pub states: u16,
}

impl SensorReading {
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 2 {
            return Err(Error::Protocol(format!(
                "Get Sensor Reading returned {} bytes",
                d.len()
            )));
        }
        let lo = d.get(2).copied().unwrap_or(0);
        let hi = d.get(3).copied().unwrap_or(0) & 0x7F;
        Ok(SensorReading {
            raw: d[0],
            scanning: d[1] & 0x40 != 0,
            unavailable: d[1] & 0x20 != 0,
            states: u16::from(lo) | (u16::from(hi) << 8),
        })
    }

    /// Whether the reading byte holds a value (scanning on, reading available).
    pub fn valid(&self) -> bool {
        self.scanning && !self.unavailable
    }
}

/// Get Sensor Thresholds: which are readable and their raw bytes (LNC, LC, LNR, UNC, UC, UNR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawThresholds {
    pub readable: u8,
    pub raw: [u8; 6],
}

impl RawThresholds {
    pub fn parse(d: &[u8]) -> Result<Self> {
        let Some(b) = d.get(..7) else {
            return Err(Error::Protocol(format!(
                "Get Sensor Thresholds returned {} bytes",
                d.len()
            )));
        };
        Ok(RawThresholds {
            readable: b[0] & 0x3F,
            raw: [b[1], b[2], b[3], b[4], b[5], b[6]],
        })
    }

    /// Threshold `i` (0 LNC, 1 LC, 2 LNR, 3 UNC, 4 UC, 5 UNR) when readable.
    pub fn get(&self, i: usize) -> Option<u8> {
        (i < 6 && self.readable & (1 << i) != 0).then(|| self.raw[i])
    }
}

/// Get SDR Repository Info.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SdrInfo {
    pub version: u8,
    pub records: u16,
    /// Operation support (bit 1: Reserve SDR Repository supported).
    pub operations: u8,
}

impl SdrInfo {
    pub fn parse(d: &[u8]) -> Result<Self> {
        if d.len() < 14 {
            return Err(Error::Protocol(format!(
                "Get SDR Repository Info returned {} bytes",
                d.len()
            )));
        }
        Ok(SdrInfo {
            version: d[0],
            records: u16::from_le_bytes([d[1], d[2]]),
            operations: d[13],
        })
    }

    pub fn supports_reserve(&self) -> bool {
        self.operations & 0x02 != 0
    }
}

/// What ended one walk of the repository.
enum Walk {
    Done(Vec<SensorRecord>),
    Cancelled,
}

impl Client {
    /// Get SDR Repository Info.
    pub async fn sdr_info(&self) -> Result<SdrInfo> {
        let r = self
            .call("Get SDR Repository Info", NETFN_STORAGE, 0x20, &[])
            .await?;
        SdrInfo::parse(&check("Get SDR Repository Info", r)?)
    }

    async fn reserve_sdr(&self) -> Result<u16> {
        let r = self
            .call("Reserve SDR Repository", NETFN_STORAGE, 0x22, &[])
            .await?;
        let d = check("Reserve SDR Repository", r)?;
        match d.get(..2) {
            Some(b) => Ok(u16::from_le_bytes([b[0], b[1]])),
            None => Err(Error::Protocol(
                "short Reserve SDR Repository response".into(),
            )),
        }
    }

    /// The sensor records (Full and Compact) of the SDR repository, first to last, at most
    /// [`MAX_SENSORS`]. Each record is read in partial reads of at most [`SDR_CHUNK`] bytes
    /// (fewer when the BMC says it cannot return that many) under a reservation; a
    /// reservation cancelled mid-read (0xC5) restarts the walk, at most
    /// [`MAX_SDR_RESTARTS`] times.
    pub async fn sdr_sensors(&self) -> Result<Vec<SensorRecord>> {
        let info = self.sdr_info().await?;
        if info.records == 0 {
            return Ok(Vec::new());
        }
        let mut restarts = 0;
        loop {
            let reservation = if info.supports_reserve() {
                self.reserve_sdr().await?
            } else {
                0
            };
            match self.walk_sdr(reservation).await? {
                Walk::Done(out) => return Ok(out),
                Walk::Cancelled if restarts < MAX_SDR_RESTARTS => {
                    restarts += 1;
                    tracing::debug!(peer = %self.peer(), restarts, "SDR reservation cancelled; reading again");
                }
                Walk::Cancelled => {
                    return Err(Error::Protocol(format!(
                        "the SDR repository changed during each of {} reads (reservation cancelled)",
                        MAX_SDR_RESTARTS + 1
                    )));
                }
            }
        }
    }

    async fn walk_sdr(&self, reservation: u16) -> Result<Walk> {
        let mut out = Vec::new();
        let mut seen = std::collections::HashSet::new();
        let mut id: u16 = 0x0000;
        let mut chunk = SDR_CHUNK;
        for _ in 0..MAX_SDR_RECORDS {
            if !seen.insert(id) {
                return Err(Error::Protocol(format!("SDR record ids loop at {id:#06x}")));
            }
            let Some((next, header)) = self.sdr_part(reservation, id, 0, HEADER as u8).await?
            else {
                return Ok(Walk::Cancelled);
            };
            let mut record = header;
            record.truncate(HEADER);
            if record.len() < HEADER {
                return Err(Error::Protocol(format!(
                    "SDR record {id:#06x}: header of {} bytes",
                    record.len()
                )));
            }
            let total = HEADER + usize::from(record[4]);
            // Only sensor records are read past their header.
            if matches!(record[3], 0x01 | 0x02) {
                while record.len() < total {
                    let offset = u8::try_from(record.len()).map_err(|_| {
                        Error::Protocol(format!("SDR record {id:#06x} longer than 255 bytes"))
                    })?;
                    let want = (total - record.len()).min(usize::from(chunk)) as u8;
                    match self.sdr_part(reservation, id, offset, want).await {
                        Ok(Some((_, data))) if !data.is_empty() => {
                            let take = data.len().min(total - record.len());
                            record.extend_from_slice(&data[..take]);
                        }
                        Ok(Some(_)) => {
                            return Err(Error::Protocol(format!(
                                "SDR record {id:#06x}: empty partial read at {offset}"
                            )));
                        }
                        Ok(None) => return Ok(Walk::Cancelled),
                        // "Cannot return the number of bytes requested" and length errors:
                        // smaller reads.
                        Err(Error::CompletionCode {
                            code: 0xCA | 0xC7 | 0xC8 | 0xFF,
                            ..
                        }) if chunk > 4 => chunk /= 2,
                        Err(e) => return Err(e),
                    }
                }
                match SensorRecord::parse(&record) {
                    Ok(Some(s)) => out.push(s),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::debug!(peer = %self.peer(), record = id, error = %e, "skipping SDR record")
                    }
                }
                if out.len() >= MAX_SENSORS {
                    tracing::warn!(peer = %self.peer(), "more than {MAX_SENSORS} sensor records; the rest are not read");
                    return Ok(Walk::Done(out));
                }
            }
            if next == 0xFFFF {
                return Ok(Walk::Done(out));
            }
            id = next;
        }
        tracing::warn!(peer = %self.peer(), "more than {MAX_SDR_RECORDS} SDR records; the rest are not read");
        Ok(Walk::Done(out))
    }

    /// One Get SDR: `(next record id, bytes)`, or `None` when the reservation was cancelled.
    async fn sdr_part(
        &self,
        reservation: u16,
        id: u16,
        offset: u8,
        count: u8,
    ) -> Result<Option<(u16, Vec<u8>)>> {
        let [rl, rh] = reservation.to_le_bytes();
        let [il, ih] = id.to_le_bytes();
        let r = self
            .call(
                "Get SDR",
                NETFN_STORAGE,
                0x23,
                &[rl, rh, il, ih, offset, count],
            )
            .await?;
        if r.completion == 0xC5 {
            return Ok(None);
        }
        let d = check("Get SDR", r)?;
        let Some(n) = d.get(..2) else {
            return Err(Error::Protocol(format!(
                "Get SDR returned {} bytes",
                d.len()
            )));
        };
        let next = u16::from_le_bytes([n[0], n[1]]);
        let data = d[2..].get(..usize::from(count)).unwrap_or(&d[2..]).to_vec();
        Ok(Some((next, data)))
    }

    /// Get Sensor Reading of a sensor of this BMC (LUN 0).
    pub async fn sensor_reading(&self, number: u8) -> Result<SensorReading> {
        let r = self
            .call("Get Sensor Reading", NETFN_SENSOR, 0x2D, &[number])
            .await?;
        SensorReading::parse(&check("Get Sensor Reading", r)?)
    }

    /// Get Sensor Thresholds of a sensor of this BMC (LUN 0).
    pub async fn sensor_thresholds(&self, number: u8) -> Result<RawThresholds> {
        let r = self
            .call("Get Sensor Thresholds", NETFN_SENSOR, 0x27, &[number])
            .await?;
        RawThresholds::parse(&check("Get Sensor Thresholds", r)?)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A Full threshold record: a temperature in °C, M = 1, B = 0, exponents 0.
    pub(crate) fn full_record(number: u8, name: &str) -> Vec<u8> {
        let mut r = vec![0u8; 48];
        r[0] = 0x01;
        r[2] = 0x51;
        r[3] = 0x01;
        r[5] = 0x20;
        r[7] = number;
        r[8] = 0x03;
        r[9] = 0x01;
        r[11] = 0x68; // threshold access: readable/settable
        r[12] = 0x01; // temperature
        r[13] = 0x01; // threshold
        r[18] = 0x3F;
        r[21] = 0x01; // degrees C
        r[24] = 1; // M
        r[36] = 100; // UNR
        r[37] = 90; // UC
        r[38] = 80; // UNC
        r[47] = 0xC0 | name.len() as u8;
        r.extend_from_slice(name.as_bytes());
        r[4] = (r.len() - 5) as u8;
        r
    }

    #[test]
    fn full_record_fields() {
        let s = SensorRecord::parse(&full_record(7, "CPU Temp"))
            .unwrap()
            .unwrap();
        assert_eq!(s.number, 7);
        assert_eq!(s.name, "CPU Temp");
        assert_eq!(s.sensor_type, 0x01);
        assert!(s.is_threshold());
        assert_eq!(s.threshold_access(), 2);
        assert_eq!(s.base_unit, 1);
        let c = s.conversion.unwrap();
        assert_eq!((c.m, c.b, c.r_exp, c.b_exp), (1, 0, 0, 0));
        assert_eq!(c.convert(45), Some(45.0));
        assert_eq!(s.sdr_thresholds.unwrap(), [0, 0, 0, 80, 90, 100]);
    }

    #[test]
    fn conversion_follows_section_36() {
        // Voltage: M = 2, B = -5 (10-bit), Bexp = 1, Rexp = -2: y = (2x - 50) / 100.
        let c = Conversion {
            format: 0,
            linearization: 0,
            m: 2,
            b: -5,
            r_exp: -2,
            b_exp: 1,
        };
        assert_eq!(c.convert(100), Some(1.5));
        // Negative M and B from their 10-bit encodings.
        assert_eq!(sign_extend(0x3FF, 10), -1);
        assert_eq!(sign_extend(0x200, 10), -512);
        assert_eq!(sign_extend(0x0F, 4), -1);
        assert_eq!(sign_extend(0x07, 4), 7);
        // Two's and one's complement readings.
        let c2 = Conversion {
            format: 2,
            m: 1,
            ..c
        };
        let c2 = Conversion {
            b: 0,
            r_exp: 0,
            b_exp: 0,
            ..c2
        };
        assert_eq!(c2.convert(0xFE), Some(-2.0));
        let c1 = Conversion { format: 1, ..c2 };
        assert_eq!(c1.convert(0xFE), Some(-1.0));
        // No analog reading.
        assert_eq!(Conversion { format: 3, ..c2 }.convert(5), None);
        // 1/x of 0 is no number.
        assert_eq!(
            Conversion {
                linearization: 7,
                ..c2
            }
            .convert(0),
            None
        );
        assert_eq!(
            Conversion {
                linearization: 8,
                ..c2
            }
            .convert(3),
            Some(9.0)
        );
    }

    #[test]
    fn compact_and_other_records() {
        let mut r = vec![0u8; 32];
        r[3] = 0x02;
        r[7] = 0x30;
        r[12] = 0x08;
        r[13] = 0x6F;
        r[31] = 0xC3;
        r.extend_from_slice(b"PS1");
        r[4] = (r.len() - 5) as u8;
        let s = SensorRecord::parse(&r).unwrap().unwrap();
        assert_eq!(
            (s.name.as_str(), s.sensor_type, s.conversion),
            ("PS1", 8, None)
        );
        // An FRU locator (0x11) is no sensor.
        let mut fru = r.clone();
        fru[3] = 0x11;
        assert_eq!(SensorRecord::parse(&fru).unwrap(), None);
        // Short records are errors.
        assert!(SensorRecord::parse(&r[..20]).is_err());
        assert!(SensorRecord::parse(&[1, 2]).is_err());
    }

    #[test]
    fn reading_bits() {
        let r = SensorReading::parse(&[45, 0xC0, 0x18]).unwrap();
        assert!(r.valid());
        assert_eq!(r.states, 0x18);
        assert!(
            !SensorReading::parse(&[0, 0x00]).unwrap().valid(),
            "scanning disabled"
        );
        assert!(
            !SensorReading::parse(&[0, 0x60]).unwrap().valid(),
            "unavailable"
        );
        assert!(SensorReading::parse(&[1]).is_err());
        let t = RawThresholds::parse(&[0x12, 1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(t.get(0), None);
        assert_eq!(t.get(1), Some(2));
        assert_eq!(t.get(4), Some(5));
        assert_eq!(t.get(9), None);
        assert!(RawThresholds::parse(&[0x3F, 1]).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn hostile_records_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80), kind in 0u8..4) {
            let mut b = bytes;
            if b.len() > 3 {
                b[3] = kind;
            }
            if let Ok(Some(s)) = SensorRecord::parse(&b) {
                prop_assert!(s.name.len() <= 32);
                if let Some(c) = s.conversion {
                    for raw in [0u8, 1, 0x7F, 0x80, 0xFF] {
                        if let Some(v) = c.convert(raw) {
                            prop_assert!(v.is_finite());
                        }
                    }
                }
            }
            let _ = SensorReading::parse(&b);
            let _ = RawThresholds::parse(&b);
            let _ = SdrInfo::parse(&b);
        }
    }
}
