//! The scenario runner (`ingot_testenv::scenario!`) shares the harness's test threads: three
//! scenarios in one test binary, whose fixtures count how many of them run at a time.
//!
//! The tests of `one` come first in name order, so with two test threads both threads first
//! run tests of `one`. Its first step waits until another fixture runs beside it: a runner whose
//! waiting tests only waited would hold both threads for `one` and start no other scenario, and
//! that step would fail. Its second step keeps it running for a while, and every fixture's start
//! checks that no more fixtures run than the harness has test threads (a test of its own counts
//! as one): a runner that started the three scenarios at once would fail there.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::sync::Mutex;
use std::time::{Duration, Instant};

use ingot_testenv::wait_for;

/// The fixtures running now, and the most that ever ran at a time.
static RUNNING: Mutex<(usize, usize)> = Mutex::new((0, 0));

fn running() -> (usize, usize) {
    *RUNNING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The harness's test threads: `--test-threads`, else `RUST_TEST_THREADS`, else one per core.
fn test_threads() -> usize {
    let args: Vec<String> = std::env::args().collect();
    let given = args.iter().enumerate().find_map(|(i, arg)| {
        arg.strip_prefix("--test-threads=")
            .map(str::to_owned)
            .or_else(|| {
                (arg == "--test-threads")
                    .then(|| args.get(i + 1).cloned())
                    .flatten()
            })
    });
    given
        .or_else(|| std::env::var("RUST_TEST_THREADS").ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

/// Every test of this binary runs: no filter among the harness's arguments.
fn unfiltered() -> bool {
    std::env::args()
        .skip(1)
        .all(|arg| arg.starts_with("--") && arg != "--exact")
}

/// A fixture that counts itself running from its start to its finish.
struct Counted;

impl Counted {
    fn start() -> Self {
        let now = {
            let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
            running.0 += 1;
            running.1 = running.1.max(running.0);
            running.0
        };
        assert!(
            now <= test_threads(),
            "{now} fixtures run at once, more than the {} test threads",
            test_threads()
        );
        Counted
    }

    fn finish(self) {
        RUNNING.lock().unwrap_or_else(|e| e.into_inner()).0 -= 1;
    }
}

struct One(Counted);

impl One {
    async fn start() -> Self {
        One(Counted::start())
    }

    async fn one_a_another_scenario_runs_while_this_one_waits_on_a_step(&mut self) {
        if test_threads() < 2 || !unfiltered() {
            return;
        }
        wait_for(
            "a second scenario's fixture to run beside this one",
            Duration::from_secs(60),
            async || (running().0 >= 2).then_some(()),
        )
        .await;
    }

    /// Holds this scenario running for a while, during which no more fixtures may start than
    /// there are test threads (each fixture's start checks it).
    async fn one_b_no_more_scenarios_run_than_test_threads(&mut self) {
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            let (now, most) = running();
            assert!(
                now <= test_threads() && most <= test_threads(),
                "{most} fixtures ran at once, more than the {} test threads",
                test_threads()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn one_c_runs_last(&mut self) {
        assert!(running().0 >= 1);
    }

    async fn finish(self) {
        self.0.finish();
    }
}

ingot_testenv::scenario!(mod one: One {
    one_a_another_scenario_runs_while_this_one_waits_on_a_step,
    one_b_no_more_scenarios_run_than_test_threads,
    one_c_runs_last,
});

struct Other(Counted);

impl Other {
    async fn start() -> Self {
        Other(Counted::start())
    }

    async fn step(&mut self) {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (now, most) = running();
        assert!(now >= 1 && most <= test_threads());
    }

    async fn three_a(&mut self) {
        self.step().await;
    }

    async fn three_b(&mut self) {
        self.step().await;
    }

    async fn two_a(&mut self) {
        self.step().await;
    }

    async fn two_b(&mut self) {
        self.step().await;
    }

    async fn finish(self) {
        self.0.finish();
    }
}

ingot_testenv::scenario!(mod two: Other { two_a, two_b });

/// A test of its own counts as a fixture too: it runs beside the scenarios, which its thread
/// does not hold, and their fixtures' starts count it.
#[test]
fn standalone_tests_count_with_the_fixtures() {
    let counted = Counted::start();
    let until = Instant::now() + Duration::from_secs(1);
    while Instant::now() < until {
        let (now, most) = running();
        assert!(now <= test_threads() && most <= test_threads());
        std::thread::sleep(Duration::from_millis(20));
    }
    counted.finish();
}
ingot_testenv::scenario!(mod three: Other { three_a, three_b });
