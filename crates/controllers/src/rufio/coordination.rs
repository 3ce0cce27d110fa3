//! What the Machine, Job and Task controllers of one process tell each other in memory.
//!
//! Each controller reconciles its own objects; these are the few facts one of them learns
//! that another needs before the API server could tell it:
//!
//! - **Machine refreshes** (Job → Machine): a Job of the Machine ended, so its power state is
//!   read again at its next reconcile instead of at its interval.
//! - **Machine polls** (Machine): when each Machine was last read from its BMC, and at which
//!   generation, so that reconciles Kubernetes triggers for other reasons do not call the BMC.
//! - **Task retries** (Task): the backoff of a Task whose BMC is busy or unreachable (a
//!   [`Backoff`], 1 s doubling to 30 s with jitter), forgotten when the Task ends or goes.
//! - **Sends ahead** (Job's watch → Job's reconcile): a repeatable first action sent to the BMC
//!   as soon as a new Job was seen, and whether the BMC accepted it.
//! - **Own writes** (Job): a Task created or a `Running` written by this process that the
//!   caches do not show yet, so that the Job neither creates the Task again nor moves its
//!   `startTime`.
//! - **Own sends** (Task): the Tasks whose action this process sent, so that a reconcile on a
//!   cached copy that does not show the `sent` mark yet (woken by the Task's own `startTime`
//!   write) reads the Task again instead of sending the action a second time.
//!
//! Every table is bounded by [`MAX_ENTRIES`]: a table of hints that would grow past it starts
//! again from empty (a Machine read a little early, a refresh at the next interval); a table
//! of promises (sends ahead, own writes) takes no more until the stale sweep
//! ([`Coordination::forget_stale`]) empties it, and the Job then goes the slow, safe way
//! (its Task sends the action; it waits for its cache).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::runtime::Backoff;

/// The most entries any table holds.
pub const MAX_ENTRIES: usize = 100_000;

/// The outcome of an action sent ahead of its Task: `None` while sending, then whether the
/// BMC accepted it.
pub type SendAhead = watch::Receiver<Option<Ahead>>;

/// What became of an action sent ahead of its Task.
#[derive(Clone, Debug, PartialEq)]
pub enum Ahead {
    /// The BMC accepted it: the Task is created `sent` and only verifies.
    Sent,
    /// Not sent, or refused: the Task sends it itself.
    NotSent,
    /// The BMC carried it out with an effect that sending it again would hide (a boot mode
    /// it switched): the Task is created `sent` and fails with this message.
    Failed(String),
}

/// The in-memory coordination of the Rufio controllers (see the module documentation).
pub struct Coordination {
    refresh: Mutex<HashSet<String>>,
    polled: Mutex<HashMap<String, (Instant, Option<i64>)>>,
    task_retries: Backoff,
    sent_ahead: Mutex<HashMap<String, (Instant, SendAhead)>>,
    own_writes: Mutex<HashMap<String, (Instant, String)>>,
    own_sends: Mutex<HashMap<String, Instant>>,
}

impl Default for Coordination {
    fn default() -> Self {
        Self {
            refresh: Mutex::default(),
            polled: Mutex::default(),
            task_retries: Backoff::new(Duration::from_secs(1), Duration::from_secs(30)),
            sent_ahead: Mutex::default(),
            own_writes: Mutex::default(),
            own_sends: Mutex::default(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Coordination {
    /// Asks for the Machine (`namespace/name`) to be read at its next reconcile.
    pub fn request_refresh(&self, machine: String) {
        let mut refresh = lock(&self.refresh);
        if refresh.len() >= MAX_ENTRIES {
            refresh.clear();
        }
        refresh.insert(machine);
    }

    /// Whether a refresh of the Machine was asked for (and takes the request).
    pub fn take_refresh(&self, machine: &str) -> bool {
        lock(&self.refresh).remove(machine)
    }

    /// When the Machine was last read from its BMC, and at which generation.
    pub fn last_poll(&self, machine: &str) -> Option<(Instant, Option<i64>)> {
        lock(&self.polled).get(machine).copied()
    }

    /// Records a read of the Machine's BMC now, at this generation.
    pub fn record_poll(&self, machine: String, generation: Option<i64>) {
        let mut polled = lock(&self.polled);
        if polled.len() >= MAX_ENTRIES && !polled.contains_key(&machine) {
            polled.clear();
        }
        polled.insert(machine, (Instant::now(), generation));
    }

    /// Forgets a deleted Machine's last read.
    pub fn forget_poll(&self, machine: &str) {
        lock(&self.polled).remove(machine);
    }

    /// One more transient failure of the Task's BMC: the delay before its next try.
    pub fn task_retry(&self, task: &str) -> Duration {
        self.task_retries.failed(task)
    }

    /// The Task ended: its retries and its send are forgotten.
    pub fn task_settled(&self, task: &str) {
        self.task_retries.succeeded(task);
        self.forget_send(task);
    }

    /// Forgets the retries of Tasks for which `going_on` is false (ended or gone: they are
    /// never reconciled again to reset them).
    pub fn forget_task_retries(&self, going_on: impl Fn(&str) -> bool) {
        self.task_retries.retain(going_on);
    }

    /// How many Tasks have retries remembered.
    pub fn task_retries_tracked(&self) -> usize {
        self.task_retries.tracked()
    }

    /// Registers a send ahead of Task `task`; `None` when one is already registered (or the
    /// table is full: the Task then sends the action itself).
    pub fn begin_send_ahead(&self, task: String) -> Option<watch::Sender<Option<Ahead>>> {
        let mut sent = lock(&self.sent_ahead);
        if sent.contains_key(&task) || sent.len() >= MAX_ENTRIES {
            return None;
        }
        let (tx, rx) = watch::channel(None);
        sent.insert(task, (Instant::now(), rx));
        Some(tx)
    }

    /// Whether the BMC accepted the action sent ahead of Task `task`, waiting for a send still
    /// under way; `None` when none was sent ahead (or the sender gave up).
    pub async fn take_send_ahead(&self, task: &str) -> Option<Ahead> {
        let (_, mut rx) = lock(&self.sent_ahead).remove(task)?;
        rx.wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|v| v.clone())
    }

    /// Records a write of this process for the Job with this UID (`what`: `Kind ns/name`).
    /// Not recorded when the table is full: the Job then waits for its cache as it would
    /// after a restart.
    pub fn wrote(&self, what: String, job_uid: &str) {
        let mut writes = lock(&self.own_writes);
        if writes.len() >= MAX_ENTRIES && !writes.contains_key(&what) {
            return;
        }
        writes.insert(what, (Instant::now(), job_uid.to_owned()));
    }

    /// How long ago this process made that write for the Job with this UID, if it did and
    /// its cache has not shown it since.
    pub fn wrote_ago(&self, what: &str, job_uid: &str) -> Option<Duration> {
        lock(&self.own_writes)
            .get(what)
            .filter(|(_, uid)| uid == job_uid)
            .map(|(at, _)| at.elapsed())
    }

    /// The cache shows that write: nothing more to remember of it.
    pub fn seen(&self, what: &str) {
        lock(&self.own_writes).remove(what);
    }

    /// Forgets sends ahead no reconcile took (their Job went before it was reconciled), and
    /// own writes made that long ago.
    pub fn forget_stale(&self, older_than: Duration) {
        lock(&self.sent_ahead).retain(|_, (at, _)| at.elapsed() < older_than);
        lock(&self.own_writes).retain(|_, (at, _)| at.elapsed() < older_than);
        lock(&self.own_sends).retain(|_, at| at.elapsed() < older_than);
    }

    /// This process sends the action of Task `task` (not recorded when the table is full: a
    /// stale copy may then send it again, which a repeatable action allows).
    pub fn sending(&self, task: &str) {
        let mut sends = lock(&self.own_sends);
        if sends.len() < MAX_ENTRIES || sends.contains_key(task) {
            sends.insert(task.to_owned(), Instant::now());
        }
    }

    /// Whether this process sent the action of Task `task` (and the Task has not ended since).
    pub fn sent_here(&self, task: &str) -> bool {
        lock(&self.own_sends).contains_key(task)
    }

    /// The Task's action did not go out, or the Task ended: nothing more to remember of it.
    pub fn forget_send(&self, task: &str) {
        lock(&self.own_sends).remove(task);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_send_is_remembered_until_forgotten_or_stale() {
        let c = Coordination::default();
        assert!(!c.sent_here("ns/t"));
        c.sending("ns/t");
        assert!(c.sent_here("ns/t"));
        c.forget_send("ns/t");
        assert!(!c.sent_here("ns/t"));
        c.sending("ns/t");
        c.forget_stale(Duration::ZERO);
        assert!(!c.sent_here("ns/t"));
    }

    #[test]
    fn a_refresh_is_taken_once() {
        let c = Coordination::default();
        assert!(!c.take_refresh("ns/m"));
        c.request_refresh("ns/m".into());
        c.request_refresh("ns/m".into());
        assert!(c.take_refresh("ns/m"));
        assert!(!c.take_refresh("ns/m"));
    }

    #[test]
    fn polls_are_remembered_until_forgotten() {
        let c = Coordination::default();
        assert!(c.last_poll("ns/m").is_none());
        c.record_poll("ns/m".into(), Some(3));
        let (at, generation) = c.last_poll("ns/m").unwrap();
        assert_eq!(generation, Some(3));
        assert!(at.elapsed() < Duration::from_secs(60));
        c.forget_poll("ns/m");
        assert!(c.last_poll("ns/m").is_none());
    }

    #[test]
    fn a_hint_table_starts_again_rather_than_grow() {
        let c = Coordination::default();
        for i in 0..MAX_ENTRIES {
            c.request_refresh(format!("ns/m{i}"));
            c.record_poll(format!("ns/m{i}"), None);
        }
        c.request_refresh("ns/last".into());
        c.record_poll("ns/last".into(), None);
        assert_eq!(lock(&c.refresh).len(), 1);
        assert_eq!(lock(&c.polled).len(), 1);
        assert!(c.take_refresh("ns/last") && c.last_poll("ns/last").is_some());
    }

    #[test]
    fn a_promise_table_takes_no_more_when_full() {
        let c = Coordination::default();
        for i in 0..MAX_ENTRIES {
            c.wrote(format!("Task ns/t{i}"), "u");
            lock(&c.sent_ahead)
                .insert(format!("ns/t{i}"), (Instant::now(), watch::channel(None).1));
        }
        c.wrote("Task ns/new".into(), "u");
        assert!(c.wrote_ago("Task ns/new", "u").is_none());
        assert!(c.begin_send_ahead("ns/new".into()).is_none());
        // What is there is kept, and an old promise is forgotten by the stale sweep.
        assert!(c.wrote_ago("Task ns/t0", "u").is_some());
        c.forget_stale(Duration::ZERO);
        assert!(c.wrote_ago("Task ns/t0", "u").is_none());
        assert!(c.begin_send_ahead("ns/new".into()).is_some());
    }

    #[tokio::test]
    async fn a_send_ahead_is_registered_once_and_taken_with_its_outcome() {
        let c = Coordination::default();
        let tx = c.begin_send_ahead("ns/j-task-0".into()).unwrap();
        assert!(c.begin_send_ahead("ns/j-task-0".into()).is_none());
        let sender = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(Some(Ahead::Sent)).unwrap();
        });
        assert_eq!(c.take_send_ahead("ns/j-task-0").await, Some(Ahead::Sent));
        sender.await.unwrap();
        assert_eq!(c.take_send_ahead("ns/j-task-0").await, None);
        // A sender that gave up answers nothing.
        drop(c.begin_send_ahead("ns/j-task-1".into()).unwrap());
        assert_eq!(c.take_send_ahead("ns/j-task-1").await, None);
    }

    #[test]
    fn own_writes_belong_to_one_job_and_end_when_seen() {
        let c = Coordination::default();
        c.wrote("Job ns/j".into(), "u1");
        assert!(c.wrote_ago("Job ns/j", "u1").is_some());
        // A Job of the same name made again (another UID) did not make that write.
        assert!(c.wrote_ago("Job ns/j", "u2").is_none());
        c.seen("Job ns/j");
        assert!(c.wrote_ago("Job ns/j", "u1").is_none());
        c.wrote("Job ns/j".into(), "u1");
        c.forget_stale(Duration::from_secs(60));
        assert!(c.wrote_ago("Job ns/j", "u1").is_some());
    }

    #[test]
    fn task_retries_grow_until_settled_or_forgotten() {
        let c = Coordination::default();
        c.task_retry("ns/a");
        assert!(c.task_retry("ns/a") >= Duration::from_secs(1));
        c.task_settled("ns/a");
        assert!(c.task_retry("ns/a") <= Duration::from_secs(1));
        c.task_retry("ns/b");
        c.forget_task_retries(|key| key == "ns/a");
        assert_eq!(c.task_retries_tracked(), 1);
    }
}
