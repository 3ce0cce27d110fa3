//! The installer initrd of the boot tests, built in memory: a `newc` cpio archive (the format the
//! kernel unpacks) of busybox, the `/init` script and the NIC's kernel modules in load order.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A cpio archive in the `newc` format, written entry by entry.
#[derive(Default)]
pub struct Cpio {
    bytes: Vec<u8>,
    next_inode: u32,
}

const DIR: u32 = 0o040_000;
const FILE: u32 = 0o100_000;
const CHAR_DEVICE: u32 = 0o020_000;

impl Cpio {
    pub fn dir(&mut self, name: &str) {
        self.entry(name, DIR | 0o755, &[], (0, 0));
    }

    pub fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, FILE | mode, data, (0, 0));
    }

    /// A character device node (no root needed: it is only a header in the archive).
    pub fn char_device(&mut self, name: &str, mode: u32, major: u32, minor: u32) {
        self.entry(name, CHAR_DEVICE | mode, &[], (major, minor));
    }

    /// The archive, closed by its trailer.
    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        self.bytes
    }

    fn entry(&mut self, name: &str, mode: u32, data: &[u8], (major, minor): (u32, u32)) {
        self.next_inode += 1;
        let size = u32::try_from(data.len()).unwrap_or_else(|_| panic!("{name}: over 4 GiB"));
        let name_size = u32::try_from(name.len() + 1).unwrap_or(u32::MAX);
        // ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check
        let fields = [
            self.next_inode,
            mode,
            0,
            0,
            1,
            0,
            size,
            0,
            0,
            major,
            minor,
            name_size,
            0,
        ];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes
                .extend_from_slice(format!("{field:08X}").as_bytes());
        }
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }
}

/// The `.ko` files under `dir` that `wanted` need, dependencies first (each module's `depends=`
/// from its `.modinfo`), or what is missing.
pub fn modules_in_load_order(dir: &Path, wanted: &[&str]) -> Result<Vec<PathBuf>, String> {
    let mut index = HashMap::new();
    index_modules(dir, &mut index)?;
    let mut order = Vec::new();
    for name in wanted {
        visit(name, &index, &mut order, &mut Vec::new(), dir)?;
    }
    Ok(order)
}

fn index_modules(dir: &Path, index: &mut HashMap<String, PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("reading the directory {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            index_modules(&path, index)?;
        } else if let Some(stem) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".ko"))
        {
            index.insert(stem.replace('-', "_"), path);
        }
    }
    Ok(())
}

fn visit(
    name: &str,
    index: &HashMap<String, PathBuf>,
    order: &mut Vec<PathBuf>,
    stack: &mut Vec<String>,
    dir: &Path,
) -> Result<(), String> {
    let name = name.replace('-', "_");
    let path = index.get(&name).ok_or_else(|| {
        format!(
            "the kernel module {name} is not under {} (scripts/lib.sh install_qemu_peer keeps the NIC's modules)",
            dir.display()
        )
    })?;
    if order.contains(path) {
        return Ok(());
    }
    if stack.contains(&name) {
        return Err(format!(
            "the kernel modules depend on each other in a cycle: {stack:?}"
        ));
    }
    let bytes =
        std::fs::read(path).map_err(|e| format!("reading the module {}: {e}", path.display()))?;
    stack.push(name.clone());
    for dependency in depends(&bytes) {
        visit(&dependency, index, order, stack, dir)?;
    }
    stack.pop();
    order.push(path.clone());
    Ok(())
}

/// The modules a `.ko` names in its `.modinfo` string `depends=a,b`.
pub fn depends(module: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\0depends=";
    let Some(start) = module.windows(KEY.len()).position(|w| w == KEY) else {
        return Vec::new();
    };
    let rest = &module[start + KEY.len()..];
    let end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end])
        .split(',')
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry read back: name, mode, (rdev major, minor), data.
    type Entry = (String, u32, (u32, u32), Vec<u8>);

    /// The entries of a newc archive, read back by the format's rules.
    fn entries(mut bytes: &[u8]) -> Vec<Entry> {
        let hex = |b: &[u8]| u32::from_str_radix(std::str::from_utf8(b).unwrap(), 16).unwrap();
        let align = |n: usize| n.div_ceil(4) * 4;
        let mut out = Vec::new();
        loop {
            assert_eq!(&bytes[..6], b"070701");
            let field = |i: usize| hex(&bytes[6 + 8 * i..14 + 8 * i]);
            let (mode, size, rdev, name_size) =
                (field(1), field(6), (field(9), field(10)), field(11));
            let name =
                String::from_utf8(bytes[110..110 + name_size as usize - 1].to_vec()).unwrap();
            let data_start = align(110 + name_size as usize);
            let data = bytes[data_start..data_start + size as usize].to_vec();
            bytes = &bytes[align(data_start + size as usize)..];
            if name == "TRAILER!!!" {
                assert!(bytes.is_empty());
                return out;
            }
            out.push((name, mode, rdev, data));
        }
    }

    #[test]
    fn the_archive_reads_back_entry_by_entry() {
        let mut cpio = Cpio::default();
        cpio.dir("dev");
        cpio.char_device("dev/console", 0o600, 5, 1);
        cpio.file("init", 0o755, b"#!/bin/sh\n");
        let read = entries(&cpio.finish());
        assert_eq!(
            read,
            vec![
                ("dev".into(), 0o040_755, (0, 0), vec![]),
                ("dev/console".into(), 0o020_600, (5, 1), vec![]),
                ("init".into(), 0o100_755, (0, 0), b"#!/bin/sh\n".to_vec()),
            ]
        );
    }

    #[test]
    fn modules_load_after_what_they_depend_on() {
        let dir = std::env::temp_dir().join(format!("ingot-modules-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        let module = |deps: &str| {
            format!("\x7fELF...\0license=GPL\0depends={deps}\0vermagic=6.1").into_bytes()
        };
        std::fs::write(
            dir.join("a/virtio_net.ko"),
            module("virtio_ring,net_failover"),
        )
        .unwrap();
        std::fs::write(dir.join("a/b/net_failover.ko"), module("failover")).unwrap();
        std::fs::write(dir.join("a/b/failover.ko"), module("")).unwrap();
        std::fs::write(dir.join("virtio_ring.ko"), module("")).unwrap();
        let order = modules_in_load_order(&dir, &["virtio_net", "failover"]).unwrap();
        let names: Vec<_> = order
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "virtio_ring.ko",
                "failover.ko",
                "net_failover.ko",
                "virtio_net.ko"
            ]
        );
        let missing = modules_in_load_order(&dir, &["e1000"]).unwrap_err();
        assert!(missing.contains("e1000"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
