//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leaderelection does it:
//! the holder renews `renewTime` every `retry_period`; the others watch the record and take it
//! over once it has not changed for `lease_duration` by their own clock (so clock skew between
//! replicas does not matter). Writes carry the resourceVersion, so two replicas never both win.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tracing::{debug, info, warn};

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a record may go unrenewed before another replica takes it.
    pub lease_duration: Duration,
    /// How often the holder renews and the others look.
    pub retry_period: Duration,
    /// The holder gives up (and the process exits) if it could not renew for this long.
    pub renew_deadline: Duration,
}

pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The record last seen and when this replica saw it change.
    observed: Option<(ObservedRecord, Instant)>,
    /// When this replica sent its last successful renewal: the lease runs from then, however
    /// late the answer came.
    last_renewed: Option<Instant>,
}

#[derive(Clone, Debug, PartialEq)]
struct ObservedRecord {
    holder: String,
    renew_time: Option<Timestamp>,
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseLost {
    #[error("another replica ({holder}) took the lease {namespace}/{name}")]
    TakenOver {
        namespace: String,
        name: String,
        holder: String,
    },
    #[error("could not renew the lease {namespace}/{name} for {seconds} s")]
    RenewDeadline {
        namespace: String,
        name: String,
        seconds: u64,
    },
}

impl LeaderElector {
    pub fn new(client: Client, config: LeaseConfig) -> Self {
        let api = Api::namespaced(client, &config.namespace);
        Self {
            api,
            config,
            observed: None,
            last_renewed: None,
        }
    }

    /// Returns once this replica holds the lease.
    pub async fn acquire(&mut self) {
        info!(lease = %self.lease_ref(), identity = %self.config.identity, "waiting to lead");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.lease_ref(), identity = %self.config.identity, "leading");
                    return;
                }
                Ok(false) => {}
                Err(error) => debug!(%error, "lease attempt failed"),
            }
            tokio::time::sleep(self.config.retry_period).await;
        }
    }

    /// Renews the lease until it is lost; never returns while leading.
    pub async fn hold(&mut self) -> LeaseLost {
        loop {
            tokio::time::sleep(self.config.retry_period).await;
            // A renewal that hangs must not outlive the deadline: bound it, so that this
            // replica stops (and its reconciles are cancelled) before another may lead.
            let budget = self
                .config
                .renew_deadline
                .saturating_sub(self.last_renewed.map(|t| t.elapsed()).unwrap_or_default())
                .max(Duration::from_millis(100));
            let Ok(attempt) = tokio::time::timeout(budget, self.try_acquire_or_renew()).await
            else {
                warn!("renewing the lease timed out");
                if let Some(lost) = self.past_deadline() {
                    return lost;
                }
                continue;
            };
            match attempt {
                Ok(true) => {}
                Ok(false) => {
                    let holder = self
                        .observed
                        .as_ref()
                        .map(|(r, _)| r.holder.clone())
                        .unwrap_or_default();
                    return LeaseLost::TakenOver {
                        namespace: self.config.namespace.clone(),
                        name: self.config.name.clone(),
                        holder,
                    };
                }
                Err(error) => warn!(%error, "renewing the lease failed"),
            }
            if let Some(lost) = self.past_deadline() {
                return lost;
            }
        }
    }

    fn past_deadline(&self) -> Option<LeaseLost> {
        let since = self.last_renewed.map(|t| t.elapsed()).unwrap_or_default();
        (since > self.config.renew_deadline).then(|| LeaseLost::RenewDeadline {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            seconds: self.config.renew_deadline.as_secs(),
        })
    }

    /// Gives the lease up so that another replica can take it at once (on a clean shutdown).
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.config.name).await else {
            return;
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.lease_ref(), "released the lease"),
            Err(error) => {
                warn!(%error, "could not release the lease; another replica takes it once it expires")
            }
        }
    }

    fn lease_ref(&self) -> String {
        format!("{}/{}", self.config.namespace, self.config.name)
    }

    /// One round: create, renew or take over the lease. Returns whether this replica holds it.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        // The renewal counts from before it is sent: the API server may have stored it (and
        // the others started counting) long before a slow answer comes back.
        let sent = Instant::now();
        let now = Timestamp::now();
        let duration_seconds =
            i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.config.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.config.identity.clone()),
                    lease_duration_seconds: Some(duration_seconds),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.last_renewed = Some(sent);
                    Ok(true)
                }
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
                Err(error) => Err(error),
            };
        };

        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let record = ObservedRecord {
            holder: spec.holder_identity.clone().unwrap_or_default(),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
        };
        let record_duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs)
            .unwrap_or(self.config.lease_duration);
        match &self.observed {
            Some((seen, _)) if *seen == record => {}
            _ => self.observed = Some((record.clone(), Instant::now())),
        }
        let held_by_me = record.holder == self.config.identity;
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|(_, seen_at)| seen_at.elapsed() > record_duration);
        if !held_by_me && !record.holder.is_empty() && !expired {
            return Ok(false);
        }

        if !held_by_me {
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            spec.holder_identity = Some(self.config.identity.clone());
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(duration_seconds);
        // replace() sends the resourceVersion we read: a concurrent writer makes this fail with
        // 409 instead of two replicas both believing they lead.
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                self.last_renewed = Some(sent);
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used, clippy::unwrap_used)]

    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll};

    use futures::future::BoxFuture;

    use super::*;

    /// What the API server's answers go through: unchanged, then one Lease update answered
    /// late (recorded when it was sent), then no answer at all.
    #[derive(Debug)]
    enum Plan {
        Pass,
        SlowNextUpdate(Duration),
        Hang,
    }

    #[derive(Clone)]
    struct Slowed<S> {
        inner: S,
        plan: Arc<Mutex<Plan>>,
        slow_update_sent: Arc<Mutex<Option<Instant>>>,
    }

    impl<S, B> tower::Service<http::Request<B>> for Slowed<S>
    where
        S: tower::Service<http::Request<B>>,
        S::Future: Send + 'static,
        S::Response: Send + 'static,
        S::Error: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            self.inner.poll_ready(cx)
        }

        fn call(&mut self, request: http::Request<B>) -> Self::Future {
            let lease_update =
                request.method() == http::Method::PUT && request.uri().path().contains("/leases/");
            let mut plan = self.plan.lock().unwrap();
            match *plan {
                Plan::Hang => Box::pin(futures::future::pending()),
                Plan::SlowNextUpdate(delay) if lease_update => {
                    *plan = Plan::Hang;
                    *self.slow_update_sent.lock().unwrap() = Some(Instant::now());
                    let answer = self.inner.call(request);
                    Box::pin(async move {
                        let answer = answer.await;
                        tokio::time::sleep(delay).await;
                        answer
                    })
                }
                _ => Box::pin(self.inner.call(request)),
            }
        }
    }

    /// A renewal the API server stores at once but answers late must count from when it was
    /// sent: the other replicas count the lease from when they saw it change, so a replica
    /// counting from the late answer would lead for as long as the answer was late after
    /// another took over.
    #[tokio::test]
    async fn a_late_answer_to_a_renewal_does_not_extend_the_lease() {
        let env = ingot_testenv::shared().await;
        let namespace = env.namespace("leader-slow").await.unwrap();
        let plan = Arc::new(Mutex::new(Plan::Pass));
        let slow_update_sent = Arc::new(Mutex::new(None));
        let layer = {
            let plan = plan.clone();
            let slow_update_sent = slow_update_sent.clone();
            tower::layer::layer_fn(move |inner| Slowed {
                inner,
                plan: plan.clone(),
                slow_update_sent: slow_update_sent.clone(),
            })
        };
        let client = kube::client::ClientBuilder::try_from(env.config())
            .unwrap()
            .with_layer(&layer)
            .build();
        let mut elector = LeaderElector::new(
            client,
            LeaseConfig {
                namespace,
                name: "slow-renewal".to_owned(),
                identity: "replica-a".to_owned(),
                lease_duration: Duration::from_secs(4),
                retry_period: Duration::from_millis(500),
                renew_deadline: Duration::from_secs(3),
            },
        );
        tokio::time::timeout(Duration::from_secs(30), elector.acquire())
            .await
            .expect("the lease within 30 s");

        // One renewal answered 1.5 s late (within the deadline, so it succeeds), then the API
        // server is unreachable.
        let acquired = elector.last_renewed.expect("acquired");
        *plan.lock().unwrap() = Plan::SlowNextUpdate(Duration::from_millis(1500));
        let lost = tokio::time::timeout(Duration::from_secs(30), elector.hold())
            .await
            .expect("the lease lost within 30 s");
        assert!(
            matches!(lost, LeaseLost::RenewDeadline { .. }),
            "lost as {lost:?}"
        );
        let sent = slow_update_sent
            .lock()
            .unwrap()
            .expect("the slow renewal went through");
        let renewed = elector.last_renewed.expect("renewed once at least");
        assert!(renewed > acquired, "the slow renewal did not succeed");
        assert!(
            renewed <= sent,
            "the lease was counted from {:?} after the slow renewal was sent (its answer), \
             not from before it was sent",
            renewed - sent
        );
    }
}
