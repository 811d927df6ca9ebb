//! alerts: the sinks, `spokekeeper check`'s grading, the chart's rules and /metrics
//! against real Prometheus tools, and the Grafana dashboard's queries on a real scrape.

mod check;
mod dashboard;
mod gated;
mod observability;
mod sinks;
