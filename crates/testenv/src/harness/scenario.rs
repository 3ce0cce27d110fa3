//! Named tests over one shared fixture: a scenario is a fixture started once per test binary and
//! a list of steps run in order on it, each step reported as its own `#[test]`.
//!
//! [`scenario!`](crate::scenario) declares one; a test binary may hold several (each with its
//! own module, so its own state). The fixture is a type with
//!
//! - `async fn start() -> Self`: the peers, the objects, the operator;
//! - one `async fn step_name(&mut self)` per step, which asserts one behaviour, starting from
//!   what the steps before it left;
//! - `async fn finish(self)`: stops what `start` started and removes what the scenario made.
//!
//! A scenario runs on a thread and a runtime of its own (the fixture's clients and processes
//! live as long as that runtime); its tests only wait for it. Each test waits for its own step,
//! then reports it: the step's panic, "not run" after an earlier step failed, or the fixture's
//! failure to start. The test of the last step also waits for the fixture to be torn down, and
//! reports a failure to finish.
//!
//! How scenarios share the harness's test threads (as many as `--test-threads`, by default one
//! per core). The harness runs tests in name order, so a scenario's tests are often neighbours,
//! and each of them holds a test thread while it waits for its step: were waiting all they did,
//! one scenario would hold every thread, and the binary's other tests and scenarios would wait
//! for it. So a test that has to wait puts its thread to work:
//!
//! - the first of a scenario's tests to run starts it, unless a test started it already;
//! - a test that has to wait and started nothing starts the scenario of the binary that comes
//!   first in name order among those its filters select that have not started (the binary's
//!   scenarios are registered by `scenario!` in [`SCENARIOS`]);
//! - a test that started a scenario returns only once that scenario is torn down.
//!
//! So each running scenario is held by the test that started it, as a long test holds its
//! thread, and a test starts at most one: no more fixtures run at a time than there are test
//! threads, counting the binary's other tests (two at a time on two cores, as when each
//! scenario was one long test), none outlives the test binary, and no test thread only waits
//! while a selected scenario has not started. A scenario never waits for a test, so a lock that
//! tests and scenarios take to run one at a time (pools.rs's) cannot deadlock with this. A test
//! that started another scenario reports its own step only once that scenario is done (what
//! that scenario prints is in this test's output); that scenario's tests report its steps.
//! Which tests run is read from the harness's arguments (filters, `--skip`, `--exact`);
//! arguments this does not know (`--ignored`, `--list`...) start no scenario but by its own
//! tests.
//!
//! ```ignore
//! struct Deployment { /* ... */ }
//! impl Deployment {
//!     async fn start() -> Self { /* ... */ }
//!     async fn it_scales_up(&mut self) { /* ... */ }
//!     async fn it_scales_down(&mut self) { /* ... */ }
//!     async fn finish(self) { /* ... */ }
//! }
//! ingot_testenv::scenario!(mod deployment: Deployment { it_scales_up, it_scales_down });
//! ```
//!
//! The tests keep the steps' names (`it_scales_up`, `it_scales_down`) at the place of the macro;
//! the module (`deployment`) holds the scenario's state.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::Instant;

use futures::FutureExt;

#[doc(hidden)]
pub use linkme as __linkme;

/// The future of one step, borrowing the fixture (what the generated dispatcher returns).
pub type StepFuture<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

// A linker section gathers the scenarios of every module of the test binary into one slice
// (`linkme`): each is added by a static in that section, which `scenario!` declares with
// `allow(unsafe_code)` (the lint's name for `link_section`; no unsafe code is written).
#[linkme::distributed_slice]
/// Every scenario of this test binary; [`scenario!`](crate::scenario) adds each one.
pub static SCENARIOS: [&'static Scenario];

/// The state of one scenario: its steps, the steps' outcomes so far, whether the fixture is torn
/// down. Declared by [`scenario!`](crate::scenario) as a static.
pub struct Scenario {
    /// The path of the scenario's module (`module_path!()`); its tests are in its parent.
    module: &'static str,
    steps: &'static [&'static str],
    /// Starts the fixture, runs the steps, finishes the fixture (see [`play`]).
    play: fn(&'static Scenario),
    started: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Step → its outcome (`Err`: why it failed or did not run), as each becomes known.
    outcomes: BTreeMap<&'static str, Result<(), String>>,
    /// The fixture is torn down (or the scenario's thread ended).
    finished: bool,
    /// Why the fixture could not be torn down.
    finish_failure: Option<String>,
}

impl Scenario {
    /// The scenario of the module `module` (its `module_path!()`) and of `steps`, in the order
    /// they run; `play` runs it.
    pub const fn new(
        module: &'static str,
        steps: &'static [&'static str],
        play: fn(&'static Scenario),
    ) -> Self {
        Self {
            module,
            steps,
            play,
            started: AtomicBool::new(false),
            state: Mutex::new(State {
                outcomes: BTreeMap::new(),
                finished: false,
                finish_failure: None,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn report(&self, step: &'static str, outcome: Result<(), String>) {
        self.lock().outcomes.entry(step).or_insert(outcome);
        self.changed.notify_all();
    }

    /// Every step without an outcome fails with `why`.
    fn fail_the_rest(&self, why: &str) {
        let mut state = self.lock();
        for step in self.steps {
            state
                .outcomes
                .entry(step)
                .or_insert_with(|| Err(why.to_owned()));
        }
        drop(state);
        self.changed.notify_all();
    }

    fn set_finished(&self) {
        self.lock().finished = true;
        self.changed.notify_all();
    }

    /// Waits until `ready` says something of the state.
    fn wait_until<T>(&self, mut ready: impl FnMut(&State) -> Option<T>) -> T {
        let mut state = self.lock();
        loop {
            if let Some(value) = ready(&state) {
                return value;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// The name the harness gives the test of `step`: its path in the crate, beside the
    /// scenario's module.
    fn test_name(&self, step: &str) -> String {
        let mut path: Vec<&str> = self.module.split("::").skip(1).collect();
        path.pop();
        path.push(step);
        path.join("::")
    }

    /// Starts the scenario on a thread of its own, unless it was started already; whether this
    /// call started it.
    fn start(&'static self) -> bool {
        if self.started.swap(true, Ordering::SeqCst) {
            return false;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("scenario {}", self.module))
            .spawn(move || {
                if let Err(panic) = std::panic::catch_unwind(|| (self.play)(self)) {
                    self.fail_the_rest(&format!("the scenario did not run: {}", message(&*panic)));
                }
                self.set_finished();
            });
        if let Err(error) = spawned {
            self.fail_the_rest(&format!("the scenario's thread did not start: {error}"));
            self.set_finished();
        }
        true
    }

    /// The test of `step`: starts the scenario unless a test of it already did, or, when it has
    /// to wait, the next scenario of the binary (see the module); waits for `step` (the last
    /// step's test: and for the fixture's teardown), and for the teardown of the scenario it
    /// started; fails if `step` did.
    pub fn outcome(&'static self, step: &'static str) {
        assert!(
            self.steps.contains(&step),
            "{step} is not a step of the scenario"
        );
        let last = self.steps.last() == Some(&step);
        let done = |state: &State| {
            let outcome = state.outcomes.get(step)?;
            (!last || state.finished).then(|| (outcome.clone(), state.finish_failure.clone()))
        };
        let mut started = self.start().then_some(self);
        let must_wait = done(&self.lock()).is_none();
        if started.is_none() && must_wait {
            started = start_next();
        }
        let (outcome, finish_failure) = self.wait_until(done);
        if let Some(scenario) = started {
            scenario.wait_until(|state| state.finished.then_some(()));
        }
        if let Err(failure) = outcome {
            panic!("{step}: {failure}");
        }
        if let Some(failure) = finish_failure {
            panic!("{step} passed, but {failure}");
        }
    }
}

/// Starts the first scenario in name order (of its first test) that the harness's arguments
/// select and that has not started; the one it started.
fn start_next() -> Option<&'static Scenario> {
    let selection = Selection::of_this_run()?;
    let mut waiting: Vec<(String, &'static Scenario)> = SCENARIOS
        .iter()
        .filter(|scenario| !scenario.started.load(Ordering::SeqCst))
        .filter_map(|scenario| {
            let first = scenario
                .steps
                .iter()
                .map(|step| scenario.test_name(step))
                .filter(|name| selection.selects(name))
                .min()?;
            Some((first, *scenario))
        })
        .collect();
    waiting.sort_by(|a, b| a.0.cmp(&b.0));
    waiting
        .into_iter()
        .map(|(_, scenario)| scenario)
        .find(|scenario| scenario.start())
}

/// Which tests the harness runs, as its arguments say: names containing one of `filters` (any
/// name when there is none) and none of `skip`; equal to them with `--exact`.
#[derive(Debug, Default, PartialEq)]
struct Selection {
    filters: Vec<String>,
    skip: Vec<String>,
    exact: bool,
}

impl Selection {
    /// This run's, read once; `None` when its arguments say something this does not read.
    fn of_this_run() -> Option<&'static Selection> {
        static SELECTION: OnceLock<Option<Selection>> = OnceLock::new();
        SELECTION
            .get_or_init(|| {
                let args: Option<Vec<String>> = std::env::args_os()
                    .skip(1)
                    .map(|arg| arg.into_string().ok())
                    .collect();
                Self::parse(args?)
            })
            .as_ref()
    }

    /// The selection of the harness's arguments; `None` for one it does not know, or one after
    /// which no test of a scenario runs (`--ignored`, `--list`, `--bench`...).
    fn parse(args: impl IntoIterator<Item = String>) -> Option<Selection> {
        let mut selection = Selection::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, value) = match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => (flag, Some(value.to_owned())),
                _ => (arg.as_str(), None),
            };
            match flag {
                "--skip" => selection.skip.push(value.or_else(|| args.next())?),
                "--test-threads" | "--color" | "--format" | "--logfile" | "--shuffle-seed"
                | "-Z" => {
                    if value.is_none() {
                        args.next()?;
                    }
                }
                "--exact" => selection.exact = true,
                "--nocapture"
                | "--no-capture"
                | "--show-output"
                | "-q"
                | "--quiet"
                | "--include-ignored"
                | "--report-time"
                | "--ensure-time"
                | "--shuffle"
                | "--test"
                | "--force-run-in-process" => {}
                _ if arg.starts_with('-') => return None,
                _ => selection.filters.push(arg),
            }
        }
        Some(selection)
    }

    fn selects(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skip.iter().any(matches)
    }
}

fn message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_else(|| "panicked".to_owned())
}

/// Starts the fixture, runs the scenario's steps in order on it (`step` runs one by name; a
/// step after a failed one is not run), reporting each outcome as it is known, then finishes
/// the fixture. On a runtime of its own, which is dropped before this returns. Called by the
/// code [`scenario!`](crate::scenario) generates.
pub fn play<F, S, Fin>(
    scenario: &'static Scenario,
    start: impl FnOnce() -> S,
    step: for<'a> fn(&'a mut F, &'static str) -> StepFuture<'a>,
    finish: impl FnOnce(F) -> Fin,
) where
    S: Future<Output = F>,
    Fin: Future<Output = ()>,
{
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the scenario");
    runtime.block_on(async {
        let fixture = AssertUnwindSafe(start()).catch_unwind().await;
        let mut fixture = match fixture {
            Ok(fixture) => fixture,
            Err(panic) => {
                scenario.fail_the_rest(&format!("the fixture did not start: {}", message(&*panic)));
                return;
            }
        };
        for name in scenario.steps {
            let started = Instant::now();
            match AssertUnwindSafe(step(&mut fixture, name))
                .catch_unwind()
                .await
            {
                Ok(()) => {
                    eprintln!("{name}: passed in {:?}", started.elapsed());
                    scenario.report(name, Ok(()));
                }
                Err(panic) => {
                    scenario.report(name, Err(message(&*panic)));
                    scenario.fail_the_rest(&format!("not run: the step {name} failed before it"));
                    break;
                }
            }
        }
        if let Err(panic) = AssertUnwindSafe(finish(fixture)).catch_unwind().await {
            scenario.lock().finish_failure =
                Some(format!("the fixture did not finish: {}", message(&*panic)));
        }
    });
    drop(runtime);
}

/// Declares a scenario: `scenario!(mod NAME: FIXTURE { step_a, step_b, ... })` makes the module
/// `NAME` (the scenario's state) and one `#[test]` per step, named as the step, which runs the
/// scenario once for all of them and reports that step (see [`harness::scenario`]).
///
/// `FIXTURE` has `async fn start() -> Self`, `async fn finish(self)` and one
/// `async fn step(&mut self)` per step; the steps run in the order given. Several scenarios may
/// share a test binary (and a file), each with its own module name and step names; they run side
/// by side, as many at a time as the harness has test threads.
///
/// [`harness::scenario`]: crate::harness::scenario
#[macro_export]
macro_rules! scenario {
    ($vis:vis mod $name:ident : $fixture:ty { $($step:ident),+ $(,)? }) => {
        /// The state of the scenario of these steps, and how one step is run by name.
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            pub(super) static SCENARIO: $crate::harness::scenario::Scenario =
                $crate::harness::scenario::Scenario::new(
                    ::std::module_path!(),
                    &[$(::std::stringify!($step)),+],
                    play,
                );

            // Registers the scenario in the binary's list (a linker section, see `SCENARIOS`).
            #[allow(unsafe_code)]
            #[$crate::harness::scenario::__linkme::distributed_slice(
                $crate::harness::scenario::SCENARIOS
            )]
            #[linkme(crate = $crate::harness::scenario::__linkme)]
            static REGISTERED: &$crate::harness::scenario::Scenario = &SCENARIO;

            fn step<'a>(
                fixture: &'a mut $fixture,
                name: &'static str,
            ) -> $crate::harness::scenario::StepFuture<'a> {
                $(
                    if name == ::std::stringify!($step) {
                        return ::std::boxed::Box::pin(fixture.$step());
                    }
                )+
                panic!("no step {name}")
            }

            fn play(scenario: &'static $crate::harness::scenario::Scenario) {
                $crate::harness::scenario::play(
                    scenario,
                    <$fixture>::start,
                    step,
                    <$fixture>::finish,
                )
            }
        }

        $(
            #[test]
            fn $step() {
                $name::SCENARIO.outcome(::std::stringify!($step));
            }
        )+
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Option<Selection> {
        Selection::parse(args.iter().map(|arg| (*arg).to_owned()))
    }

    #[test]
    fn the_harness_s_arguments_select_tests_as_the_harness_does() {
        let all =
            parse(&["--nocapture", "--test-threads", "2", "--color=never"]).expect("a selection");
        assert!(all.selects("it_scales_up") && all.selects("m::it_scales_up"));

        let some = parse(&["scales", "--skip", "down", "--format=pretty"]).expect("a selection");
        assert!(some.selects("it_scales_up"));
        assert!(!some.selects("it_scales_down"), "skipped");
        assert!(!some.selects("it_rolls"), "not matched by the filter");

        let exact = parse(&["--exact", "it_scales_up", "--skip=it_rolls"]).expect("a selection");
        assert!(exact.selects("it_scales_up"));
        assert!(!exact.selects("it_scales_up_again"));
        assert!(!exact.selects("m::it_scales_up"));
    }

    #[test]
    fn arguments_it_does_not_read_select_no_scenario_to_start() {
        for args in [
            &["--ignored"][..],
            &["--list"],
            &["--bench"],
            &["-Zunstable-options"],
            &["--skip"],
            &["--test-threads"],
            &["--no-such-flag"],
        ] {
            assert_eq!(parse(args), None, "{args:?}");
        }
    }

    #[test]
    fn a_step_s_test_is_named_by_its_path_beside_the_scenario_s_module() {
        fn play(_: &'static Scenario) {}
        let at_the_root = Scenario::new("gardener::life", &["it_runs"], play);
        assert_eq!(at_the_root.test_name("it_runs"), "it_runs");
        let nested = Scenario::new("gardener::faults::life", &["it_runs"], play);
        assert_eq!(nested.test_name("it_runs"), "faults::it_runs");
    }
}
