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
//! The first of a scenario's tests to run starts the whole scenario on a thread and a runtime of
//! its own (the fixture's clients and processes live as long as that runtime). Each test waits
//! for its own step, then reports it: the step's panic, "not run" after an earlier step failed,
//! or the fixture's failure to start. The test that started the scenario also waits for the
//! fixture to be torn down (and reports a failure to finish), so that no process outlives the
//! test binary: the scenario holds one of the harness's test threads for its whole run, as one
//! long test would, and the other tests of it hold theirs only until their step is done.
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
use std::sync::{Condvar, Mutex, Once};
use std::time::Instant;

use futures::FutureExt;

/// The future of one step, borrowing the fixture (what the generated dispatcher returns).
pub type StepFuture<'a> = Pin<Box<dyn Future<Output = ()> + 'a>>;

/// The state of one scenario: its steps, the steps' outcomes so far, whether the fixture is torn
/// down. Declared by [`scenario!`](crate::scenario) as a static.
pub struct Scenario {
    steps: &'static [&'static str],
    start: Once,
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
    /// A scenario of `steps`, in the order they run.
    pub const fn new(steps: &'static [&'static str]) -> Self {
        Self {
            steps,
            start: Once::new(),
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

    /// The test of `step`: runs the scenario (`play`, on a thread of its own) unless a test of
    /// it already did, waits for `step` (and for the fixture's teardown, see the module), and
    /// fails if `step` did.
    pub fn outcome(&'static self, step: &'static str, play: fn(&'static Scenario)) {
        assert!(
            self.steps.contains(&step),
            "{step} is not a step of the scenario"
        );
        let mut first = false;
        self.start.call_once(|| {
            first = true;
            std::thread::spawn(move || {
                if let Err(panic) = std::panic::catch_unwind(|| play(self)) {
                    self.fail_the_rest(&format!("the scenario did not run: {}", message(&*panic)));
                }
                self.lock().finished = true;
                self.changed.notify_all();
            });
        });
        let mut state = self.lock();
        loop {
            let known = state.outcomes.contains_key(step);
            if known && (!first || state.finished) {
                break;
            }
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(Err(failure)) = state.outcomes.get(step) {
            panic!("{step}: {failure}");
        }
        if let Some(failure) = &state.finish_failure {
            panic!("{step} passed, but {failure}");
        }
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
/// share a test binary (and a file), each with its own module name and step names.
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
                $crate::harness::scenario::Scenario::new(&[$(stringify!($step)),+]);

            fn step<'a>(
                fixture: &'a mut $fixture,
                name: &'static str,
            ) -> $crate::harness::scenario::StepFuture<'a> {
                $(
                    if name == stringify!($step) {
                        return ::std::boxed::Box::pin(fixture.$step());
                    }
                )+
                panic!("no step {name}")
            }

            pub(super) fn play(scenario: &'static $crate::harness::scenario::Scenario) {
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
                $name::SCENARIO.outcome(stringify!($step), $name::play);
            }
        )+
    };
}
