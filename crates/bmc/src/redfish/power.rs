//! Power actions: `ComputerSystem.Reset` with the ResetType the BMC allows, the state checked
//! first, a lost answer judged by the state, and `PowerCycle` emulated where it is missing.

use super::RedfishClient;
use super::json::{list, string};
use crate::error::BmcError;
use crate::types::*;
use reqwest::Method;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

impl RedfishClient {
    /// Requests a power action (see [`crate::Bmc::power`]).
    pub(super) async fn power_action(&self, action: PowerAction) -> Result<PowerOutcome, BmcError> {
        let (path, system, _) = self.system().await?;
        let state = string(&system, "PowerState")
            .map(|s| PowerState::from_redfish(&s))
            .unwrap_or(PowerState::Unknown);
        match (action, state) {
            (PowerAction::On, PowerState::On)
            | (PowerAction::Off | PowerAction::Soft, PowerState::Off) => {
                return Ok(PowerOutcome::already(action));
            }
            _ => {}
        }
        let target = system
            .pointer("/Actions/#ComputerSystem.Reset/target")
            .and_then(Value::as_str)
            .ok_or_else(|| BmcError::Unsupported("ComputerSystem.Reset".into()))?
            .to_owned();
        let allowed = self.allowed_reset_types(&system).await?;
        let mut sent = Vec::new();
        // Reset and cycle of a powered-off system: power it on (the requested end state).
        if matches!(action, PowerAction::Reset | PowerAction::Cycle) && state == PowerState::Off {
            let t = pick(reset_candidates(PowerAction::On), allowed.as_deref())
                .ok_or_else(|| BmcError::Unsupported("ResetType On".into()))?;
            self.reset_once(&path, &target, t, state).await?;
            sent.push(t.to_owned());
            return Ok(PowerOutcome {
                action,
                sent,
                already_in_state: false,
            });
        }
        match pick(reset_candidates(action), allowed.as_deref()) {
            Some(t) => {
                self.reset_once(&path, &target, t, state).await?;
                sent.push(t.to_owned());
            }
            None if action == PowerAction::Cycle => {
                // No PowerCycle (HPE iLO, sushy-tools): ForceOff, wait for Off, then On.
                let off = pick(&["ForceOff"], allowed.as_deref())
                    .ok_or_else(|| BmcError::Unsupported("ResetType ForceOff".into()))?;
                let on = pick(reset_candidates(PowerAction::On), allowed.as_deref())
                    .ok_or_else(|| BmcError::Unsupported("ResetType On".into()))?;
                self.reset_once(&path, &target, off, state).await?;
                sent.push(off.to_owned());
                // Whatever the wait gives, On is attempted: a cycle must not leave the
                // host off because the BMC was busy answering.
                let waited = self.wait_power(&path, PowerState::Off).await;
                if let Err(e) = &waited {
                    tracing::warn!(bmc = %self.base, error = %e, "Off not seen during a cycle; sending On anyway");
                }
                self.reset_retrying(&target, on).await?;
                sent.push(on.to_owned());
                waited?;
            }
            None => {
                return Err(BmcError::Unsupported(format!(
                    "ResetType {} (allowed: {})",
                    reset_candidates(action).join("/"),
                    allowed.unwrap_or_default().join(", ")
                )));
            }
        }
        Ok(PowerOutcome {
            action,
            sent,
            already_in_state: false,
        })
    }

    /// The ResetType values the system accepts (`None`: the BMC does not say).
    async fn allowed_reset_types(&self, system: &Value) -> Result<Option<Vec<String>>, BmcError> {
        let action = system.pointer("/Actions/#ComputerSystem.Reset");
        if let Some(values) = action.and_then(|a| a.get("ResetType@Redfish.AllowableValues")) {
            return Ok(Some(list(values)));
        }
        if let Some(info) = action.and_then(|a| string(a, "@Redfish.ActionInfo")) {
            let info = self.get(&info).await?;
            if let Some(params) = info.get("Parameters").and_then(Value::as_array) {
                for p in params {
                    if string(p, "Name").as_deref() == Some("ResetType") {
                        return Ok(p.get("AllowableValues").map(list));
                    }
                }
            }
        }
        Ok(None)
    }

    /// `On` after a `ForceOff`: a 503 (busy BMC) is retried until the transition deadline;
    /// a timeout is not (the BMC may have taken it), the caller verifies the state.
    async fn reset_retrying(&self, target: &str, reset_type: &str) -> Result<(), BmcError> {
        let deadline = Instant::now() + self.options.transition_timeout;
        loop {
            match self.reset(target, reset_type).await {
                Err(BmcError::Unavailable { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                other => return other,
            }
        }
    }

    /// A reset sent once. When its answer is lost (`may_have_acted`), the power state of the
    /// system at `path` tells whether the BMC carried it out: it did when the state moved
    /// away from `before`, the state read just before sending (a reset or cycle of a running
    /// system reads `PoweringOff`, `Off` or `PoweringOn` for a while). When it has not moved,
    /// nothing tells, and the error stands: the reset is not sent again.
    async fn reset_once(
        &self,
        path: &str,
        target: &str,
        reset_type: &str,
        before: PowerState,
    ) -> Result<(), BmcError> {
        let e = match self.reset(target, reset_type).await {
            Err(e) if e.may_have_acted() => e,
            other => return other,
        };
        let after = match self.get(path).await {
            Ok(v) => string(&v, "PowerState")
                .map(|s| PowerState::from_redfish(&s))
                .unwrap_or(PowerState::Unknown),
            Err(read) => {
                tracing::debug!(bmc = %self.base, error = %read, "power state unreadable after a lost reset");
                PowerState::Unknown
            }
        };
        let acted = after != before && after != PowerState::Unknown;
        tracing::warn!(bmc = %self.base, reset_type, error = %e, ?before, ?after, carried_out = acted, "the answer to a reset was lost; not sent again");
        if acted { Ok(()) } else { Err(e) }
    }

    async fn reset(&self, target: &str, reset_type: &str) -> Result<(), BmcError> {
        self.request(
            Method::POST,
            target,
            Some(&json!({"ResetType": reset_type})),
            &[],
        )
        .await?;
        Ok(())
    }

    /// Polls the power state until `want` or the transition deadline. A BMC busy with the
    /// transition often answers 503 or not at all for a while: such errors are waited out
    /// (until the deadline), not returned.
    async fn wait_power(&self, path: &str, want: PowerState) -> Result<(), BmcError> {
        let deadline = Instant::now() + self.options.transition_timeout;
        loop {
            match self.get(path).await {
                Ok(v) => {
                    let state = string(&v, "PowerState")
                        .map(|s| PowerState::from_redfish(&s))
                        .unwrap_or(PowerState::Unknown);
                    if state == want {
                        return Ok(());
                    }
                }
                Err(e) if e.is_transient() => {
                    tracing::debug!(bmc = %self.base, error = %e, "power state not readable yet");
                }
                Err(e) => return Err(e),
            }
            if Instant::now() >= deadline {
                return Err(BmcError::TransitionTimeout(self.options.transition_timeout));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Preferred ResetType values per action, most specific first.
fn reset_candidates(action: PowerAction) -> &'static [&'static str] {
    match action {
        PowerAction::On => &["On", "ForceOn"],
        PowerAction::Off => &["ForceOff"],
        PowerAction::Soft => &["GracefulShutdown"],
        PowerAction::Reset => &["ForceRestart"],
        PowerAction::Cycle => &["PowerCycle"],
    }
}

fn pick<'a>(candidates: &[&'a str], allowed: Option<&[String]>) -> Option<&'a str> {
    match allowed {
        None => candidates.first().copied(),
        Some(allowed) => candidates
            .iter()
            .copied()
            .find(|c| allowed.iter().any(|a| a == c)),
    }
}
