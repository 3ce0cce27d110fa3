//! One Event publisher per controller.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use tracing::warn;

/// Events of one controller, reported as `component` of this replica (`instance`), so that
/// `kubectl get events` tells which replica acted. One recorder per controller lets kube
/// aggregate repeats of the same Event into a count instead of new objects.
#[derive(Clone)]
pub struct EventRecorder {
    recorder: Recorder,
}

impl EventRecorder {
    pub fn new(client: Client, component: &str, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: component.to_owned(),
            instance,
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Records an Event about `object`. A failure to record it is logged, never returned: an
    /// Event is news, and no reconcile should fail or repeat for want of one.
    pub async fn publish<K>(
        &self,
        object: &K,
        type_: EventType,
        reason: &str,
        action: &str,
        note: impl Into<String>,
    ) where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_,
            reason: reason.to_owned(),
            note: Some(note.into()),
            action: action.to_owned(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &object.object_ref(&())).await {
            warn!(%error, reason, "could not record an event");
        }
    }
}
