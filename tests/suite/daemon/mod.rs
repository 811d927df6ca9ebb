//! daemon: `spokekeeper run` (schedule, endpoints, signals) and leader election.

mod lease;
mod run;
