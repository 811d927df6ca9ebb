//! alerts: the sinks, `spokekeeper check`'s grading, and the chart's rules and /metrics
//! against real Prometheus tools.

mod check;
mod observability;
mod sinks;
