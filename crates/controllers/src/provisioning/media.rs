//! The boot CD of one node, for sites without PXE (virtual media): a small ISO 9660 image that
//! boots into iPXE running the node's script: the node's address set static on the NIC with its
//! MAC, then a chain to the boot server's `/boot/<mac>`, the same script a PXE boot gets. No
//! DHCP is needed.
//!
//! - BIOS: ISOLINUX (El Torito, no emulation) boots `ipxe.lkrn` with the script `node.ipxe` as
//!   its initrd.
//! - UEFI, when `--boot-media-dir` also holds `ipxe.efi`: a second El Torito entry, for the EFI
//!   platform, whose image is a FAT file system ([`super::fat`]) with `/EFI/BOOT/BOOTX64.EFI`
//!   (iPXE) and the script as `/autoexec.ipxe`, which iPXE runs from the file system it was
//!   loaded from (iPXE 1.21.1 and later). So the CD boots in the machine's current boot mode.
//!
//! The boot programs are the site's own files (`--boot-media-dir`: Debian's `isolinux`,
//! `syslinux-common` and `ipxe` packages ship them), read once at start; the image is built per
//! request, in memory, a few hundred KiB (1.5 MiB with a 1 MiB `ipxe.efi`).

use std::path::Path;

/// The most bytes one boot program may have (ipxe.lkrn is about 350 KiB).
pub const MAX_PROGRAM: u64 = 4 * 1024 * 1024;

/// The boot programs the image is made of.
#[derive(Clone)]
pub struct MediaFiles {
    pub isolinux: Vec<u8>,
    pub ldlinux: Vec<u8>,
    pub ipxe: Vec<u8>,
    /// iPXE for UEFI (`ipxe.efi`), optional: without it the CD boots BIOS machines only.
    pub ipxe_efi: Option<Vec<u8>>,
}

impl std::fmt::Debug for MediaFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MediaFiles")
            .field("isolinux", &self.isolinux.len())
            .field("ldlinux", &self.ldlinux.len())
            .field("ipxe", &self.ipxe.len())
            .field("ipxe_efi", &self.ipxe_efi.as_ref().map(Vec::len))
            .finish()
    }
}

/// The files `--boot-media-dir` must hold.
pub const PROGRAMS: [&str; 3] = ["isolinux.bin", "ldlinux.c32", "ipxe.lkrn"];

/// The file `--boot-media-dir` may hold for UEFI machines.
pub const UEFI_PROGRAM: &str = "ipxe.efi";

impl MediaFiles {
    /// Reads `isolinux.bin`, `ldlinux.c32` and `ipxe.lkrn` from `dir`, naming what is missing,
    /// and `ipxe.efi` when it is there.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let read = |name: &str| -> Result<Vec<u8>, String> {
            let path = dir.join(name);
            let meta = std::fs::metadata(&path).map_err(|e| {
                format!(
                    "{}: {e}; --boot-media-dir must hold isolinux.bin (Debian: isolinux), ldlinux.c32 (syslinux-common, modules/bios) and ipxe.lkrn (ipxe)",
                    path.display()
                )
            })?;
            if meta.len() > MAX_PROGRAM {
                return Err(format!(
                    "{} is {} bytes, more than {MAX_PROGRAM}: not a boot program",
                    path.display(),
                    meta.len()
                ));
            }
            std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
        };
        let files = MediaFiles {
            isolinux: read(PROGRAMS[0])?,
            ldlinux: read(PROGRAMS[1])?,
            ipxe: read(PROGRAMS[2])?,
            ipxe_efi: match dir.join(UEFI_PROGRAM).try_exists() {
                Ok(true) => Some(read(UEFI_PROGRAM)?),
                Ok(false) => None,
                Err(e) => return Err(format!("{}: {e}", dir.join(UEFI_PROGRAM).display())),
            },
        };
        if files.isolinux.len() < BOOT_INFO_END {
            return Err(format!(
                "{} is too short to be ISOLINUX",
                dir.join(PROGRAMS[0]).display()
            ));
        }
        Ok(files)
    }
}

/// Where one node's boot CD sends it.
#[derive(Clone, Debug)]
pub struct NodeBoot<'a> {
    /// `<namespace>/<name>` of its Inventory (a comment in the script).
    pub inventory: &'a str,
    pub mac: &'a str,
    pub address: &'a str,
    pub netmask: &'a str,
    pub gateway: &'a str,
    /// The boot server's `/boot/<mac>`.
    pub script_url: &'a url::Url,
}

/// Where a BMC fetches the boot CD of Inventory `namespace/name`: the boot server's
/// `/media/<namespace>/<name>.iso` under `boot_url` (`--boot-url`). `None` without `--boot-url`;
/// the error names the URL.
pub fn media_url(
    boot_url: Option<&url::Url>,
    namespace: &str,
    name: &str,
) -> Option<Result<String, String>> {
    let boot_url = boot_url?;
    Some(
        boot_url
            .join(&format!("media/{namespace}/{name}.iso"))
            .map(|u| u.to_string())
            .map_err(|e| format!("the boot URL {boot_url}: {e}")),
    )
}

/// The node's iPXE script: the NIC with its MAC gets the static address, then the chain. A
/// value with a blank or a control character is refused (it could add a command).
pub fn node_script(node: &NodeBoot) -> Result<String, String> {
    for (what, value) in [
        ("MAC", node.mac),
        ("address", node.address),
        ("netmask", node.netmask),
        ("gateway", node.gateway),
    ] {
        if value.is_empty()
            || value
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == '$')
        {
            return Err(format!(
                "the node's {what} {value:?} cannot go into a boot script"
            ));
        }
    }
    let mac = node.mac.to_ascii_lowercase();
    Ok(format!(
        "#!ipxe\n\
         # ingot: the boot CD of {inventory}: a static address, no DHCP\n\
         set idx:int32 0\n\
         :nic\n\
         isset ${{net${{idx}}/mac}} || goto none\n\
         iseq ${{net${{idx}}/mac}} {mac} && goto found ||\n\
         inc idx\n\
         goto nic\n\
         :none\n\
         echo ingot: no NIC has the MAC {mac}\n\
         exit 1\n\
         :found\n\
         set net${{idx}}/ip {address}\n\
         set net${{idx}}/netmask {netmask}\n\
         set net${{idx}}/gateway {gateway}\n\
         ifopen net${{idx}}\n\
         chain --autofree {url}\n",
        inventory = node.inventory,
        address = node.address,
        netmask = node.netmask,
        gateway = node.gateway,
        url = node.script_url,
    ))
}

/// The ISOLINUX configuration: iPXE with the node's script as its initrd (iPXE runs a script
/// given that way).
const ISOLINUX_CFG: &str = "DEFAULT ipxe\nPROMPT 0\nTIMEOUT 0\nLABEL ipxe\n  KERNEL /isolinux/ipxe.lkrn\n  INITRD /isolinux/node.ipxe\n";

/// Where UEFI firmware looks for the boot program of removable media.
const EFI_BOOT_PROGRAM: &str = "EFI/BOOT/BOOTX64.EFI";

/// The node's boot CD.
pub fn node_iso(files: &MediaFiles, node: &NodeBoot) -> Result<Vec<u8>, String> {
    let script = node_script(node)?;
    let esp = match &files.ipxe_efi {
        Some(ipxe_efi) => Some(super::fat::fat12(
            "INGOT_BOOT",
            &[
                (EFI_BOOT_PROGRAM, ipxe_efi),
                ("autoexec.ipxe", script.as_bytes()),
            ],
        )?),
        None => None,
    };
    let mut entries: Vec<(&str, &[u8])> = Vec::new();
    if let Some(esp) = &esp {
        entries.push(("EFIBOOT.IMG", esp));
    }
    entries.extend([
        ("IPXE.LKRN", &files.ipxe[..]),
        ("ISOLINUX.BIN", &files.isolinux),
        ("ISOLINUX.CFG", ISOLINUX_CFG.as_bytes()),
        ("LDLINUX.C32", &files.ldlinux),
        ("NODE.IPXE", script.as_bytes()),
    ]);
    let efi = esp.is_some().then_some("EFIBOOT.IMG");
    Ok(iso9660(
        "INGOT_BOOT",
        "ISOLINUX",
        &entries,
        "ISOLINUX.BIN",
        efi,
    ))
}

const SECTOR: usize = 2048;
/// The end of ISOLINUX's boot information table (bytes 8..64, filled in by the image writer).
const BOOT_INFO_END: usize = 64;

/// An ISO 9660 image whose root holds one directory `dir` with `files` (sorted by name, upper
/// case, at most a sector of entries), El Torito bootable from `boot` (no emulation, four
/// 512-byte sectors loaded at 07C0:0000), its boot information table filled in as ISOLINUX
/// needs it; with `efi`, also for UEFI, from that file (an EFI system partition image).
pub fn iso9660(
    volume: &str,
    dir: &str,
    files: &[(&str, &[u8])],
    boot: &str,
    efi: Option<&str>,
) -> Vec<u8> {
    const PVD: usize = 16;
    const BOOT_RECORD: usize = 17;
    const TERMINATOR: usize = 18;
    const PATH_L: usize = 19;
    const PATH_M: usize = 20;
    const ROOT: usize = 21;
    const SUBDIR: usize = 22;
    const CATALOG: usize = 23;
    let mut lba = CATALOG + 1;
    let extents: Vec<(usize, usize)> = files
        .iter()
        .map(|(_, data)| {
            let at = lba;
            lba += data.len().div_ceil(SECTOR).max(1);
            (at, data.len())
        })
        .collect();
    let total = lba;
    let mut image = vec![0u8; total * SECTOR];
    let sector = |n: usize| n * SECTOR..(n + 1) * SECTOR;

    // The directories.
    let root_record = dir_record(&[0], ROOT, SECTOR, true);
    let mut root = Vec::new();
    root.extend(dir_record(&[0], ROOT, SECTOR, true));
    root.extend(dir_record(&[1], ROOT, SECTOR, true));
    root.extend(dir_record(dir.as_bytes(), SUBDIR, SECTOR, true));
    let mut sub = Vec::new();
    sub.extend(dir_record(&[0], SUBDIR, SECTOR, true));
    sub.extend(dir_record(&[1], ROOT, SECTOR, true));
    for ((name, _), (at, len)) in files.iter().zip(&extents) {
        sub.extend(dir_record(format!("{name};1").as_bytes(), *at, *len, false));
    }
    assert!(
        sub.len() <= SECTOR,
        "the boot CD's directory fits one sector"
    );
    let r = sector(ROOT);
    image[r.start..r.start + root.len()].copy_from_slice(&root);
    let r = sector(SUBDIR);
    image[r.start..r.start + sub.len()].copy_from_slice(&sub);

    // The path tables: the root, then the directory (parent: the root, number 1).
    let path_table = |big_endian: bool| {
        let mut t = Vec::new();
        for (name, at) in [(&[0u8][..], ROOT), (dir.as_bytes(), SUBDIR)] {
            t.push(name.len() as u8);
            t.push(0);
            let at = at as u32;
            t.extend(if big_endian {
                at.to_be_bytes()
            } else {
                at.to_le_bytes()
            });
            t.extend(if big_endian {
                1u16.to_be_bytes()
            } else {
                1u16.to_le_bytes()
            });
            t.extend(name);
            if name.len() % 2 == 1 {
                t.push(0);
            }
        }
        t
    };
    let l = path_table(false);
    let m = path_table(true);
    let r = sector(PATH_L);
    image[r.start..r.start + l.len()].copy_from_slice(&l);
    let r = sector(PATH_M);
    image[r.start..r.start + m.len()].copy_from_slice(&m);

    // The primary volume descriptor.
    let mut pvd = vec![0u8; SECTOR];
    pvd[0] = 1;
    pvd[1..6].copy_from_slice(b"CD001");
    pvd[6] = 1;
    pad(&mut pvd[8..40], b"");
    pad(&mut pvd[40..72], volume.as_bytes());
    both32(&mut pvd[80..88], total as u32);
    both16(&mut pvd[120..124], 1);
    both16(&mut pvd[124..128], 1);
    both16(&mut pvd[128..132], SECTOR as u16);
    both32(&mut pvd[132..140], l.len() as u32);
    pvd[140..144].copy_from_slice(&(PATH_L as u32).to_le_bytes());
    pvd[148..152].copy_from_slice(&(PATH_M as u32).to_be_bytes());
    pvd[156..156 + root_record.len()].copy_from_slice(&root_record);
    for field in [
        190..318,
        318..446,
        446..574,
        574..702,
        702..739,
        739..776,
        776..813,
    ] {
        pad(&mut pvd[field], b"");
    }
    for date in [813, 830, 847, 864] {
        pvd[date..date + 16].copy_from_slice(b"0000000000000000");
    }
    pvd[881] = 1;
    image[sector(PVD)].copy_from_slice(&pvd);

    // El Torito: the boot record, then the terminator.
    let mut record = vec![0u8; SECTOR];
    record[1..6].copy_from_slice(b"CD001");
    record[6] = 1;
    record[7..7 + 23].copy_from_slice(b"EL TORITO SPECIFICATION");
    record[71..75].copy_from_slice(&(CATALOG as u32).to_le_bytes());
    image[sector(BOOT_RECORD)].copy_from_slice(&record);
    let mut end = vec![0u8; SECTOR];
    end[0] = 255;
    end[1..6].copy_from_slice(b"CD001");
    end[6] = 1;
    image[sector(TERMINATOR)].copy_from_slice(&end);

    // The files; the boot program with its boot information table.
    let mut boot_at = None;
    let mut efi_at = None;
    for ((name, data), (at, len)) in files.iter().zip(&extents) {
        let start = at * SECTOR;
        image[start..start + len].copy_from_slice(data);
        if *name == boot {
            boot_at = Some((*at, *len));
        }
        if Some(*name) == efi {
            efi_at = Some((*at, *len));
        }
    }
    let (boot_lba, boot_len) = boot_at.unwrap_or((CATALOG + 1, 0));
    if boot_len >= BOOT_INFO_END {
        let start = boot_lba * SECTOR;
        let mut checksum = 0u32;
        for word in image[start + BOOT_INFO_END..start + boot_len.div_ceil(4) * 4].chunks(4) {
            let mut bytes = [0u8; 4];
            bytes[..word.len()].copy_from_slice(word);
            checksum = checksum.wrapping_add(u32::from_le_bytes(bytes));
        }
        let table = &mut image[start + 8..start + BOOT_INFO_END];
        table.fill(0);
        table[0..4].copy_from_slice(&(PVD as u32).to_le_bytes());
        table[4..8].copy_from_slice(&(boot_lba as u32).to_le_bytes());
        table[8..12].copy_from_slice(&(boot_len as u32).to_le_bytes());
        table[12..16].copy_from_slice(&checksum.to_le_bytes());
    }

    // The boot catalog: the validation entry, then the default entry.
    let mut catalog = vec![0u8; SECTOR];
    catalog[0] = 1;
    catalog[30] = 0x55;
    catalog[31] = 0xAA;
    let sum = catalog[..32].chunks(2).fold(0u16, |s, w| {
        s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
    });
    catalog[28..30].copy_from_slice(&0u16.wrapping_sub(sum).to_le_bytes());
    catalog[32] = 0x88;
    catalog[38..40].copy_from_slice(&4u16.to_le_bytes());
    catalog[40..44].copy_from_slice(&(boot_lba as u32).to_le_bytes());
    if let Some((efi_lba, efi_len)) = efi_at {
        // The last section header (0x91), for the EFI platform (0xEF), one entry: bootable, no
        // emulation, the whole image counted in 512-byte sectors.
        catalog[64] = 0x91;
        catalog[65] = 0xEF;
        catalog[66..68].copy_from_slice(&1u16.to_le_bytes());
        catalog[96] = 0x88;
        let sectors = u16::try_from(efi_len.div_ceil(512)).unwrap_or(0);
        catalog[102..104].copy_from_slice(&sectors.to_le_bytes());
        catalog[104..108].copy_from_slice(&(efi_lba as u32).to_le_bytes());
    }
    image[sector(CATALOG)].copy_from_slice(&catalog);
    image
}

/// One directory record.
fn dir_record(name: &[u8], extent: usize, len: usize, directory: bool) -> Vec<u8> {
    let mut r = vec![0u8; 33 + name.len() + (1 - name.len() % 2)];
    r[0] = r.len() as u8;
    both32(&mut r[2..10], extent as u32);
    both32(&mut r[10..18], len as u32);
    // Recorded 1980-01-01 00:00 UTC: a fixed date, so that one node's image is always the same.
    r[18] = 80;
    r[19] = 1;
    r[20] = 1;
    r[25] = if directory { 2 } else { 0 };
    both16(&mut r[28..32], 1);
    r[32] = name.len() as u8;
    r[33..33 + name.len()].copy_from_slice(name);
    r
}

fn both32(field: &mut [u8], value: u32) {
    field[0..4].copy_from_slice(&value.to_le_bytes());
    field[4..8].copy_from_slice(&value.to_be_bytes());
}

fn both16(field: &mut [u8], value: u16) {
    field[0..2].copy_from_slice(&value.to_le_bytes());
    field[2..4].copy_from_slice(&value.to_be_bytes());
}

/// `text`, then spaces to the field's end.
fn pad(field: &mut [u8], text: &[u8]) {
    field.fill(b' ');
    field[..text.len()].copy_from_slice(text);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn node(url: &url::Url) -> NodeBoot<'_> {
        NodeBoot {
            inventory: "metal/node0",
            mac: "52:54:00:AB:CD:01",
            address: "10.0.2.20",
            netmask: "255.255.255.128",
            gateway: "10.0.2.2",
            script_url: url,
        }
    }

    fn files() -> MediaFiles {
        let mut isolinux = vec![0u8; 3000];
        isolinux[100] = 7;
        MediaFiles {
            isolinux,
            ldlinux: b"ldlinux".to_vec(),
            ipxe: b"ipxe".to_vec(),
            ipxe_efi: None,
        }
    }

    #[test]
    fn the_script_sets_the_address_on_the_nic_with_the_mac_and_chains() {
        let url = url::Url::parse("http://10.0.2.2:8081/boot/52:54:00:ab:cd:01").unwrap();
        let script = node_script(&node(&url)).unwrap();
        assert!(script.starts_with("#!ipxe\n"), "{script}");
        assert!(script.contains("iseq ${net${idx}/mac} 52:54:00:ab:cd:01 && goto found"));
        assert!(script.contains("set net${idx}/ip 10.0.2.20\n"));
        assert!(script.contains("set net${idx}/netmask 255.255.255.128\n"));
        assert!(script.contains("set net${idx}/gateway 10.0.2.2\n"));
        assert!(script.ends_with("chain --autofree http://10.0.2.2:8081/boot/52:54:00:ab:cd:01\n"));
        let mut bad = node(&url);
        bad.address = "10.0.2.20\nshell";
        assert!(node_script(&bad).unwrap_err().contains("address"));
    }

    #[test]
    fn the_image_is_el_torito_bootable_with_the_boot_information_table() {
        let url = url::Url::parse("http://10.0.2.2:8081/boot/x").unwrap();
        let files = files();
        let iso = node_iso(&files, &node(&url)).unwrap();
        assert_eq!(iso.len() % SECTOR, 0);
        // The volume descriptors.
        assert_eq!(&iso[16 * SECTOR..16 * SECTOR + 6], b"\x01CD001");
        assert_eq!(
            &iso[17 * SECTOR + 7..17 * SECTOR + 30],
            b"EL TORITO SPECIFICATION"
        );
        assert_eq!(iso[18 * SECTOR], 255);
        // The catalog: a valid validation entry and a bootable no-emulation entry.
        let catalog =
            u32::from_le_bytes(iso[17 * SECTOR + 71..17 * SECTOR + 75].try_into().unwrap())
                as usize;
        let c = &iso[catalog * SECTOR..catalog * SECTOR + 64];
        let sum = c[..32].chunks(2).fold(0u16, |s, w| {
            s.wrapping_add(u16::from_le_bytes([w[0], w[1]]))
        });
        assert_eq!((c[0], sum, c[30], c[31]), (1, 0, 0x55, 0xAA));
        assert_eq!((c[32], c[33]), (0x88, 0));
        let boot = u32::from_le_bytes(c[40..44].try_into().unwrap()) as usize;
        // The boot program, its table filled in: the PVD, itself, its length, its checksum.
        let b = &iso[boot * SECTOR..];
        let word = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        assert_eq!(
            (word(8), word(12) as usize, word(16) as usize, word(20)),
            (16, boot, files.isolinux.len(), 7)
        );
        assert_eq!(b[100], 7);
        // The script and the configuration are files of the image.
        let text = String::from_utf8_lossy(&iso);
        assert!(text.contains("NODE.IPXE;1"));
        assert!(text.contains("set net${idx}/ip 10.0.2.20"));
        assert!(text.contains("INITRD /isolinux/node.ipxe"));
        // Built twice, the same bytes.
        assert_eq!(iso, node_iso(&files, &node(&url)).unwrap());
    }

    #[test]
    fn with_ipxe_efi_the_image_also_boots_uefi_from_an_efi_system_partition() {
        let url = url::Url::parse("http://10.0.2.2:8081/boot/x").unwrap();
        let bios_only = node_iso(&files(), &node(&url)).unwrap();
        let catalog_of = |iso: &[u8]| {
            let at = u32::from_le_bytes(iso[17 * SECTOR + 71..17 * SECTOR + 75].try_into().unwrap())
                as usize;
            iso[at * SECTOR..(at + 1) * SECTOR].to_vec()
        };
        assert_eq!(
            catalog_of(&bios_only)[64],
            0,
            "no EFI section without ipxe.efi"
        );

        let mut files = files();
        files.ipxe_efi = Some(b"MZ ipxe for uefi".to_vec());
        let iso = node_iso(&files, &node(&url)).unwrap();
        let c = catalog_of(&iso);
        // The BIOS entry stays the default one.
        assert_eq!((c[32], c[33]), (0x88, 0));
        // The last section: the EFI platform, one bootable no-emulation entry.
        assert_eq!((c[64], c[65], c[66], c[67]), (0x91, 0xEF, 1, 0));
        assert_eq!((c[96], c[97]), (0x88, 0));
        let sectors = u16::from_le_bytes([c[102], c[103]]) as usize;
        let lba = u32::from_le_bytes(c[104..108].try_into().unwrap()) as usize;
        // Its image: the FAT file system with iPXE where UEFI looks and the node's script.
        let script = node_script(&node(&url)).unwrap();
        let esp = crate::provisioning::fat::fat12(
            "INGOT_BOOT",
            &[
                (EFI_BOOT_PROGRAM, b"MZ ipxe for uefi"),
                ("autoexec.ipxe", script.as_bytes()),
            ],
        )
        .unwrap();
        assert_eq!(sectors, esp.len() / 512);
        assert_eq!(&iso[lba * SECTOR..lba * SECTOR + esp.len()], &esp[..]);
    }
}
