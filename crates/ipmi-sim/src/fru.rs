//! Builds FRU images (common header, chassis, board and product areas with
//! 8-bit ASCII fields) from plain strings.

/// The inventory a simulated BMC reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FruInfo {
    /// SMBIOS chassis type (0x17 = rack mount chassis).
    pub chassis_type: u8,
    /// Chassis part number.
    pub chassis_part_number: String,
    /// Chassis serial number.
    pub chassis_serial: String,
    /// Board manufacturer.
    pub board_manufacturer: String,
    /// Board product name.
    pub board_product: String,
    /// Board serial.
    pub board_serial: String,
    /// Board part number.
    pub board_part_number: String,
    /// Product manufacturer.
    pub product_manufacturer: String,
    /// Product name.
    pub product_name: String,
    /// Product part / model number.
    pub product_part_number: String,
    /// Product version.
    pub product_version: String,
    /// Product serial.
    pub product_serial: String,
    /// Asset tag.
    pub asset_tag: String,
}

impl FruInfo {
    /// A plausible inventory whose serials embed `n`.
    pub fn example(n: usize) -> Self {
        FruInfo {
            chassis_type: 0x17,
            chassis_part_number: "CH-1000".into(),
            chassis_serial: format!("CSN{n:05}"),
            board_manufacturer: "Ingot Labs".into(),
            board_product: "IL-MB1".into(),
            board_serial: format!("BSN{n:05}"),
            board_part_number: "MB1-REV-A".into(),
            product_manufacturer: "Ingot Labs".into(),
            product_name: "IL-1U".into(),
            product_part_number: "IL1U-0001".into(),
            product_version: "1.0".into(),
            product_serial: format!("PSN{n:05}"),
            asset_tag: format!("asset-{n}"),
        }
    }

    /// Encode as a FRU image.
    pub fn encode(&self) -> Vec<u8> {
        let text = |out: &mut Vec<u8>, s: &str| {
            let b = &s.as_bytes()[..s.len().min(63)];
            out.push(0xC0 | b.len() as u8);
            out.extend_from_slice(b);
        };
        let close = |mut a: Vec<u8>| {
            a.push(0xC1);
            a.push(0); // room for the checksum
            while !a.len().is_multiple_of(8) {
                let at = a.len() - 1;
                a.insert(at, 0);
            }
            a[1] = (a.len() / 8) as u8;
            let last = a.len() - 1;
            a[last] = a[..last]
                .iter()
                .fold(0u8, |x, y| x.wrapping_add(*y))
                .wrapping_neg();
            a
        };
        let mut chassis = vec![0x01, 0, self.chassis_type];
        text(&mut chassis, &self.chassis_part_number);
        text(&mut chassis, &self.chassis_serial);
        let chassis = close(chassis);

        let mut board = vec![0x01, 0, 0x19, 0, 0, 0];
        text(&mut board, &self.board_manufacturer);
        text(&mut board, &self.board_product);
        text(&mut board, &self.board_serial);
        text(&mut board, &self.board_part_number);
        text(&mut board, "");
        let board = close(board);

        let mut product = vec![0x01, 0, 0x19];
        for s in [
            &self.product_manufacturer,
            &self.product_name,
            &self.product_part_number,
            &self.product_version,
            &self.product_serial,
            &self.asset_tag,
        ] {
            text(&mut product, s);
        }
        text(&mut product, "");
        let product = close(product);

        let c_off = 1u8;
        let b_off = c_off + (chassis.len() / 8) as u8;
        let p_off = b_off + (board.len() / 8) as u8;
        let mut img = vec![0x01, 0, c_off, b_off, p_off, 0, 0];
        img.push(
            img.iter()
                .fold(0u8, |x, y| x.wrapping_add(*y))
                .wrapping_neg(),
        );
        img.extend(chassis);
        img.extend(board);
        img.extend(product);
        img
    }
}
