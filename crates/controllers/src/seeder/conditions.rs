//! Seeder's Inventory conditions with wrangler's semantics (`rancher/wrangler` `condition.Cond`
//! as Seeder's `pkg/util/conditions.go` uses it):
//!
//! - a condition is never removed from the list; "removing" it sets `status: "False"`;
//! - a new condition is appended (wrangler creates it `Unknown`, then sets it);
//! - every change of `status` or `message` sets `lastUpdateTime` (RFC 3339, UTC, seconds);
//!   `lastTransitionTime` is never written;
//! - an error is `status: "True"`, `reason: "Error"` and the message: Steve and the Harvester UI
//!   show any condition whose reason is `Error` as the object's error.
//!
//! One difference on purpose: where Seeder rewrites a condition that is already in the wanted
//! state (and so bumps its time on every call), nothing changes here, so a reconcile that finds
//! the world as it left it writes nothing.

use ingot_api::seeder::WranglerCondition;

/// Seeder's condition types (the typo of `bmcJobErrorr` is the wire value).
pub const BMC_OBJECT_CREATED: &str = "bmcObjectCreated";
pub const BMC_JOB_SUBMITTED: &str = "bmcJobSubmitted";
pub const BMC_JOB_COMPLETED: &str = "bmcJobCompleted";
pub const BMC_JOB_ERROR: &str = "bmcJobErrorr";
pub const MACHINE_NOT_CONTACTABLE: &str = "machineNotContactable";
pub const INVENTORY_ALLOCATED_TO_CLUSTER: &str = "inventoryAllocatedToCluster";

/// wrangler's reason for an error condition.
pub const ERROR_REASON: &str = "Error";

/// Seeder's `ConditionExists`: the condition is present with `status: "True"`.
pub fn is_true(conditions: &[WranglerCondition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

pub fn find<'a>(conditions: &'a [WranglerCondition], type_: &str) -> Option<&'a WranglerCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Seeder's `CreateOrUpdateCondition`: `status: "True"`. Seeder drops the message; here it is
/// kept when given (a failed Job's reason), and cleared otherwise.
pub fn set_true(
    conditions: &mut Vec<WranglerCondition>,
    type_: &str,
    message: Option<&str>,
    now: &str,
) {
    let c = find_or_append(conditions, type_);
    set_field(&mut c.status, "True", &mut c.last_update_time, now);
    set_message(c, message.unwrap_or_default(), now);
    c.reason = None;
}

/// Seeder's `RemoveCondition`: `status: "False"` with no message or reason (so that the UI stops
/// showing a past error). Absent conditions stay absent.
pub fn set_false(conditions: &mut [WranglerCondition], type_: &str, now: &str) {
    if let Some(c) = conditions.iter_mut().find(|c| c.type_ == type_) {
        set_field(&mut c.status, "False", &mut c.last_update_time, now);
        set_message(c, "", now);
        c.reason = None;
    }
}

/// Seeder's `SetErrorCondition`: `status: "True"`, `reason: "Error"`, the message.
pub fn set_error(conditions: &mut Vec<WranglerCondition>, type_: &str, message: &str, now: &str) {
    let c = find_or_append(conditions, type_);
    set_field(&mut c.status, "True", &mut c.last_update_time, now);
    set_message(c, message, now);
    c.reason = Some(ERROR_REASON.to_owned());
}

fn find_or_append<'a>(
    conditions: &'a mut Vec<WranglerCondition>,
    type_: &str,
) -> &'a mut WranglerCondition {
    let index = match conditions.iter().position(|c| c.type_ == type_) {
        Some(index) => index,
        None => {
            conditions.push(WranglerCondition {
                type_: type_.to_owned(),
                status: "Unknown".to_owned(),
                ..WranglerCondition::default()
            });
            conditions.len() - 1
        }
    };
    &mut conditions[index]
}

/// wrangler's `setValue`: a changed value touches `lastUpdateTime`.
fn set_field(field: &mut String, value: &str, last_update: &mut Option<String>, now: &str) {
    if field != value {
        value.clone_into(field);
        *last_update = Some(now.to_owned());
    }
}

/// An empty message is stored as absent (Go's `omitempty`).
fn set_message(c: &mut WranglerCondition, message: &str, now: &str) {
    let current = c.message.clone().unwrap_or_default();
    if current != message {
        c.message = (!message.is_empty()).then(|| message.to_owned());
        c.last_update_time = Some(now.to_owned());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn true_is_appended_with_the_time_and_kept_when_set_again() {
        let mut c = Vec::new();
        set_true(&mut c, BMC_JOB_SUBMITTED, None, "t1");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].last_update_time.as_deref(), Some("t1"));
        assert_eq!(c[0].reason, None);
        assert!(is_true(&c, BMC_JOB_SUBMITTED));
        set_true(&mut c, BMC_JOB_SUBMITTED, None, "t2");
        assert_eq!(c[0].last_update_time.as_deref(), Some("t1"));
    }

    #[test]
    fn removing_keeps_the_condition_false_and_clears_the_error() {
        let mut c = Vec::new();
        set_error(
            &mut c,
            MACHINE_NOT_CONTACTABLE,
            "dial tcp: i/o timeout",
            "t1",
        );
        assert_eq!(c[0].status, "True");
        assert_eq!(c[0].reason.as_deref(), Some("Error"));
        assert_eq!(c[0].message.as_deref(), Some("dial tcp: i/o timeout"));
        set_false(&mut c, MACHINE_NOT_CONTACTABLE, "t2");
        assert_eq!(c.len(), 1, "wrangler never removes a condition");
        assert_eq!(c[0].status, "False");
        assert_eq!(c[0].reason, None);
        assert_eq!(c[0].message, None);
        assert_eq!(c[0].last_update_time.as_deref(), Some("t2"));
        assert!(!is_true(&c, MACHINE_NOT_CONTACTABLE));
    }

    #[test]
    fn removing_an_absent_condition_adds_nothing() {
        let mut c = Vec::new();
        set_false(&mut c, BMC_JOB_ERROR, "t1");
        assert!(c.is_empty());
    }

    #[test]
    fn a_new_error_message_touches_the_time_the_same_one_does_not() {
        let mut c = Vec::new();
        set_error(&mut c, MACHINE_NOT_CONTACTABLE, "a", "t1");
        set_error(&mut c, MACHINE_NOT_CONTACTABLE, "a", "t2");
        assert_eq!(c[0].last_update_time.as_deref(), Some("t1"));
        set_error(&mut c, MACHINE_NOT_CONTACTABLE, "b", "t3");
        assert_eq!(c[0].last_update_time.as_deref(), Some("t3"));
        assert_eq!(c[0].message.as_deref(), Some("b"));
    }

    #[test]
    fn go_seeder_conditions_are_read_as_they_are() {
        let c: Vec<WranglerCondition> = serde_json::from_value(serde_json::json!([
            {"type": "bmcObjectCreated", "status": "True", "lastUpdateTime": "2023-03-26T22:50:15Z"},
            {"type": "bmcJobErrorr", "status": "False", "lastUpdateTime": "2023-03-26T22:51:15Z"},
            {"type": "machineNotContactable", "status": "True", "reason": "Error", "message": "x", "lastUpdateTime": "2023-03-26T22:52:15Z"}
        ]))
        .unwrap();
        assert!(is_true(&c, BMC_OBJECT_CREATED));
        assert!(!is_true(&c, BMC_JOB_ERROR));
        assert!(is_true(&c, MACHINE_NOT_CONTACTABLE));
        let mut same = c.clone();
        set_true(&mut same, BMC_OBJECT_CREATED, None, "now");
        set_false(&mut same, BMC_JOB_ERROR, "now");
        assert_eq!(same, c, "nothing to write when the state is already there");
    }
}
