//! Wake-ups of a controller's reconcile from outside its watches (a pushed event): a bounded
//! queue of object references, taken once by the controller as its `reconcile_on` stream. A
//! wake-up that finds the queue full is dropped: the object's own requeue still comes.

use std::sync::Mutex;

use futures::Stream;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

/// Wake-ups queued at most.
const QUEUE: usize = 1024;

pub struct Wakes<K: Resource<DynamicType = ()>> {
    tx: mpsc::Sender<ObjectRef<K>>,
    rx: Mutex<Option<mpsc::Receiver<ObjectRef<K>>>>,
}

impl<K: Resource<DynamicType = ()>> Default for Wakes<K> {
    fn default() -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        Wakes {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }
}

impl<K: Resource<DynamicType = ()> + 'static> Wakes<K> {
    /// Asks for a reconcile of `object`.
    pub fn wake(&self, object: ObjectRef<K>) {
        let _ = self.tx.try_send(object);
    }

    /// The wake-ups, for the controller (the first caller takes them; later ones get none).
    pub fn stream(&self) -> impl Stream<Item = ObjectRef<K>> + Send + use<K> {
        let rx = self
            .rx
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let next = rx.recv().await?;
            Some((next, Some(rx)))
        })
    }
}
