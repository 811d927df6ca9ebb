//! Before a ConfigMap naming the spoke's own hub ServiceAccount is committed: Flux's
//! controllers on the hub must run with the ObjectLevelWorkloadIdentity feature gate, or
//! they fail on it ([`crate::hub::gate`]).

use super::{SpokeError, fed};
use crate::config::FederatedPolicy;
use crate::federate::FederateError;
use crate::hub::gate::{CONTROLLERS, Gate, NAMESPACE};

/// Ok when the spoke has no account of its own, or every controller installed on the hub
/// runs with the gate; else why not, with the fix.
pub(super) async fn open(
    hub: &crate::hub::Hub,
    policy: &FederatedPolicy,
) -> Result<(), SpokeError> {
    let Some(account) = &policy.own_account else {
        return Ok(());
    };
    let mut off = Vec::new();
    let mut absent = 0;
    for name in CONTROLLERS {
        match hub.flux_gate(name).await {
            Ok(Gate::On) => {}
            Ok(Gate::Off) => off.push(format!("{NAMESPACE}/{name}")),
            Ok(Gate::Absent) => absent += 1,
            Err(e) => {
                return Err(fed(FederateError::GateUnseen {
                    account: account.to_string(),
                    why: crate::text::one_line(&e.to_string(), 300),
                }));
            }
        }
    }
    if !off.is_empty() {
        let deployments = match off.as_slice() {
            [one] => format!("Deployment {one} runs"),
            _ => format!("Deployments {} run", off.join(" and ")),
        };
        return Err(fed(FederateError::GateOff {
            account: account.to_string(),
            deployments,
        }));
    }
    if absent == CONTROLLERS.len() {
        return Err(fed(FederateError::GateUnseen {
            account: account.to_string(),
            why: format!(
                "the hub has no Deployment {NAMESPACE}/{} or {NAMESPACE}/{}",
                CONTROLLERS[0], CONTROLLERS[1]
            ),
        }));
    }
    Ok(())
}
