//! Reaching a spoke: SSH extraction, TLS probe, live API check.
