//! A small FAT12 file system image, for the boot CD's EFI system partition: UEFI firmware boots
//! a CD through an El Torito entry for the EFI platform whose image is a FAT file system with
//! `/EFI/BOOT/BOOTX64.EFI`. Files are given by path (`EFI/BOOT/BOOTX64.EFI`); a name that is not
//! an upper-case 8.3 name (`autoexec.ipxe`) gets a long name entry and a `~1` short alias.
//!
//! 512-byte sectors, 2 KiB clusters, two FATs, a 64-entry root: FAT12 up to 4084 clusters, about
//! 8 MiB of files. Every date is 1980-01-01, so that one input always makes the same image.

const SECTOR: usize = 512;
const SECTORS_PER_CLUSTER: usize = 4;
const CLUSTER: usize = SECTOR * SECTORS_PER_CLUSTER;
const ROOT_ENTRIES: usize = 64;
/// FAT12 holds fewer than 4085 clusters (more makes it FAT16 by definition).
const MAX_CLUSTERS: usize = 4084;
const ENTRY: usize = 32;
const ATTR_DIRECTORY: u8 = 0x10;
const ATTR_ARCHIVE: u8 = 0x20;
const ATTR_LONG_NAME: u8 = 0x0F;
/// 1980-01-01 in a directory entry's date format.
const DATE: u16 = (1 << 5) | 1;
const END_OF_CHAIN: u16 = 0xFFF;

/// A directory of the image being built: its entries by name, in the order given.
#[derive(Default)]
struct Dir<'a> {
    entries: Vec<(&'a str, Node<'a>)>,
}

enum Node<'a> {
    File(&'a [u8]),
    Dir(Dir<'a>),
}

/// The image holding `files` (`path`, contents), labelled `label` (at most 11 characters).
pub fn fat12(label: &str, files: &[(&str, &[u8])]) -> Result<Vec<u8>, String> {
    let mut root = Dir::default();
    for (path, data) in files {
        root.insert(path, path, data)?;
    }
    // Clusters: each directory but the root takes one (64 entries), each file its size.
    let needed = root.clusters();
    if needed > MAX_CLUSTERS {
        return Err(format!(
            "{} KiB of files do not fit a FAT12 image ({} KiB at most)",
            needed * CLUSTER / 1024,
            MAX_CLUSTERS * CLUSTER / 1024
        ));
    }
    let clusters = needed.max(1);
    let fat_sectors = ((clusters + 2) * 3).div_ceil(2).div_ceil(SECTOR);
    let root_sectors = ROOT_ENTRIES * ENTRY / SECTOR;
    let data_start = (1 + 2 * fat_sectors + root_sectors) * SECTOR;
    let total_sectors = 1 + 2 * fat_sectors + root_sectors + clusters * SECTORS_PER_CLUSTER;
    let mut image = vec![0u8; total_sectors * SECTOR];
    boot_sector(&mut image[..SECTOR], label, total_sectors, fat_sectors);

    let mut fat = Fat::new(clusters);
    let mut writer = Writer {
        image: &mut image,
        data_start,
        fat: &mut fat,
        next: 2,
    };
    let root_table = writer.dir_entries(&root, 0, None)?;
    if root_table.len() > ROOT_ENTRIES * ENTRY {
        return Err(format!(
            "more than {ROOT_ENTRIES} entries in the image's root"
        ));
    }
    let root_at = (1 + 2 * fat_sectors) * SECTOR;
    image[root_at..root_at + root_table.len()].copy_from_slice(&root_table);
    for copy in 0..2 {
        let at = (1 + copy * fat_sectors) * SECTOR;
        image[at..at + fat.bytes.len()].copy_from_slice(&fat.bytes);
    }
    Ok(image)
}

impl<'a> Dir<'a> {
    fn insert(&mut self, whole: &str, path: &'a str, data: &'a [u8]) -> Result<(), String> {
        let (first, rest) = match path.split_once('/') {
            Some((first, rest)) => (first, Some(rest)),
            None => (path, None),
        };
        if first.is_empty() || first == "." || first == ".." || first.len() > 255 {
            return Err(format!("{whole:?} is not a file path for the image"));
        }
        let found = self
            .entries
            .iter_mut()
            .find(|(name, _)| name.eq_ignore_ascii_case(first));
        match (rest, found) {
            (None, None) => {
                self.entries.push((first, Node::File(data)));
                Ok(())
            }
            (Some(rest), None) => {
                let mut dir = Dir::default();
                dir.insert(whole, rest, data)?;
                self.entries.push((first, Node::Dir(dir)));
                Ok(())
            }
            (Some(rest), Some((_, Node::Dir(dir)))) => dir.insert(whole, rest, data),
            _ => Err(format!("{whole:?} is given twice, or under a file")),
        }
    }

    /// Clusters this directory's contents take (not its own table).
    fn clusters(&self) -> usize {
        let mut n = 0;
        for (_, node) in &self.entries {
            n += match node {
                Node::File(data) => data.len().div_ceil(CLUSTER),
                Node::Dir(dir) => 1 + dir.clusters(),
            };
        }
        n
    }
}

/// The file allocation table being filled in (FAT12: 12 bits per cluster, packed).
struct Fat {
    bytes: Vec<u8>,
}

impl Fat {
    fn new(clusters: usize) -> Self {
        let mut fat = Fat {
            bytes: vec![0u8; ((clusters + 2) * 3).div_ceil(2)],
        };
        // Entry 0 repeats the media byte (0xF8, a fixed disk); entry 1 is reserved.
        fat.set(0, 0xFF8);
        fat.set(1, END_OF_CHAIN);
        fat
    }

    fn set(&mut self, cluster: usize, value: u16) {
        let at = cluster * 3 / 2;
        if cluster.is_multiple_of(2) {
            self.bytes[at] = value as u8;
            self.bytes[at + 1] = (self.bytes[at + 1] & 0xF0) | ((value >> 8) as u8 & 0x0F);
        } else {
            self.bytes[at] = (self.bytes[at] & 0x0F) | ((value << 4) as u8);
            self.bytes[at + 1] = (value >> 4) as u8;
        }
    }
}

struct Writer<'w> {
    image: &'w mut [u8],
    data_start: usize,
    fat: &'w mut Fat,
    next: usize,
}

impl Writer<'_> {
    /// Takes `count` consecutive clusters, chained; the first, or 0 for none.
    fn allocate(&mut self, count: usize) -> usize {
        if count == 0 {
            return 0;
        }
        let first = self.next;
        for c in first..first + count {
            let next = if c + 1 == first + count {
                END_OF_CHAIN
            } else {
                (c + 1) as u16
            };
            self.fat.set(c, next);
        }
        self.next += count;
        first
    }

    fn write(&mut self, cluster: usize, data: &[u8]) {
        let at = self.data_start + (cluster - 2) * CLUSTER;
        self.image[at..at + data.len()].copy_from_slice(data);
    }

    /// The table of `dir` (at cluster `own`, 0 for the root, whose parent is `parent`), its
    /// children written out.
    fn dir_entries(
        &mut self,
        dir: &Dir,
        own: usize,
        parent: Option<usize>,
    ) -> Result<Vec<u8>, String> {
        let mut table = Vec::new();
        if let Some(parent) = parent {
            table.extend(entry(b".          ", ATTR_DIRECTORY, own, 0));
            table.extend(entry(b"..         ", ATTR_DIRECTORY, parent, 0));
        }
        let mut shorts: Vec<[u8; 11]> = Vec::new();
        for (name, node) in &dir.entries {
            let (short, long) = short_name(name, &shorts)?;
            shorts.push(short);
            if long {
                table.extend(long_name_entries(name, &short));
            }
            match node {
                Node::File(data) => {
                    let first = self.allocate(data.len().div_ceil(CLUSTER));
                    if first != 0 {
                        self.write(first, data);
                    }
                    table.extend(entry(&short, ATTR_ARCHIVE, first, data.len()));
                }
                Node::Dir(child) => {
                    let at = self.allocate(1);
                    table.extend(entry(&short, ATTR_DIRECTORY, at, 0));
                    let child_table = self.dir_entries(child, at, Some(own))?;
                    if child_table.len() > CLUSTER {
                        return Err(format!(
                            "the image's directory {name:?} holds too many entries"
                        ));
                    }
                    self.write(at, &child_table);
                }
            }
        }
        Ok(table)
    }
}

/// One 32-byte directory entry.
fn entry(short: &[u8; 11], attributes: u8, cluster: usize, size: usize) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..11].copy_from_slice(short);
    e[11] = attributes;
    for at in [16, 18, 24] {
        e[at..at + 2].copy_from_slice(&DATE.to_le_bytes());
    }
    e[26..28].copy_from_slice(&(cluster as u16).to_le_bytes());
    e[28..32].copy_from_slice(&(size as u32).to_le_bytes());
    e
}

/// The 8.3 name of `name` (space-padded, upper case), and whether it needs a long name: when it
/// is not already an upper-case 8.3 name, a `~N` alias unique among `taken`.
fn short_name(name: &str, taken: &[[u8; 11]]) -> Result<([u8; 11], bool), String> {
    let valid = |c: char| c.is_ascii_alphanumeric() || "$%'-_@~`!(){}^#&".contains(c);
    if !name.is_ascii()
        || name
            .chars()
            .any(|c| c.is_ascii_control() || "\"*/:<>?\\|".contains(c))
    {
        return Err(format!("{name:?} is not a file name for the image"));
    }
    let (base, ext) = match name.rsplit_once('.') {
        Some((b, e)) if !b.is_empty() => (b, e),
        _ => (name, ""),
    };
    let mut short = [b' '; 11];
    let exact = base.len() <= 8
        && ext.len() <= 3
        && base
            .chars()
            .chain(ext.chars())
            .all(|c| valid(c) && !c.is_ascii_lowercase());
    if exact {
        short[..base.len()].copy_from_slice(base.as_bytes());
        short[8..8 + ext.len()].copy_from_slice(ext.as_bytes());
        return Ok((short, false));
    }
    let keep = |s: &str, n: usize| -> Vec<u8> {
        s.chars()
            .filter(|c| valid(*c))
            .map(|c| c.to_ascii_uppercase() as u8)
            .take(n)
            .collect()
    };
    let stem = keep(base, 6);
    let ext = keep(ext, 3);
    short[8..8 + ext.len()].copy_from_slice(&ext);
    for n in 1..=9u8 {
        let mut candidate = short;
        candidate[..8].fill(b' ');
        candidate[..stem.len()].copy_from_slice(&stem);
        candidate[stem.len()] = b'~';
        candidate[stem.len() + 1] = b'0' + n;
        if !taken.contains(&candidate) {
            return Ok((candidate, true));
        }
    }
    Err(format!(
        "too many names like {name:?} in one directory of the image"
    ))
}

/// The long name entries of `name`, last part first, as they precede its short entry.
fn long_name_entries(name: &str, short: &[u8; 11]) -> Vec<u8> {
    let checksum = short
        .iter()
        .fold(0u8, |sum, b| sum.rotate_right(1).wrapping_add(*b));
    let mut units: Vec<u16> = name.encode_utf16().collect();
    if !units.len().is_multiple_of(13) {
        units.push(0);
        units.resize(units.len().div_ceil(13) * 13, 0xFFFF);
    }
    let parts: Vec<&[u16]> = units.chunks(13).collect();
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate().rev() {
        let mut e = [0u8; ENTRY];
        e[0] = (i + 1) as u8 | if i + 1 == parts.len() { 0x40 } else { 0 };
        e[11] = ATTR_LONG_NAME;
        e[13] = checksum;
        let offsets = (1..11)
            .step_by(2)
            .chain((14..26).step_by(2))
            .chain((28..32).step_by(2));
        for (unit, at) in part.iter().zip(offsets) {
            e[at..at + 2].copy_from_slice(&unit.to_le_bytes());
        }
        out.extend(e);
    }
    out
}

/// The boot sector: its BIOS parameter block (no boot code: the image is not booted by BIOS).
fn boot_sector(s: &mut [u8], label: &str, total_sectors: usize, fat_sectors: usize) {
    s[0..3].copy_from_slice(&[0xEB, 0x3C, 0x90]);
    s[3..11].copy_from_slice(b"INGOT   ");
    s[11..13].copy_from_slice(&(SECTOR as u16).to_le_bytes());
    s[13] = SECTORS_PER_CLUSTER as u8;
    s[14..16].copy_from_slice(&1u16.to_le_bytes());
    s[16] = 2;
    s[17..19].copy_from_slice(&(ROOT_ENTRIES as u16).to_le_bytes());
    if total_sectors < 0x10000 {
        s[19..21].copy_from_slice(&(total_sectors as u16).to_le_bytes());
    } else {
        s[32..36].copy_from_slice(&(total_sectors as u32).to_le_bytes());
    }
    s[21] = 0xF8;
    s[22..24].copy_from_slice(&(fat_sectors as u16).to_le_bytes());
    s[24..26].copy_from_slice(&32u16.to_le_bytes());
    s[26..28].copy_from_slice(&64u16.to_le_bytes());
    s[36] = 0x80;
    s[38] = 0x29;
    s[39..43].copy_from_slice(&0x1980_0101u32.to_le_bytes());
    let mut name = [b' '; 11];
    for (slot, c) in name.iter_mut().zip(label.bytes()) {
        *slot = c.to_ascii_uppercase();
    }
    s[43..54].copy_from_slice(&name);
    s[54..62].copy_from_slice(b"FAT12   ");
    // Where the jump lands: a loop, for a BIOS that boots it anyway.
    s[62..64].copy_from_slice(&[0xEB, 0xFE]);
    s[510] = 0x55;
    s[511] = 0xAA;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Reads a file back by path, as a FAT driver would: the root, then each directory's
    /// cluster, matching long names where present; its bytes through the FAT chain.
    fn read(image: &[u8], path: &str) -> Option<Vec<u8>> {
        let fat_sectors = u16::from_le_bytes([image[22], image[23]]) as usize;
        let root_at = (1 + 2 * fat_sectors) * SECTOR;
        let data_start = root_at + ROOT_ENTRIES * ENTRY;
        let fat = &image[SECTOR..SECTOR + fat_sectors * SECTOR];
        let next = |c: usize| -> usize {
            let at = c * 3 / 2;
            let v = u16::from_le_bytes([fat[at], fat[at + 1]]);
            (if c.is_multiple_of(2) {
                v & 0xFFF
            } else {
                v >> 4
            }) as usize
        };
        let chain = |first: usize, size: Option<usize>| -> Vec<u8> {
            let mut out = Vec::new();
            let mut c = first;
            while (2..0xFF8).contains(&c) {
                let at = data_start + (c - 2) * CLUSTER;
                out.extend_from_slice(&image[at..at + CLUSTER]);
                c = next(c);
            }
            if let Some(size) = size {
                out.truncate(size);
            }
            out
        };
        let mut table = image[root_at..data_start].to_vec();
        let parts: Vec<&str> = path.split('/').collect();
        for (i, part) in parts.iter().enumerate() {
            let mut long = String::new();
            let mut found = None;
            for e in table.chunks(ENTRY) {
                if e[0] == 0 {
                    break;
                }
                if e[11] == ATTR_LONG_NAME {
                    let units: Vec<u16> = (1..11)
                        .step_by(2)
                        .chain((14..26).step_by(2))
                        .chain((28..32).step_by(2))
                        .map(|at| u16::from_le_bytes([e[at], e[at + 1]]))
                        .take_while(|u| *u != 0 && *u != 0xFFFF)
                        .collect();
                    long = String::from_utf16(&units).unwrap() + &long;
                    continue;
                }
                let base = String::from_utf8_lossy(&e[..8]).trim_end().to_owned();
                let ext = String::from_utf8_lossy(&e[8..11]).trim_end().to_owned();
                let short = if ext.is_empty() {
                    base
                } else {
                    format!("{base}.{ext}")
                };
                let name = if long.is_empty() {
                    short
                } else {
                    std::mem::take(&mut long)
                };
                if name == *part {
                    found = Some(e.to_vec());
                    break;
                }
            }
            let e = found?;
            let cluster = u16::from_le_bytes([e[26], e[27]]) as usize;
            let size = u32::from_le_bytes([e[28], e[29], e[30], e[31]]) as usize;
            if i + 1 == parts.len() {
                return Some(chain(cluster, Some(size)));
            }
            table = chain(cluster, None);
        }
        None
    }

    #[test]
    fn files_are_read_back_by_path_and_long_name() {
        let efi: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        let image = fat12(
            "ingot boot",
            &[
                ("EFI/BOOT/BOOTX64.EFI", &efi),
                ("autoexec.ipxe", b"#!ipxe\nchain http://x/\n"),
                ("a-rather-long-file-name.txt", b""),
            ],
        )
        .unwrap();
        assert_eq!(image.len() % SECTOR, 0);
        assert_eq!(&image[510..512], &[0x55, 0xAA]);
        assert_eq!(&image[54..62], b"FAT12   ");
        assert_eq!(&image[43..54], b"INGOT BOOT ");
        assert_eq!(read(&image, "EFI/BOOT/BOOTX64.EFI").unwrap(), efi);
        assert_eq!(
            read(&image, "autoexec.ipxe").unwrap(),
            b"#!ipxe\nchain http://x/\n"
        );
        assert_eq!(read(&image, "a-rather-long-file-name.txt").unwrap(), b"");
        assert_eq!(read(&image, "EFI/BOOT/missing"), None);
        // The two FATs are the same.
        let fat_sectors = u16::from_le_bytes([image[22], image[23]]) as usize;
        assert_eq!(
            image[SECTOR..(1 + fat_sectors) * SECTOR],
            image[(1 + fat_sectors) * SECTOR..(1 + 2 * fat_sectors) * SECTOR]
        );
        // The same input, the same image.
        assert_eq!(
            image,
            fat12(
                "ingot boot",
                &[
                    ("EFI/BOOT/BOOTX64.EFI", &efi),
                    ("autoexec.ipxe", b"#!ipxe\nchain http://x/\n"),
                    ("a-rather-long-file-name.txt", b""),
                ],
            )
            .unwrap()
        );
    }

    #[test]
    fn a_long_name_gets_a_unique_alias_and_its_checksum() {
        let (first, long) = short_name("autoexec.ipxe", &[]).unwrap();
        assert!(long);
        assert_eq!(&first, b"AUTOEX~1IPX");
        let (second, _) = short_name("autoexec.ipxe2", &[first]).unwrap();
        assert_eq!(&second, b"AUTOEX~2IPX");
        assert_eq!(
            short_name("BOOTX64.EFI", &[]).unwrap(),
            (*b"BOOTX64 EFI", false)
        );
        let entries = long_name_entries("autoexec.ipxe", &first);
        assert_eq!(
            entries.len(),
            ENTRY,
            "13 characters: one entry, no terminator"
        );
        assert_eq!(entries[0], 0x41);
        let sum = first.iter().fold(0u8, |s, b| {
            ((s & 1) << 7).wrapping_add(s >> 1).wrapping_add(*b)
        });
        assert_eq!(entries[13], sum);
    }

    #[test]
    fn what_does_not_fit_is_refused() {
        let big = vec![0u8; (MAX_CLUSTERS + 1) * CLUSTER];
        assert!(
            fat12("x", &[("BIG.BIN", &big)])
                .unwrap_err()
                .contains("do not fit")
        );
        assert!(
            fat12("x", &[("A", b"1"), ("A", b"2")])
                .unwrap_err()
                .contains("twice")
        );
        assert!(
            fat12("x", &[("A/../B", b"1")])
                .unwrap_err()
                .contains("not a file path")
        );
        assert!(
            fat12("x", &[("a:b", b"1")])
                .unwrap_err()
                .contains("not a file name")
        );
    }
}
