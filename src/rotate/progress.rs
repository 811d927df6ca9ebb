//! Where a tick is, for a person watching `rotate` on a terminal. The pipeline only
//! calls [`Progress::emit`]; what is shown (and whether) is the caller's business.

use std::fmt;
use std::sync::Arc;

/// One step of a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// The tick works on `total` spokes.
    Start { total: usize },
    /// `spoke` entered `stage` (probe, extract and validate, seal; commit, once it and
    /// every spoke before it are done).
    Stage { spoke: &'a str, stage: &'static str },
    /// `spoke` is through its own stages up to its commit.
    Done { spoke: &'a str },
    /// The whole fleet's step after the spokes (push, hub).
    Fleet { stage: &'static str },
}

type Callback = dyn Fn(Step<'_>) + Send + Sync;

/// A callback for each [`Step`]; the default shows nothing.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<Callback>>);

impl Progress {
    pub fn new(f: impl Fn(Step<'_>) + Send + Sync + 'static) -> Progress {
        Progress(Some(Arc::new(f)))
    }

    pub(crate) fn emit(&self, step: Step<'_>) {
        if let Some(f) = &self.0 {
            f(step);
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(shown)"
        } else {
            "Progress(none)"
        })
    }
}
