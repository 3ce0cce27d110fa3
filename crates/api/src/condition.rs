//! Conditions in the shape of `metav1.Condition`, which ingot adds beside the upstream status
//! fields of the resources it owns.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The value of a condition's `status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

/// Sets a condition in `conditions`, keeping `lastTransitionTime` when the status does not change.
/// Returns whether anything changed, so that callers write status only on change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
) -> bool {
    let now = Time(Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(existing) => {
            let changed_status = existing.status != status.as_str();
            let changed = changed_status
                || existing.reason != reason
                || existing.message != message
                || existing.observed_generation != observed_generation;
            if changed_status {
                existing.last_transition_time = now;
                existing.status = status.as_str().to_owned();
            }
            existing.reason = reason.to_owned();
            existing.message = message.to_owned();
            existing.observed_generation = observed_generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.to_owned(),
                status: status.as_str().to_owned(),
                reason: reason.to_owned(),
                message: message.to_owned(),
                last_transition_time: now,
                observed_generation,
            });
            true
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_condition_reports_changes_and_keeps_transition_time() {
        let mut conditions = Vec::new();
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Provisioning",
            "waiting",
            Some(1)
        ));
        let first = conditions[0].last_transition_time.clone();
        assert!(!set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Provisioning",
            "waiting",
            Some(1)
        ));
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::False,
            "Provisioning",
            "still waiting",
            Some(1)
        ));
        assert_eq!(
            conditions[0].last_transition_time, first,
            "same status keeps the transition time"
        );
        assert!(set_condition(
            &mut conditions,
            "Ready",
            ConditionStatus::True,
            "Managed",
            "",
            Some(2)
        ));
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].status, "True");
        assert_eq!(conditions[0].reason, "Managed");
    }
}
