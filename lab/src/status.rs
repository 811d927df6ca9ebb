//! The metav1.Status failure every emulated API server answers with, as kube-apiserver
//! writes it; each server adds its own headers. The conformance tests hold each emulator
//! to its real counterpart.

use serde_json::{Value, json};

/// `{"kind": "Status", ..., "status": "Failure"}` with `details` when given.
pub(crate) fn failure(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    if let Some(d) = details {
        body["details"] = d;
    }
    body
}
