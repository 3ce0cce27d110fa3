//! FRU inventory parsing (Platform Management FRU Information Storage
//! Definition v1.0): common header, chassis, board and product areas.

use crate::error::{Error, Result};

/// Chassis info area.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChassisArea {
    /// SMBIOS chassis type.
    pub chassis_type: u8,
    /// Part number.
    pub part_number: String,
    /// Serial number.
    pub serial_number: String,
    /// Custom fields.
    pub custom: Vec<String>,
}

/// Board info area.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BoardArea {
    /// Manufacturing date: minutes since 1996-01-01 00:00 UTC (0 = unspecified).
    pub mfg_minutes: u32,
    /// Manufacturer.
    pub manufacturer: String,
    /// Product name.
    pub product_name: String,
    /// Serial number.
    pub serial_number: String,
    /// Part number.
    pub part_number: String,
    /// FRU file id.
    pub fru_file_id: String,
    /// Custom fields.
    pub custom: Vec<String>,
}

/// Product info area.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProductArea {
    /// Manufacturer.
    pub manufacturer: String,
    /// Product name.
    pub product_name: String,
    /// Part / model number.
    pub part_number: String,
    /// Version.
    pub version: String,
    /// Serial number.
    pub serial_number: String,
    /// Asset tag.
    pub asset_tag: String,
    /// FRU file id.
    pub fru_file_id: String,
    /// Custom fields.
    pub custom: Vec<String>,
}

/// A parsed FRU device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fru {
    /// Chassis info area, when present.
    pub chassis: Option<ChassisArea>,
    /// Board info area, when present.
    pub board: Option<BoardArea>,
    /// Product info area, when present.
    pub product: Option<ProductArea>,
}

fn checksum_ok(b: &[u8]) -> bool {
    b.iter().fold(0u8, |a, x| a.wrapping_add(*x)) == 0
}

/// Decode one type/length field's data.
fn decode_field(kind: u8, data: &[u8]) -> String {
    match kind {
        // Binary / unspecified: hex, as ipmitool shows it.
        0 => data.iter().map(|b| format!("{b:02x}")).collect(),
        // BCD plus.
        1 => data
            .iter()
            .flat_map(|b| [b >> 4, b & 0x0F])
            .map(|n| match n {
                0..=9 => char::from(b'0' + n),
                0xA => ' ',
                0xB => '-',
                0xC => '.',
                _ => '?',
            })
            .collect(),
        // 6-bit packed ASCII: four characters in three bytes, LSB first.
        2 => {
            let mut out = String::new();
            for chunk in data.chunks(3) {
                let mut v: u32 = 0;
                for (i, b) in chunk.iter().enumerate() {
                    v |= u32::from(*b) << (8 * i);
                }
                let chars = chunk.len() * 8 / 6;
                for i in 0..chars {
                    out.push(char::from(((v >> (6 * i)) & 0x3F) as u8 + 0x20));
                }
            }
            out.trim_end().to_string()
        }
        // 8-bit ASCII + Latin 1.
        _ => data.iter().map(|b| char::from(*b)).collect::<String>(),
    }
}

/// Iterator over the type/length fields of an area, stopping at 0xC1.
struct Fields<'a> {
    data: &'a [u8],
    pos: usize,
    done: bool,
}

impl Iterator for Fields<'_> {
    type Item = String;
    fn next(&mut self) -> Option<String> {
        if self.done {
            return None;
        }
        let tl = *self.data.get(self.pos)?;
        if tl == 0xC1 {
            self.done = true;
            return None;
        }
        let len = usize::from(tl & 0x3F);
        let start = self.pos + 1;
        let Some(bytes) = self.data.get(start..start + len) else {
            self.done = true;
            return None;
        };
        self.pos = start + len;
        Some(decode_field(tl >> 6, bytes))
    }
}

/// Slice one area: `offset` in 8-byte units from the header, length byte at +1.
fn area<'a>(image: &'a [u8], offset8: u8, what: &str) -> Result<Option<&'a [u8]>> {
    if offset8 == 0 {
        return Ok(None);
    }
    let start = usize::from(offset8) * 8;
    let len = usize::from(*image.get(start + 1).ok_or_else(|| short(what))?) * 8;
    let a = image.get(start..start + len).ok_or_else(|| short(what))?;
    if len < 3 || !checksum_ok(a) {
        return Err(Error::Protocol(format!(
            "FRU {what} area checksum mismatch"
        )));
    }
    Ok(Some(a))
}

fn short(what: &str) -> Error {
    Error::Protocol(format!("FRU {what} area runs past the end of the FRU data"))
}

fn take(f: &mut Fields<'_>) -> String {
    f.next().unwrap_or_default()
}

/// Parse a FRU image.
pub fn parse(image: &[u8]) -> Result<Fru> {
    let h = image
        .get(..8)
        .ok_or_else(|| Error::Protocol("FRU data shorter than the common header".into()))?;
    if h[0] & 0x0F != 0x01 || !checksum_ok(h) {
        return Err(Error::Protocol("bad FRU common header".into()));
    }
    let mut fru = Fru::default();
    if let Some(a) = area(image, h[2], "chassis")? {
        let mut f = Fields {
            data: a,
            pos: 3,
            done: false,
        };
        fru.chassis = Some(ChassisArea {
            chassis_type: a[2],
            part_number: take(&mut f),
            serial_number: take(&mut f),
            custom: f.collect(),
        });
    }
    if let Some(a) = area(image, h[3], "board")? {
        let mfg = a
            .get(3..6)
            .map(|d| u32::from_le_bytes([d[0], d[1], d[2], 0]))
            .unwrap_or(0);
        let mut f = Fields {
            data: a,
            pos: 6,
            done: false,
        };
        fru.board = Some(BoardArea {
            mfg_minutes: mfg,
            manufacturer: take(&mut f),
            product_name: take(&mut f),
            serial_number: take(&mut f),
            part_number: take(&mut f),
            fru_file_id: take(&mut f),
            custom: f.collect(),
        });
    }
    if let Some(a) = area(image, h[4], "product")? {
        let mut f = Fields {
            data: a,
            pos: 3,
            done: false,
        };
        fru.product = Some(ProductArea {
            manufacturer: take(&mut f),
            product_name: take(&mut f),
            part_number: take(&mut f),
            version: take(&mut f),
            serial_number: take(&mut f),
            asset_tag: take(&mut f),
            fru_file_id: take(&mut f),
            custom: f.collect(),
        });
    }
    Ok(fru)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn field(s: &str) -> Vec<u8> {
        let mut v = vec![0xC0 | s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    fn finish_area(mut a: Vec<u8>) -> Vec<u8> {
        a.push(0xC1);
        while !(a.len() + 1).is_multiple_of(8) {
            a.push(0);
        }
        a[1] = ((a.len() + 1) / 8) as u8;
        let c = a.iter().fold(0u8, |x, y| x.wrapping_add(*y)).wrapping_neg();
        a.push(c);
        a
    }

    #[test]
    fn parses_a_hand_built_image() {
        let mut board = vec![0x01, 0, 0x19, 0x10, 0x20, 0x30];
        for s in ["Acme", "X1 Board", "BSN123", "BPN-9", ""] {
            board.extend(field(s));
        }
        let board = finish_area(board);
        let mut product = vec![0x01, 0, 0x19];
        for s in ["Acme", "X1", "PN-1", "v2", "PSN456", "asset-7", ""] {
            product.extend(field(s));
        }
        let product = finish_area(product);
        let mut img = vec![0x01, 0, 0, 1, (1 + board.len() / 8) as u8, 0, 0];
        let c = img
            .iter()
            .fold(0u8, |x, y| x.wrapping_add(*y))
            .wrapping_neg();
        img.push(c);
        img.extend(&board);
        img.extend(&product);
        let fru = parse(&img).unwrap();
        let b = fru.board.unwrap();
        assert_eq!(b.manufacturer, "Acme");
        assert_eq!(b.product_name, "X1 Board");
        assert_eq!(b.serial_number, "BSN123");
        assert_eq!(b.part_number, "BPN-9");
        assert_eq!(b.mfg_minutes, 0x302010);
        let p = fru.product.unwrap();
        assert_eq!(
            (p.product_name.as_str(), p.serial_number.as_str()),
            ("X1", "PSN456")
        );
        assert_eq!(p.asset_tag, "asset-7");
        assert!(fru.chassis.is_none());
        // Never panics on truncation.
        for n in 0..img.len() {
            let _ = parse(&img[..n]);
        }
    }

    #[test]
    fn field_encodings() {
        assert_eq!(decode_field(1, &[0x12, 0xB3]), "12-3");
        // "IPMI" in 6-bit ASCII: I=0x29 P=0x30 M=0x2D I=0x29.
        let v: u32 = 0x29 | (0x30 << 6) | (0x2D << 12) | (0x29 << 18);
        assert_eq!(decode_field(2, &v.to_le_bytes()[..3]), "IPMI");
        assert_eq!(decode_field(0, &[0xAB, 0x01]), "ab01");
    }
}
