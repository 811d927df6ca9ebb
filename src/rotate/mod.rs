//! The per-spoke pipeline: observe -> decide -> extract -> validate -> seal, then publish
//! (a commit and one push per tick, or a review branch) and verify on the hub.
//!
//! Spokes run concurrently up to a bound and one spoke's failure never blocks another;
//! commits are made one at a time, in configuration order, under the repo lock, each as
//! soon as its spoke and every spoke before it are through. A
//! credential is committed only after it worked against the live API, so a working
//! committed credential is never replaced by one that was not validated.

mod context;
pub mod decide;
mod direct;
mod error;
mod federated;
mod message;
mod migrate;
pub mod observe;
mod output;
pub(crate) mod progress;
mod reconcile;
pub mod refresh;
pub mod review;
pub mod sealing_key;
pub mod state;
mod tick;
mod tick_report;

pub use decide::{Decision, Reason};
pub use error::Stage;
pub use error::{ForgeFailure, ReviewError, SpokeError, Unendorsed};
pub use migrate::{Migration, MigrationState};
pub use observe::{Committed, Observation};
pub use progress::{Progress, Step};
pub use tick::tick;
pub use tick_report::{CredentialReport, Outcome, RepoFailure, RepoStage, SpokeReport, TickReport};

pub use crate::repo::Beside;
pub use context::{Closed, Context, DemoKey, Gate, Options};
use reconcile::Proposal;
