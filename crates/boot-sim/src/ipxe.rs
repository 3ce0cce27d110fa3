//! Following an iPXE script the way the machine's firmware would, far enough to know what it
//! ends in: the shell, or a kernel booted with a command line.

use std::collections::HashMap;

/// What running a script leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptEnd {
    /// The machine waits in the iPXE shell.
    Shell,
    /// `boot` ran a kernel with this command line (variables expanded).
    Kernel {
        kernel: String,
        cmdline: String,
        initrd: Vec<String>,
    },
}

/// A script that leaves the machine stuck in its firmware.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    #[error("the iPXE script does not start with #!ipxe; iPXE does not run it")]
    NotIpxe,
    #[error(
        "the iPXE script ended without `boot` or `shell`; the machine falls through to the next boot device"
    )]
    NoBoot,
    #[error("iPXE `boot` without a `kernel` line fails: no image to boot")]
    BootWithoutKernel,
    #[error(
        "iPXE command `{command}` on line {line} is not emulated (the emulator runs dhcp, ifconf, iflinkwait, set, echo, kernel, initrd, imgargs, boot, shell, sleep, exit)"
    )]
    Unsupported { command: String, line: usize },
    #[error("iPXE `exit` on line {line}: the machine falls through to the next boot device")]
    Exit { line: usize },
    #[error("`kernel` on line {line} names no image")]
    KernelWithoutImage { line: usize },
}

/// Runs `script` with the machine's NIC MACs (`net0` is `macs[0]`, ...).
pub fn run(script: &str, macs: &[String]) -> Result<ScriptEnd, ScriptError> {
    let mut lines = script.lines();
    let first = lines.next().unwrap_or_default().trim();
    if !first.starts_with("#!ipxe") {
        return Err(ScriptError::NotIpxe);
    }
    let mut vars: HashMap<String, String> = HashMap::new();
    for (i, mac) in macs.iter().enumerate() {
        vars.insert(format!("net{i}/mac"), mac.to_lowercase());
    }
    if let Some(mac) = macs.first() {
        vars.insert("mac".into(), mac.to_lowercase());
        vars.insert("ifname".into(), "net0".into());
    }
    let mut kernel: Option<(String, String)> = None;
    let mut initrd = Vec::new();
    for (index, raw) in script.lines().enumerate().skip(1) {
        let line_no = index + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(':') {
            continue;
        }
        // `a && b || c`: every part runs here; the emulated commands all succeed.
        for part in split_chain(line) {
            let expanded = expand(part, &vars);
            let mut words = expanded.splitn(2, char::is_whitespace);
            let command = words.next().unwrap_or_default();
            let rest = words.next().unwrap_or_default().trim();
            match command {
                "dhcp" | "ifconf" | "ifopen" | "iflinkwait" | "echo" | "sleep" | "prompt" => {}
                "set" => {
                    // iPXE expands settings when `set` runs, as `expanded` did.
                    let mut kv = rest.splitn(2, char::is_whitespace);
                    let name = kv.next().unwrap_or_default();
                    let value = kv.next().unwrap_or_default().trim();
                    if !name.is_empty() {
                        vars.insert(name.to_owned(), value.to_owned());
                    }
                }
                "kernel" => {
                    let (image, args) = split_image(rest);
                    if image.is_empty() {
                        return Err(ScriptError::KernelWithoutImage { line: line_no });
                    }
                    kernel = Some((image.to_owned(), args.to_owned()));
                }
                "imgargs" => {
                    if let Some((image, _)) = &kernel {
                        let (_, args) = split_image(rest);
                        kernel = Some((image.clone(), args.to_owned()));
                    }
                }
                "initrd" => {
                    let (image, _) = split_image(rest);
                    initrd.push(image.to_owned());
                }
                "boot" => {
                    let Some((kernel, cmdline)) = kernel else {
                        return Err(ScriptError::BootWithoutKernel);
                    };
                    return Ok(ScriptEnd::Kernel {
                        kernel,
                        cmdline,
                        initrd,
                    });
                }
                "shell" => return Ok(ScriptEnd::Shell),
                "exit" => return Err(ScriptError::Exit { line: line_no }),
                other => {
                    return Err(ScriptError::Unsupported {
                        command: other.to_owned(),
                        line: line_no,
                    });
                }
            }
        }
    }
    Err(ScriptError::NoBoot)
}

/// `kernel [--name n] URL args...` → (URL, args).
fn split_image(rest: &str) -> (&str, &str) {
    let mut s = rest.trim_start();
    while s.starts_with("--") || s.starts_with("-n ") || s.starts_with("-t ") {
        let mut it = s.splitn(2, char::is_whitespace);
        let opt = it.next().unwrap_or_default();
        s = it.next().unwrap_or_default().trim_start();
        if !opt.contains('=')
            && (opt == "--name" || opt == "-n" || opt == "--timeout" || opt == "-t")
        {
            let mut it = s.splitn(2, char::is_whitespace);
            it.next();
            s = it.next().unwrap_or_default().trim_start();
        }
    }
    let mut it = s.splitn(2, char::is_whitespace);
    let image = it.next().unwrap_or_default();
    (image, it.next().unwrap_or_default().trim())
}

fn split_chain(line: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut rest = line;
    loop {
        let next = [" && ", " || "]
            .iter()
            .filter_map(|sep| rest.find(sep).map(|i| (i, sep.len())))
            .min();
        match next {
            Some((i, len)) => {
                parts.push(rest[..i].trim());
                rest = &rest[i + len..];
            }
            None => {
                parts.push(rest.trim());
                return parts;
            }
        }
    }
}

/// iPXE's `${name}` expansion; an unknown setting expands to nothing, as in iPXE.
fn expand(s: &str, vars: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find('}') {
            Some(end) => {
                let name = &after[..end];
                // `${net0/mac:hex}` and `${net0.dhcp/mac}` name the same setting.
                let key = name
                    .split(':')
                    .next()
                    .unwrap_or_default()
                    .replace(".dhcp/", "/");
                if let Some(v) = vars.get(&key) {
                    out.push_str(v);
                }
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Splits a kernel command line the way Linux does: on whitespace outside double quotes; the
/// quotes are removed from the value. Returns `(key, value)`; a word without `=` has value `None`.
pub fn kernel_params(cmdline: &str) -> Vec<(String, Option<String>)> {
    let mut words = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in cmdline.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut current));
                    any = false;
                }
            }
            c => {
                current.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(current);
    }
    words
        .into_iter()
        .map(|w| match w.split_once('=') {
            Some((k, v)) => (k.to_owned(), Some(v.to_owned())),
            None => (w, None),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn shell_and_install() {
        assert_eq!(run("#!ipxe\nshell\n", &[]).unwrap(), ScriptEnd::Shell);
        let macs = vec![
            "B4:96:91:00:00:01".to_owned(),
            "b4:96:91:00:00:02".to_owned(),
        ];
        let script = "#!ipxe\ndhcp\niflinkwait -t 5000 && echo up on ${ifname}\nset base http://m/v1.0.0\nkernel ${base}/k ip=dhcp x=\"hwAddr:${net1/mac}\" y=${nope}\ninitrd ${base}/i\nboot\n";
        let ScriptEnd::Kernel {
            kernel,
            cmdline,
            initrd,
        } = run(script, &macs).unwrap()
        else {
            panic!()
        };
        assert_eq!(kernel, "http://m/v1.0.0/k");
        assert_eq!(cmdline, "ip=dhcp x=\"hwAddr:b4:96:91:00:00:02\" y=");
        assert_eq!(initrd, vec!["http://m/v1.0.0/i".to_owned()]);
        let params = kernel_params(&cmdline);
        assert_eq!(
            params[1],
            ("x".to_owned(), Some("hwAddr:b4:96:91:00:00:02".to_owned()))
        );
        assert_eq!(run("echo hi\nshell", &[]), Err(ScriptError::NotIpxe));
        assert_eq!(run("#!ipxe\ndhcp\n", &[]), Err(ScriptError::NoBoot));
        assert!(matches!(
            run("#!ipxe\nsanboot x\n", &[]),
            Err(ScriptError::Unsupported { .. })
        ));
    }
}
