//! What `ingot run` says when it cannot start, and what the shipped binary holds: a bad
//! `--controllers` name, a `--provisioning-tink-address` without Tinkerbell mode, or an API
//! server that does not answer gives one line naming the fix, a
//! non-zero exit and no panic; a missing Metal credentials Secret one line naming the command
//! that makes it, while ingot waits for it; the binary the image ships (built without the test-only
//! `crash-points` feature) refuses `--crash-point` and holds no crash-point code.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

fn ingot() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ingot"))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The one `error:` line of stderr, checked to be the last line and the only one, with no panic
/// or backtrace anywhere.
fn one_error_line(output: &Output) -> String {
    let text = stderr(output);
    assert!(
        !text.contains("panicked") && !text.contains("backtrace"),
        "a panic: {text}"
    );
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line expected: {text}");
    assert_eq!(text.lines().last(), Some(errors[0]), "{text}");
    errors[0].to_owned()
}

#[test]
fn an_unknown_controller_name_is_refused_in_one_line_with_the_valid_ones() {
    let output = ingot()
        .args(["run", "--controllers", "pools,bogus"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(line.contains("'bogus'"), "{line}");
    assert!(line.contains("--controllers"), "{line}");
    assert!(
        line.contains("pools, gardener, rufio, seeder, provisioning"),
        "the valid names: {line}"
    );
}

#[test]
fn a_bad_fencing_budget_is_refused_in_one_line_naming_the_flag() {
    let output = ingot()
        .args([
            "run",
            "--controllers",
            "fencing",
            "--fencing-max-unhealthy",
            "120%",
        ])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert!(!output.status.success(), "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(line.contains("--fencing-max-unhealthy"), "{line}");
    assert!(line.contains("\"120%\""), "{line}");
}

#[test]
fn a_tinkerbell_address_without_tinkerbell_mode_is_refused_naming_both_flags() {
    for (args, env) in [
        (vec!["--provisioning-tink-address", "10.1.1.1"], None),
        // The same from the environment, and with the default mode named.
        (
            vec!["--provisioning-boot", "ingot"],
            Some(("INGOT_PROVISIONING_TINK_ADDRESS", "10.1.1.1")),
        ),
    ] {
        let mut command = ingot();
        command
            .args(["run", "--controllers", "provisioning"])
            .args(&args)
            .env("RUST_LOG", "off");
        if let Some((key, value)) = env {
            command.env(key, value);
        }
        let output = command.output().unwrap();
        assert!(!output.status.success(), "{}", stderr(&output));
        let line = one_error_line(&output);
        assert!(
            line.contains("--provisioning-tink-address 10.1.1.1"),
            "{line}"
        );
        assert!(
            line.contains("add --provisioning-boot tinkerbell"),
            "{line}"
        );
        assert!(
            line.contains("remove --provisioning-tink-address"),
            "{line}"
        );
    }
}

fn kubeconfig_for(server: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ingot-startup-{}-{}",
        std::process::id(),
        ingot_testenv::random_suffix(6)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {{server: \"{server}\", insecure-skip-tls-verify: true}}\ncontexts:\n- name: x\n  context: {{cluster: c, user: u}}\ncurrent-context: x\nusers:\n- name: u\n  user: {{token: not-a-token}}\n"
        ),
    )
    .unwrap();
    path
}

fn run_against(kubeconfig: &Path) -> (Output, Duration) {
    let started = Instant::now();
    let output = ingot()
        .arg("run")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        // A port of its own choosing.
        .arg("--http-addr=127.0.0.1:0")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (output, started.elapsed())
}

#[test]
fn an_api_server_that_refuses_connections_is_named_in_one_line() {
    // A port nothing listens on.
    let port = ingot_testenv::harness::closed_port();
    let server = format!("https://127.0.0.1:{port}");
    let kubeconfig = kubeconfig_for(&server);
    let (output, _) = run_against(&kubeconfig);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(line.contains(&server), "the server's URL: {line}");
    assert!(line.contains("--kubeconfig"), "the fix: {line}");
    assert!(line.contains("refused"), "the cause: {line}");
}

#[test]
fn an_api_server_that_does_not_answer_is_named_in_one_line_within_a_bounded_time() {
    // Accepts connections (the backlog) and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = format!("https://{}", silent.local_addr().unwrap());
    let kubeconfig = kubeconfig_for(&server);
    let (output, took) = run_against(&kubeconfig);
    drop(silent);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(line.contains(&server), "the server's URL: {line}");
    assert!(line.contains("--kubeconfig"), "the fix: {line}");
    assert!(line.contains("no answer within"), "the cause: {line}");
    eprintln!(
        "gave up on the silent API server after {:.1} s",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
}

/// A missing Metal credentials Secret is said in one line naming the command that makes it, and
/// ingot keeps running (its pools wait for the Secret with CredentialsReady=False).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_credentials_secret_is_named_in_one_line_and_ingot_waits_for_it() {
    use std::io::{BufRead, BufReader};
    let env = ingot_testenv::shared().await;
    let ns = env.namespace("startup").await.unwrap();
    let mut child = ingot()
        .arg("run")
        .arg(format!("--kubeconfig={}", env.kubeconfig_path().display()))
        // A port of its own choosing.
        .arg("--http-addr=127.0.0.1:0")
        .args(["--controllers", "pools", "--lease-namespace", &ns])
        .args(["--equinix-secret", "no-such-secret"])
        .args(["--equinix-secret-namespace", &ns])
        .args(["--log-format", "text"])
        .env_remove("RUST_LOG")
        .env_remove("TOKEN")
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (lines_tx, lines_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Vec::new();
    let line = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines_rx.recv_timeout(left) {
            Ok(line) if line.contains("no-such-secret") => break line,
            Ok(line) => seen.push(line),
            Err(_) => panic!("no line about the Secret within 60 s: {seen:#?}"),
        }
    };
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains(&format!("{ns}/no-such-secret")), "{line}");
    assert!(
        line.contains(&format!(
            "kubectl -n {ns} create secret generic no-such-secret"
        )),
        "the fix: {line}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        child.try_wait().unwrap().is_none(),
        "ingot stopped instead of waiting for the Secret"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let more: Vec<String> = lines_rx.try_iter().collect();
    assert!(
        !seen.iter().chain(&more).any(|l| l.contains("panicked")),
        "{seen:#?} {more:#?}"
    );
}

/// The binary built without test features, as the image ships it: `INGOT_SHIPPED_BINARY`,
/// which scripts/test.sh builds and sets (it also sets `INGOT_FULL_SUITE`, under which the
/// variable must be there).
fn shipped_binary() -> Option<PathBuf> {
    match std::env::var_os("INGOT_SHIPPED_BINARY") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            assert!(
                std::env::var_os("INGOT_FULL_SUITE").is_none(),
                "scripts/test.sh must set INGOT_SHIPPED_BINARY to the binary built without test features"
            );
            eprintln!(
                "skipped: INGOT_SHIPPED_BINARY is not set (scripts/test.sh builds the shipped binary and sets it)"
            );
            None
        }
    }
}

/// Whether `needle` occurs in the file's bytes (grep: a debug build is hundreds of MB).
fn holds(binary: &Path, needle: &str) -> bool {
    let status = Command::new("grep")
        .args(["-qaF", needle])
        .arg(binary)
        .status()
        .unwrap();
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "grep failed: {status}"
    );
    status.success()
}

#[test]
fn the_shipped_binary_refuses_crash_points_and_holds_none() {
    // The tests' own binary is built with crash points: the same checks see them there, so they
    // would see them in the shipped one.
    let test_build = PathBuf::from(env!("CARGO_BIN_EXE_ingot"));
    if cfg!(feature = "crash-points") {
        assert!(holds(&test_build, "crash point reached"));
        assert!(holds(&test_build, "INGOT_CRASH_POINT"));
    }
    let Some(shipped) = shipped_binary() else {
        return;
    };
    let output = Command::new(&shipped)
        .args(["run", "--crash-point=after-create", "--controllers=pools"])
        .env("INGOT_CRASH_POINT", "after-create")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let line = one_error_line(&output);
    assert!(
        line.contains("unexpected argument '--crash-point'"),
        "{line}"
    );
    for needle in ["crash point reached", "INGOT_CRASH_POINT"] {
        assert!(
            !holds(&shipped, needle),
            "{} holds {needle:?}: built with the crash-points feature",
            shipped.display()
        );
    }
}
