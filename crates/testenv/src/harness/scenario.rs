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
//! its own (the fixture's clients and processes live as long as that runtime); every test of the
//! scenario waits for it to end (the fixture torn down, so that no process outlives the test
//! binary), then reports its own step: the step's panic, "not run" after an earlier step failed,
//! or the fixture's failure to start.
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

/// Step → its failure (absent: it passed).
pub type Failures = BTreeMap<&'static str, String>;

/// The state of one scenario: its steps, whether it has run, and each step's outcome. Declared
/// by [`scenario!`](crate::scenario) as a static.
pub struct Scenario {
    steps: &'static [&'static str],
    start: Once,
    outcomes: Mutex<Outcomes>,
    done: Condvar,
}

struct Outcomes {
    done: bool,
    failed: Failures,
}

impl Scenario {
    /// A scenario of `steps`, in the order they run.
    pub const fn new(steps: &'static [&'static str]) -> Self {
        Self {
            steps,
            start: Once::new(),
            outcomes: Mutex::new(Outcomes {
                done: false,
                failed: BTreeMap::new(),
            }),
            done: Condvar::new(),
        }
    }

    /// The steps, in the order they run.
    pub fn steps(&self) -> &'static [&'static str] {
        self.steps
    }

    /// Runs the scenario (`play`, on a thread of its own) unless a test of it already did, waits
    /// for it to end, and fails if `step` did.
    pub fn outcome(
        &'static self,
        step: &'static str,
        play: fn(&'static [&'static str]) -> Failures,
    ) {
        assert!(
            self.steps.contains(&step),
            "{step} is not a step of the scenario"
        );
        self.start.call_once(|| {
            std::thread::spawn(move || {
                let failed = play(self.steps);
                let mut outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
                outcomes.failed = failed;
                outcomes.done = true;
                self.done.notify_all();
            });
        });
        let mut outcomes = self.outcomes.lock().unwrap_or_else(|e| e.into_inner());
        while !outcomes.done {
            outcomes = self.done.wait(outcomes).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(failure) = outcomes.failed.get(step) {
            panic!("{step}: {failure}");
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

/// Starts the fixture, runs `steps` in order on it (`step` runs one by name; a step after a
/// failed one is not run), finishes it, and returns the failures. On a runtime of its own, which
/// is dropped before this returns. Called by the code [`scenario!`](crate::scenario) generates.
pub fn play<F, S, Fin>(
    steps: &'static [&'static str],
    start: impl FnOnce() -> S,
    step: for<'a> fn(&'a mut F, &'static str) -> StepFuture<'a>,
    finish: impl FnOnce(F) -> Fin,
) -> Failures
where
    S: Future<Output = F>,
    Fin: Future<Output = ()>,
{
    let mut failed = BTreeMap::new();
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
                let why = format!("the fixture did not start: {}", message(&*panic));
                for name in steps {
                    failed.insert(*name, why.clone());
                }
                return;
            }
        };
        let mut first_failure: Option<&str> = None;
        for name in steps {
            if let Some(first) = first_failure {
                failed.insert(*name, format!("not run: the step {first} failed before it"));
                continue;
            }
            let started = Instant::now();
            match AssertUnwindSafe(step(&mut fixture, name))
                .catch_unwind()
                .await
            {
                Ok(()) => eprintln!("{name}: passed in {:?}", started.elapsed()),
                Err(panic) => {
                    failed.insert(*name, message(&*panic));
                    first_failure = Some(name);
                }
            }
        }
        finish(fixture).await;
    });
    drop(runtime);
    failed
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

            pub(super) fn play(
                steps: &'static [&'static str],
            ) -> $crate::harness::scenario::Failures {
                $crate::harness::scenario::play(
                    steps,
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
