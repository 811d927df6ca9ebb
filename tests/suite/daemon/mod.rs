//! daemon: `spokekeeper run` (schedule, endpoints, signals, the HTTP port's limits) and
//! leader election.

mod lease;
mod port;
mod run;
