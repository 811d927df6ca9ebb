//! Tests with tight wall-clock bounds, kept apart from the real stack.
//!
//! As separate test binaries, a test asserting that a 2 s timeout fired within 3.5 s never
//! ran beside a real-stack test (etcd, kube-apiserver, controllers starting: both cores
//! busy for seconds). In one binary it can. A real-stack test holds [`heavy`] (shared with
//! the other real-stack tests), a test with a tight bound holds [`exclusive`]: the two
//! never overlap, and everything else runs as before.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static GATE: RwLock<()> = RwLock::new(());

/// Held by a test, across its awaits too: each test has its own runtime, and the lock is
/// taken once, before the first await, so no task of the runtime can wait on it.
pub struct Heavy {
    _gate: RwLockReadGuard<'static, ()>,
}
pub struct Exclusive {
    _gate: RwLockWriteGuard<'static, ()>,
}

/// Held by a test that runs real Kubernetes components, for its whole length.
pub fn heavy() -> Heavy {
    // A test that panicked while holding it poisoned nothing this lock protects.
    Heavy {
        _gate: GATE.read().unwrap_or_else(|e| e.into_inner()),
    }
}

/// Held by a test whose assertions bound wall-clock time closely.
pub fn exclusive() -> Exclusive {
    Exclusive {
        _gate: GATE.write().unwrap_or_else(|e| e.into_inner()),
    }
}
